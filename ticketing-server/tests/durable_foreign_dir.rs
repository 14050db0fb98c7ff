//! A `--data-dir` that holds files but is not a Ticketing data dir is
//! refused with exit 2, its path and the reason, and left untouched
//! (docs/deployment.md, "Durability").

mod common;
use common::*;

#[test]
fn a_foreign_dir_is_exit_2_and_untouched() {
    let dir = temp_data_dir("foreign");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("postgres.conf"), "shared_buffers = 1GB\n").unwrap();
    let before = dir_bytes(&dir);
    let (code, stderr) = run_failing(&[], &["--data-dir", dir.to_str().unwrap()]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains(dir.to_str().unwrap()) && stderr.contains("not a Ticketing data dir"), "{stderr}");
    assert_eq!(dir_bytes(&dir), before);

    // A plain file is not a directory either.
    let file = dir.join("postgres.conf");
    let (code, stderr) = run_failing(&[("TICKETING_DATA_DIR", file.to_str().unwrap())], &[]);
    assert_eq!(code, Some(2), "{stderr}");
    assert_eq!(dir_bytes(&dir), before);
    std::fs::remove_dir_all(&dir).unwrap();
}
