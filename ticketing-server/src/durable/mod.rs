//! Durable mode (`--data-dir DIR`, docs/deployment.md "Durability"): the
//! data directory holds this node's identity, its Raft vote and log (or the
//! standalone server's journal of committed batches) and its latest snapshot.
//!
//! ```text
//! DIR/identity.json   format, version, mode, NodeId, domain, checksum (written atomically)
//! DIR/ticketing.lock  held (flock) while a server runs on DIR: one process per DIR
//! DIR/log/            the `raft-log` write-ahead log: CRC32-checksummed records in chunk files
//! DIR/snapshot        the latest snapshot: a JSON header line, then the lock state (TKLS)
//! ```
//!
//! - `journal`: the `raft-log` types shared by the cluster log store and the
//!   standalone journal, and the flush callbacks.
//! - `standalone`: the durable standalone [`Replicator`](crate::replication::Replicator).
//!
//! Opening refuses, with the path and the reason and without writing
//! anything, a DIR that is not a Ticketing data dir, is of another format
//! version or mode, or is corrupt; a DIR another process holds is refused too.
//!
//! Once running, a failed write or fsync of anything in DIR is fail-stop
//! ([`fail_stop`]).

pub mod journal;
pub mod standalone;
pub mod torn;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use tracing::info;

/// The `format` field of `identity.json`.
pub const FORMAT: &str = "ticketing-data-dir";
/// The data dir format version this build writes and reads.
pub const VERSION: u32 = 1;
const IDENTITY: &str = "identity.json";
const LOCK: &str = "ticketing.lock";
const LOG: &str = "log";
const SNAPSHOT: &str = "snapshot";
const SNAPSHOT_FORMAT: &str = "ticketing-snapshot";

/// What kind of server a DIR belongs to (a DIR serves one kind only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// A standalone server: the journal of committed batches.
    Standalone,
    /// A cluster node: the Raft vote, log and snapshots.
    Cluster,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Standalone => "standalone",
            Mode::Cluster => "cluster",
        })
    }
}

/// Why a data dir cannot be used. The binary prints it and exits 2
/// ([`DataDirError::InUse`]: exit 1); nothing in DIR was changed.
#[derive(Debug)]
#[non_exhaustive]
pub enum DataDirError {
    /// DIR holds files but is not a Ticketing data dir.
    Foreign {
        /// DIR.
        path: PathBuf,
        /// What was found.
        why: String,
    },
    /// A data dir of a format version this build does not read.
    Version {
        /// `identity.json`.
        path: PathBuf,
        /// Its version.
        found: u32,
    },
    /// A data dir of the other mode (standalone vs cluster).
    Mode {
        /// DIR.
        path: PathBuf,
        /// The DIR's mode.
        found: Mode,
        /// This server's mode.
        wanted: Mode,
    },
    /// A file of DIR is damaged.
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        why: String,
    },
    /// Another process holds DIR.
    InUse {
        /// DIR.
        path: PathBuf,
    },
    /// DIR cannot be read or written.
    Io {
        /// The file or directory.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
}

impl fmt::Display for DataDirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DataDirError::Foreign { path, why } => {
                write!(f, "--data-dir {}: not a Ticketing data dir ({why}); nothing was changed", path.display())
            }
            DataDirError::Version { path, found } => write!(
                f,
                "--data-dir {}: data dir format version {found}, this build reads version {VERSION}; nothing was changed",
                path.display()
            ),
            DataDirError::Mode { path, found, wanted } => write!(
                f,
                "--data-dir {}: holds a {found} server's data, this is a {wanted} server; nothing was changed",
                path.display()
            ),
            DataDirError::Corrupt { path, why } => {
                write!(f, "--data-dir: {} is corrupt: {why}; nothing was changed", path.display())
            }
            DataDirError::InUse { path } => write!(
                f,
                "--data-dir {}: in use by another ticketing-server process (one process per data dir); \
                 nothing was changed",
                path.display()
            ),
            DataDirError::Io { path, source } => write!(f, "--data-dir: {}: {source}", path.display()),
        }
    }
}

impl std::error::Error for DataDirError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            DataDirError::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl DataDirError {
    /// The process exit code: 1 for a DIR in use (retrying later may work), else 2.
    pub fn exit_code(&self) -> u8 {
        match self {
            DataDirError::InUse { .. } => 1,
            _ => 2,
        }
    }
}

/// The exit code of a fail-stop (`EX_IOERR`): a write or fsync of the data
/// dir failed.
pub const EXIT_DISK_FAILED: i32 = 74;

/// Fail-stop on a failed write or fsync of `path` in the data dir
/// (docs/deployment.md, "Disk faults"): one log line naming the file and the
/// error, then the process exits [`EXIT_DISK_FAILED`] at once, before
/// anything else is answered. Nothing is retried: after a failed fsync the
/// kernel may have dropped the pages it could not write, so a second fsync
/// could "succeed" without them. What is on disk is what a restart on DIR
/// recovers from; the supervisor restarts the node, and a DIR that cannot be
/// read back is refused with exit 2.
pub fn fail_stop(path: &Path, error: &dyn fmt::Display) -> ! {
    static STOPPING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if STOPPING.swap(true, std::sync::atomic::Ordering::AcqRel) {
        // Another thread is exiting already (one line, one exit).
        loop {
            std::thread::park();
        }
    }
    tracing::error!(
        path = %path.display(),
        %error,
        "writing the data dir failed: stopping at once (fail-stop, exit {EXIT_DISK_FAILED})"
    );
    std::process::exit(EXIT_DISK_FAILED)
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> DataDirError + '_ {
    move |source| DataDirError::Io { path: path.to_owned(), source }
}

/// This node's identity, kept in `identity.json`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Identity {
    /// The NodeId (random, non-zero, below 2^63; 0 for a standalone server).
    pub node_id: u64,
    /// The fencing domain (cluster), once the node belongs to one.
    pub domain: Option<u128>,
}

#[derive(Debug, Serialize, Deserialize)]
struct IdentityFile {
    format: String,
    version: u32,
    mode: Mode,
    node_id: u64,
    /// 32 lowercase hex digits, or absent.
    #[serde(default)]
    domain: Option<String>,
    /// CRC32 of `format|version|mode|node_id|domain`, 8 hex digits.
    check: String,
}

impl IdentityFile {
    fn checksum(&self) -> String {
        let text = format!(
            "{}|{}|{}|{}|{}",
            self.format,
            self.version,
            self.mode,
            self.node_id,
            self.domain.as_deref().unwrap_or("-")
        );
        format!("{:08x}", crc32fast::hash(text.as_bytes()))
    }
}

/// An open data dir: its lock is held until this is dropped.
pub struct DataDir {
    path: PathBuf,
    mode: Mode,
    identity: Mutex<Identity>,
    _lock: Flock<File>,
    log: Option<OpenLog>,
}

/// Opens the log store of a data dir given one ([`DataDir::on_log_store`]).
pub type OpenLog = std::sync::Arc<dyn Fn() -> io::Result<Box<dyn journal::LogStore>> + Send + Sync>;

impl fmt::Debug for DataDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataDir").field("path", &self.path).field("mode", &self.mode).finish()
    }
}

/// Reads and checks `identity.json` (nothing is written).
fn read_identity(dir: &Path, mode: Mode) -> Result<Option<Identity>, DataDirError> {
    let path = dir.join(IDENTITY);
    let text = match fs::read(&path) {
        Ok(t) => t,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_err(&path)(e)),
    };
    let corrupt = |why: String| DataDirError::Corrupt { path: path.clone(), why };
    let value: serde_json::Value = serde_json::from_slice(&text).map_err(|e| corrupt(format!("not JSON: {e}")))?;
    if value.get("format").and_then(|f| f.as_str()) != Some(FORMAT) {
        return Err(DataDirError::Foreign {
            path: dir.to_owned(),
            why: format!("{} is not a {FORMAT} file", path.display()),
        });
    }
    if let Some(v) = value.get("version").and_then(|v| v.as_u64()) {
        if v != u64::from(VERSION) {
            return Err(DataDirError::Version { path, found: u32::try_from(v).unwrap_or(u32::MAX) });
        }
    }
    let file: IdentityFile = serde_json::from_value(value).map_err(|e| corrupt(format!("{e}")))?;
    if file.check != file.checksum() {
        return Err(corrupt("checksum mismatch".into()));
    }
    if file.mode != mode {
        return Err(DataDirError::Mode { path: dir.to_owned(), found: file.mode, wanted: mode });
    }
    let domain = match &file.domain {
        None => None,
        Some(d) => {
            let mut b = [0u8; 16];
            hex::decode_to_slice(d, &mut b).map_err(|_| corrupt(format!("domain {d:?} is not 32 hex digits")))?;
            Some(u128::from_be_bytes(b))
        }
    };
    if mode == Mode::Cluster && (file.node_id == 0 || file.node_id >= 1 << 63) {
        return Err(corrupt(format!("node_id {} out of range", file.node_id)));
    }
    Ok(Some(Identity { node_id: file.node_id, domain }))
}

/// Opens `--data-dir` if the configuration names one (durable mode), for
/// the configuration's mode; `None` in memory mode.
pub fn open_for(config: &crate::config::Config) -> Result<Option<std::sync::Arc<DataDir>>, DataDirError> {
    let Some(path) = &config.data_dir else { return Ok(None) };
    let mode = if config.is_standalone() { Mode::Standalone } else { Mode::Cluster };
    let dir = DataDir::open(path, mode, || crate::cluster::random_node_id().0)?;
    info!(data_dir = %path.display(), %mode, node_id = dir.identity().node_id, "durable mode: data dir open");
    Ok(Some(std::sync::Arc::new(dir)))
}

/// Writes `bytes` to `path` atomically: a temporary file, fsync, rename, fsync of the directory.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = path.parent().unwrap_or(Path::new("."));
    let mut tmp_name = path.file_name().unwrap_or_default().to_owned();
    tmp_name.push(".tmp");
    let tmp = dir.join(tmp_name);
    {
        let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    File::open(dir)?.sync_all()
}

impl DataDir {
    /// Opens (or creates) the data dir at `path` for a `mode` server: checks
    /// what is there, takes the lock, creates the identity of a new DIR
    /// (`new_node_id` draws the NodeId).
    pub fn open(path: &Path, mode: Mode, new_node_id: impl FnOnce() -> u64) -> Result<DataDir, DataDirError> {
        // 1. Look before writing anything: a foreign or bad DIR stays untouched.
        match fs::read_dir(path) {
            Ok(entries) => {
                let names: Vec<String> = entries
                    .filter_map(Result::ok)
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    // A fresh file system's root may serve as DIR.
                    .filter(|n| n != "lost+found")
                    .collect();
                if !names.is_empty() && !names.iter().any(|n| n == IDENTITY) {
                    let mut shown: Vec<&str> = names.iter().map(String::as_str).take(3).collect();
                    shown.sort_unstable();
                    return Err(DataDirError::Foreign {
                        path: path.to_owned(),
                        why: format!("it holds {} but no {IDENTITY}", shown.join(", ")),
                    });
                }
                read_identity(path, mode)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => {
                return Err(DataDirError::Foreign { path: path.to_owned(), why: "not a directory".into() });
            }
            Err(e) => return Err(io_err(path)(e)),
        }
        fs::create_dir_all(path).map_err(io_err(path))?;
        // 2. One process per DIR.
        let lock_path = path.join(LOCK);
        let f = OpenOptions::new().read(true).write(true).create(true).truncate(false).open(&lock_path);
        let f = f.map_err(io_err(&lock_path))?;
        let lock = Flock::lock(f, FlockArg::LockExclusiveNonblock).map_err(|(_, errno)| {
            if errno == nix::errno::Errno::EWOULDBLOCK {
                DataDirError::InUse { path: path.to_owned() }
            } else {
                DataDirError::Io { path: lock_path.clone(), source: io::Error::from(errno) }
            }
        })?;
        // 3. Under the lock: the identity (created for a new DIR).
        let identity = match read_identity(path, mode)? {
            Some(id) => id,
            None => {
                let id = Identity { node_id: if mode == Mode::Cluster { new_node_id() } else { 0 }, domain: None };
                write_identity(path, mode, &id).map_err(io_err(&path.join(IDENTITY)))?;
                id
            }
        };
        fs::create_dir_all(path.join(LOG)).map_err(io_err(&path.join(LOG)))?;
        Ok(DataDir { path: path.to_owned(), mode, identity: Mutex::new(identity), _lock: lock, log: None })
    }

    /// This DIR with its journal on the store `open` opens instead of
    /// `raft-log` in `log/`: a simulation's disk (docs/verification.md,
    /// "Simulation"). Such a DIR also writes its snapshots on the calling
    /// task ([`DataDir::save_snapshot_blocking`]).
    pub fn on_log_store(mut self, open: OpenLog) -> DataDir {
        self.log = Some(open);
        self
    }

    /// The store given by [`DataDir::on_log_store`], if any.
    pub fn log_store(&self) -> Option<&OpenLog> {
        self.log.as_ref()
    }

    /// DIR.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The Raft log's (or journal's) directory.
    pub fn log_dir(&self) -> PathBuf {
        self.path.join(LOG)
    }

    /// The identity read at open (or as last saved).
    pub fn identity(&self) -> Identity {
        *self.identity.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records the fencing domain (fsynced before it returns).
    pub fn save_domain(&self, domain: u128) -> Result<(), DataDirError> {
        let mut g = self.identity.lock().unwrap_or_else(|p| p.into_inner());
        let next = Identity { node_id: g.node_id, domain: Some(domain) };
        write_identity(&self.path, self.mode, &next).map_err(io_err(&self.path.join(IDENTITY)))?;
        *g = next;
        Ok(())
    }

    /// Writes the snapshot atomically: `meta` (JSON) and the lock state `data`.
    pub fn save_snapshot(&self, meta: &serde_json::Value, data: &[u8]) -> Result<(), DataDirError> {
        let path = self.path.join(SNAPSHOT);
        let header = serde_json::json!({
            "format": SNAPSHOT_FORMAT,
            "version": VERSION,
            "meta": meta,
            "len": data.len(),
            "crc32": snapshot_crc(meta, data),
        });
        let mut bytes = serde_json::to_vec(&header).map_err(|e| io_err(&path)(io::Error::other(e)))?;
        bytes.push(b'\n');
        bytes.extend_from_slice(data);
        write_atomic(&path, &bytes).map_err(io_err(&path))
    }

    /// [`DataDir::save_snapshot`] off the async threads, on a blocking
    /// thread; on the calling task for a DIR given its own log store
    /// ([`DataDir::on_log_store`]: a simulation has no other thread). The
    /// outer error: the blocking thread ended without an answer.
    pub async fn save_snapshot_blocking(
        self: &std::sync::Arc<Self>,
        meta: serde_json::Value,
        data: Vec<u8>,
    ) -> Result<Result<(), DataDirError>, tokio::task::JoinError> {
        if self.log.is_some() {
            return Ok(self.save_snapshot(&meta, &data));
        }
        let dir = self.clone();
        tokio::task::spawn_blocking(move || dir.save_snapshot(&meta, &data)).await
    }

    /// The snapshot file.
    pub fn snapshot_path(&self) -> PathBuf {
        self.path.join(SNAPSHOT)
    }

    /// Reads the snapshot, if any: its meta and the lock state bytes (checked against their checksum).
    pub fn load_snapshot(&self) -> Result<Option<(serde_json::Value, Vec<u8>)>, DataDirError> {
        let path = self.path.join(SNAPSHOT);
        let mut bytes = match fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(io_err(&path)(e)),
        };
        let corrupt = |why: String| DataDirError::Corrupt { path: path.clone(), why };
        let nl = bytes.iter().position(|b| *b == b'\n').ok_or_else(|| corrupt("no header line".into()))?;
        let header: serde_json::Value =
            serde_json::from_slice(&bytes[..nl]).map_err(|e| corrupt(format!("header is not JSON: {e}")))?;
        if header.get("format").and_then(|f| f.as_str()) != Some(SNAPSHOT_FORMAT) {
            return Err(corrupt("not a Ticketing snapshot".into()));
        }
        let version = header.get("version").and_then(|v| v.as_u64());
        if version != Some(u64::from(VERSION)) {
            return Err(DataDirError::Version { path, found: version.map_or(0, |v| v as u32) });
        }
        let data = bytes.split_off(nl + 1);
        let meta = header.get("meta").cloned().unwrap_or_default();
        if header.get("len").and_then(|v| v.as_u64()) != Some(data.len() as u64) {
            return Err(corrupt("length mismatch (truncated?)".into()));
        }
        if header.get("crc32").and_then(|v| v.as_u64()) != Some(u64::from(snapshot_crc(&meta, &data))) {
            return Err(corrupt("checksum mismatch".into()));
        }
        Ok(Some((meta, data)))
    }

    /// A corrupt-file error about the log.
    pub fn log_error(&self, e: io::Error) -> DataDirError {
        match e.kind() {
            io::ErrorKind::WouldBlock => DataDirError::InUse { path: self.path.clone() },
            _ => DataDirError::Corrupt { path: self.log_dir(), why: e.to_string() },
        }
    }
}

fn snapshot_crc(meta: &serde_json::Value, data: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(meta.to_string().as_bytes());
    h.update(data);
    h.finalize()
}

fn write_identity(dir: &Path, mode: Mode, id: &Identity) -> io::Result<()> {
    let mut file = IdentityFile {
        format: FORMAT.into(),
        version: VERSION,
        mode,
        node_id: id.node_id,
        domain: id.domain.map(|d| hex::encode(d.to_be_bytes())),
        check: String::new(),
    };
    file.check = file.checksum();
    let mut bytes = serde_json::to_vec_pretty(&file).map_err(io::Error::other)?;
    bytes.push(b'\n');
    write_atomic(&dir.join(IDENTITY), &bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let p = std::env::temp_dir().join(format!("ticketing-dd-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&p);
        p
    }

    #[test]
    fn identity_survives_reopen_and_domain_is_saved() {
        let p = tmp("identity");
        let d = DataDir::open(&p, Mode::Cluster, || 42).unwrap();
        assert_eq!(d.identity(), Identity { node_id: 42, domain: None });
        d.save_domain(7).unwrap();
        drop(d);
        let d = DataDir::open(&p, Mode::Cluster, || 99).unwrap();
        assert_eq!(d.identity(), Identity { node_id: 42, domain: Some(7) });
        drop(d);
        let err = DataDir::open(&p, Mode::Standalone, || 1).unwrap_err();
        assert!(matches!(err, DataDirError::Mode { .. }), "{err}");
        fs::remove_dir_all(&p).unwrap();
    }

    #[test]
    fn second_open_is_refused_while_held() {
        let p = tmp("lock");
        let d = DataDir::open(&p, Mode::Standalone, || 0).unwrap();
        let err = DataDir::open(&p, Mode::Standalone, || 0).unwrap_err();
        assert!(matches!(err, DataDirError::InUse { .. }), "{err}");
        assert_eq!(err.exit_code(), 1);
        drop(d);
        DataDir::open(&p, Mode::Standalone, || 0).unwrap();
        fs::remove_dir_all(&p).unwrap();
    }

    #[test]
    fn foreign_version_and_corrupt_dirs_are_refused_untouched() {
        let p = tmp("foreign");
        fs::create_dir_all(&p).unwrap();
        fs::write(p.join("notes.txt"), "hello").unwrap();
        let err = DataDir::open(&p, Mode::Standalone, || 0).unwrap_err();
        assert!(matches!(err, DataDirError::Foreign { .. }), "{err}");
        assert_eq!(fs::read_dir(&p).unwrap().count(), 1, "nothing added");
        fs::remove_dir_all(&p).unwrap();

        let p = tmp("version");
        drop(DataDir::open(&p, Mode::Standalone, || 0).unwrap());
        let text = fs::read_to_string(p.join(IDENTITY)).unwrap().replace("\"version\": 1", "\"version\": 9");
        fs::write(p.join(IDENTITY), &text).unwrap();
        let err = DataDir::open(&p, Mode::Standalone, || 0).unwrap_err();
        assert!(matches!(err, DataDirError::Version { found: 9, .. }), "{err}");
        let text = text.replace("\"version\": 9", "\"version\": 1").replace("\"node_id\": 0", "\"node_id\": 5");
        fs::write(p.join(IDENTITY), &text).unwrap();
        let err = DataDir::open(&p, Mode::Standalone, || 0).unwrap_err();
        assert!(matches!(err, DataDirError::Corrupt { .. }), "{err}");
        assert_eq!(fs::read_to_string(p.join(IDENTITY)).unwrap(), text, "unchanged");
        fs::remove_dir_all(&p).unwrap();
    }

    #[test]
    fn snapshot_round_trips_and_damage_is_detected() {
        let p = tmp("snap");
        let d = DataDir::open(&p, Mode::Standalone, || 0).unwrap();
        assert!(d.load_snapshot().unwrap().is_none());
        let meta = serde_json::json!({"index": 5});
        d.save_snapshot(&meta, b"TKLS-data").unwrap();
        assert_eq!(d.load_snapshot().unwrap(), Some((meta, b"TKLS-data".to_vec())));
        let mut bytes = fs::read(p.join(SNAPSHOT)).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 1;
        fs::write(p.join(SNAPSHOT), &bytes).unwrap();
        assert!(matches!(d.load_snapshot().unwrap_err(), DataDirError::Corrupt { .. }));
        fs::remove_dir_all(&p).unwrap();
    }
}
