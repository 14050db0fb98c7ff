//! [`FaultFs`]: a FUSE file system that simulates power loss and disk faults
//! (like LazyFS), for the data dir of a durable server under test.
//!
//! `faultfs/faultfs.py` (Debian's `python3-pyfuse3`, run by
//! `/usr/bin/python3`) mounts a passthrough of a backing directory: data
//! written through the mount stays in its memory ("dirty", as in the page
//! cache) until the file is fsync'ed or fdatasync'ed; metadata (create,
//! rename, unlink, truncate, ...) reaches the backing directory at once.
//! [`FaultFs::power_loss`] drops every dirty byte, as a power cut would;
//! [`FaultFs::fail`] makes operations fail with an errno (a failing fsync
//! drops the data it would have written, as Linux does). See
//! `faultfs/README.md`.
//!
//! ```no_run
//! use ticketing_testkit::faultfs::FaultFs;
//!
//! let fs = FaultFs::mount("my-test").expect("faultfs");
//! let data_dir = fs.path().join("d"); // the server's --data-dir
//! // ... start the server on data_dir, make requests, SIGKILL it ...
//! fs.power_loss().expect("power loss");
//! // ... restart the server on data_dir: only fsynced data is there.
//! ```

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::MetadataExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// The interpreter that imports Debian's `python3-pyfuse3`.
pub const PYTHON: &str = "/usr/bin/python3";
/// How to install what faultfs needs (Debian/Ubuntu, as root).
pub const INSTALL_HINT: &str = "apt-get install fuse3 python3-pyfuse3";
/// The longest wait for the mount to appear.
const MOUNT_TIMEOUT: Duration = Duration::from_secs(20);
/// The longest wait for the answer to one control command.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(30);
/// The environment variable that fixes the seed of `powerloss torn`.
pub const SEED_ENV: &str = "TICKETING_FAULTFS_SEED";

/// A mounted faultfs: a temporary backing dir (the "disk"), its mount point
/// ([`FaultFs::path`]) and the control socket. Dropping it unmounts
/// (`fusermount3 -u -z`, else `umount -l`), stops the process and removes
/// the temporary directories.
#[derive(Debug)]
pub struct FaultFs {
    child: Option<Child>,
    root: PathBuf,
    backing: PathBuf,
    mnt: PathBuf,
    socket: PathBuf,
    log: PathBuf,
}

impl FaultFs {
    /// `faultfs/faultfs.py` in this crate's sources.
    pub fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("faultfs").join("faultfs.py")
    }

    /// Whether faultfs can run here: `/dev/fuse` can be opened,
    /// `/usr/bin/python3` imports `pyfuse3` and `trio`, and `fusermount3`
    /// exists. The error says what is missing and how to install it.
    pub fn available() -> Result<(), String> {
        let hint = format!("install it with `{INSTALL_HINT}` (as root)");
        if !Path::new("/dev/fuse").exists() {
            return Err("faultfs: /dev/fuse does not exist: FUSE is not available on this machine \
                        (in a container: --device /dev/fuse --cap-add SYS_ADMIN)"
                .into());
        }
        if let Err(e) = fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
            return Err(format!("faultfs: cannot open /dev/fuse: {e}"));
        }
        let script = Self::script();
        if !script.exists() {
            return Err(format!("faultfs: {} does not exist", script.display()));
        }
        match Command::new(PYTHON).args(["-c", "import pyfuse3, trio"]).stdin(Stdio::null()).output() {
            Err(e) => return Err(format!("faultfs: cannot run {PYTHON} ({e}): {hint}")),
            Ok(out) if !out.status.success() => {
                let err = String::from_utf8_lossy(&out.stderr);
                let last = err.lines().last().unwrap_or("").trim().to_owned();
                return Err(format!("faultfs: {PYTHON} cannot import pyfuse3 ({last}): {hint}"));
            }
            Ok(_) => {}
        }
        match Command::new("fusermount3").arg("-V").stdout(Stdio::null()).stderr(Stdio::null()).status() {
            Ok(_) => Ok(()),
            Err(e) => Err(format!("faultfs: fusermount3 not found ({e}): {hint}")),
        }
    }

    /// Mounts a new faultfs on an empty backing dir, both under
    /// [`std::env::temp_dir`] and unique to this process and call (`name`
    /// goes into the paths, to recognise them). Waits at most 20 s for the
    /// mount. The seed of `powerloss torn` is random unless
    /// `TICKETING_FAULTFS_SEED` is set (faultfs logs it).
    pub fn mount(name: &str) -> Result<FaultFs, String> {
        Self::available()?;
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let tag: String =
            name.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
        let root = std::env::temp_dir().join(format!("faultfs-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let backing = root.join("backing");
        let mnt = root.join("mnt");
        for dir in [&backing, &mnt] {
            fs::create_dir_all(dir).map_err(|e| format!("faultfs: cannot create {}: {e}", dir.display()))?;
        }
        // A Unix socket path holds at most 107 bytes.
        let mut socket = root.join("ctl.sock");
        if socket.as_os_str().len() > 100 {
            socket = PathBuf::from(format!("/tmp/faultfs-{}-{n}.sock", std::process::id()));
        }
        let log = root.join("faultfs.log");
        let log_file = File::create(&log).map_err(|e| format!("faultfs: cannot create {}: {e}", log.display()))?;

        let mut cmd = Command::new(PYTHON);
        cmd.arg(Self::script()).arg(&backing).arg(&mnt).arg(&socket).arg("--exit-with-parent");
        if let Ok(seed) = std::env::var(SEED_ENV) {
            cmd.arg("--seed").arg(seed.trim());
        }
        cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(log_file);
        let mut child = cmd.spawn().map_err(|e| format!("faultfs: cannot start {PYTHON}: {e}"))?;
        let stdout = child.stdout.take();
        let fs = FaultFs { child: Some(child), root, backing, mnt, socket, log };

        // The first line of stdout, read by a thread that then drains the
        // rest (so the process never blocks on a full pipe).
        let (tx, rx) = mpsc::channel();
        if let Some(stdout) = stdout {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stdout);
                let mut line = String::new();
                let first = reader.read_line(&mut line).map(|_| line);
                let _ = tx.send(first);
                let _ = std::io::copy(&mut reader, &mut std::io::sink());
            });
        }
        let failed = |fs: FaultFs, why: String| -> Result<FaultFs, String> {
            let log = fs.log_text();
            drop(fs);
            Err(format!("faultfs: {why}; its log:\n{log}"))
        };
        match rx.recv_timeout(MOUNT_TIMEOUT) {
            Ok(Ok(line)) if line.starts_with("faultfs: mounted") => Ok(fs),
            Ok(Ok(line)) if line.is_empty() => failed(fs, "exited before mounting".into()),
            Ok(Ok(line)) => failed(fs, format!("unexpected first line {:?}", line.trim_end())),
            Ok(Err(e)) => failed(fs, format!("cannot read its output: {e}")),
            Err(_) => failed(fs, format!("not mounted after {} s", MOUNT_TIMEOUT.as_secs())),
        }
    }

    /// The mount point: put the server's `--data-dir` under it.
    pub fn path(&self) -> &Path {
        &self.mnt
    }

    /// The backing dir: what is durable (what survives a power loss).
    pub fn backing(&self) -> &Path {
        &self.backing
    }

    /// The last 8 KiB of faultfs' log (its stderr).
    pub fn log_text(&self) -> String {
        let mut text = String::new();
        if let Ok(mut f) = File::open(&self.log) {
            let _ = f.read_to_string(&mut text);
        }
        let mut start = text.len().saturating_sub(8192);
        while !text.is_char_boundary(start) {
            start += 1;
        }
        text[start..].to_owned()
    }

    /// One control command (`powerloss`, `powerloss torn`, `powerloss zero`,
    /// `fail OP ERRNO`, `fail off`, `status`): the answer after `ok`, or the
    /// `error ...` answer (or the I/O error) as the error. 30 s at most.
    pub fn command(&self, command: &str) -> Result<String, String> {
        let io = |e: std::io::Error| format!("faultfs: {command:?}: {e}");
        let mut stream = UnixStream::connect(&self.socket).map_err(io)?;
        stream.set_read_timeout(Some(COMMAND_TIMEOUT)).map_err(io)?;
        stream.set_write_timeout(Some(COMMAND_TIMEOUT)).map_err(io)?;
        stream.write_all(format!("{}\n", command.trim()).as_bytes()).map_err(io)?;
        let mut answer = String::new();
        BufReader::new(stream).read_line(&mut answer).map_err(io)?;
        let answer = answer.trim();
        match answer.strip_prefix("ok") {
            Some(rest) if rest.is_empty() || rest.starts_with(' ') => Ok(rest.trim().to_owned()),
            _ if answer.is_empty() => Err(format!("faultfs: {command:?}: no answer")),
            _ => Err(format!("faultfs: {command:?}: {answer}")),
        }
    }

    /// `powerloss`: every byte written and not fsynced is lost. Kill the
    /// processes that use the mount first. `lost_bytes=N files=M`.
    pub fn power_loss(&self) -> Result<String, String> {
        self.command("powerloss")
    }

    /// `powerloss torn`: as [`FaultFs::power_loss`], but a random strict
    /// prefix of each file's last unsynced write reaches the disk.
    pub fn power_loss_torn(&self) -> Result<String, String> {
        self.command("powerloss torn")
    }

    /// `powerloss zero`: as [`FaultFs::power_loss`], but each file keeps the
    /// size its last unsynced write gave it, with zeros instead of the data.
    pub fn power_loss_zero(&self) -> Result<String, String> {
        self.command("powerloss zero")
    }

    /// `fail OP ERRNO`: from now on `op` (write, fsync, create, mkdir,
    /// rename, truncate, unlink, rmdir, or all) fails with `errno` (EIO,
    /// ENOSPC, EROFS, ...). A failing fsync drops the dirty data.
    pub fn fail(&self, op: &str, errno: &str) -> Result<String, String> {
        self.command(&format!("fail {op} {errno}"))
    }

    /// `delay fsync MS`: every fsync of dirty data takes `ms` milliseconds
    /// more, and a power loss meanwhile persists none of it (a slow disk,
    /// which widens the window between a write and its fsync).
    pub fn delay_fsync(&self, ms: u64) -> Result<String, String> {
        self.command(&format!("delay fsync {ms}"))
    }

    /// `crash`, `crash torn` or `crash zero` (`mode` "", "torn", "zero"): a
    /// power cut at this instant with the processes still running (every
    /// change to the disk fails from now on, an fsync in flight persists
    /// nothing). Kill the processes using the mount, then [`FaultFs::thaw`].
    pub fn crash(&self, mode: &str) -> Result<String, String> {
        self.command(format!("crash {mode}").trim_end())
    }

    /// `thaw`: after a [`FaultFs::crash`] and the kills, the disk works again.
    pub fn thaw(&self) -> Result<String, String> {
        self.command("thaw")
    }

    /// `fail off`: no more faults.
    pub fn fail_off(&self) -> Result<String, String> {
        self.command("fail off")
    }

    /// `status`: `dirty_bytes=N fsyncs=N writes=N faults=N ...`.
    pub fn status(&self) -> Result<String, String> {
        self.command("status")
    }

    fn mounted(&self) -> bool {
        match (fs::metadata(&self.mnt), fs::metadata(&self.root)) {
            (Ok(m), Ok(r)) => m.dev() != r.dev(),
            _ => true, // a dead FUSE mount answers ENOTCONN
        }
    }
}

impl Drop for FaultFs {
    fn drop(&mut self) {
        let quiet = |program: &str, args: &[&std::ffi::OsStr]| {
            Command::new(program)
                .args(args)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        let mnt = self.mnt.as_os_str();
        if self.mounted() && !quiet("fusermount3", &["-u".as_ref(), "-z".as_ref(), mnt]) {
            quiet("umount", &["-l".as_ref(), mnt]);
        }
        if let Some(mut child) = self.child.take() {
            // faultfs exits once the kernel ends the unmounted session.
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && matches!(child.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            if matches!(child.try_wait(), Ok(None)) {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
        let _ = fs::remove_file(&self.socket);
        if !self.mounted() {
            let _ = fs::remove_dir_all(&self.root);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mount_or_fail(name: &str) -> FaultFs {
        if let Err(why) = FaultFs::available() {
            if why.contains(INSTALL_HINT) {
                panic!("this test needs faultfs: {why}");
            }
            panic!("this test needs faultfs: {why} (it needs /dev/fuse and `{INSTALL_HINT}`, as root)");
        }
        FaultFs::mount(name).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn faultfs_power_loss_keeps_synced_data_only() {
        let fs = mount_or_fail("unit");
        let synced = fs.path().join("synced");
        let unsynced = fs.path().join("unsynced");
        let mut f = File::create(&synced).unwrap();
        f.write_all(b"fsynced record").unwrap();
        f.sync_data().unwrap();
        drop(f);
        let mut f = File::create(&unsynced).unwrap();
        f.write_all(b"written, never synced").unwrap();
        drop(f);
        assert_eq!(fs::read(&unsynced).unwrap(), b"written, never synced", "dirty data is visible");
        assert!(fs.status().unwrap().starts_with("dirty_bytes=21 "), "{:?}", fs.status());

        let answer = fs.power_loss().unwrap();
        assert!(answer.starts_with("lost_bytes=21 files=1"), "{answer}");
        assert_eq!(fs::read(&synced).unwrap(), b"fsynced record");
        assert_eq!(fs::read(&unsynced).unwrap(), b"", "unsynced data survived the power loss");
        assert_eq!(fs::read(fs.backing().join("synced")).unwrap(), b"fsynced record");
        assert!(fs.command("no such command").is_err());

        let root = fs.root.clone();
        drop(fs);
        assert!(!root.exists(), "{} was not removed", root.display());
    }
}
