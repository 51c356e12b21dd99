//! `sealvol seal` as a user runs it: same tree, same digest; any byte,
//! mode or name change, another digest; bad input, a one-line error.

use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::Path;

use sealvol_tests::sealvol;
use serde_json::Value;

fn seal_json(cache: &Path, dir: &Path, extra: &[&str]) -> Value {
    let mut args = vec!["seal", dir.to_str().unwrap(), "--output", "json"];
    args.extend_from_slice(extra);
    let out = sealvol(cache, &args);
    assert!(
        out.status.success(),
        "seal failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("seal prints one JSON object")
}

fn digest(cache: &Path, dir: &Path) -> String {
    seal_json(cache, dir, &[])["digest"]
        .as_str()
        .unwrap()
        .to_string()
}

fn sample(root: &Path) {
    std::fs::create_dir_all(root.join("model/empty")).unwrap();
    std::fs::write(root.join("model/config.json"), b"{\"hidden_size\": 64}\n").unwrap();
    let weights: Vec<u8> = (0..3_000_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(root.join("model/weights.safetensors"), weights).unwrap();
    std::fs::write(root.join("README.md"), b"hello\n").unwrap();
    symlink("model/config.json", root.join("config.json")).unwrap();
}

#[test]
fn same_tree_same_digest_and_every_change_shows() {
    let cache = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    let b = tempfile::tempdir().unwrap();
    sample(a.path());
    sample(b.path());
    let base = digest(cache.path(), a.path());
    assert!(base.starts_with("b3:") && base.len() == 67, "{base}");
    assert_eq!(digest(cache.path(), a.path()), base, "re-seal");
    assert_eq!(digest(cache.path(), b.path()), base, "a copy elsewhere");

    let v = seal_json(cache.path(), a.path(), &[]);
    assert_eq!(v["files"], 3);
    assert_eq!(v["bytes"], 3_000_000 + 20 + 6);
    assert!(v["chunks"].as_u64().unwrap() >= 3);
    for k in ["unique_chunks", "duration_seconds"] {
        assert!(v.get(k).is_some(), "missing {k}");
    }

    // One byte.
    let w = b.path().join("model/weights.safetensors");
    let mut bytes = std::fs::read(&w).unwrap();
    bytes[1_500_000] ^= 1;
    std::fs::write(&w, &bytes).unwrap();
    let changed = digest(cache.path(), b.path());
    assert_ne!(changed, base, "one flipped byte");
    bytes[1_500_000] ^= 1;
    std::fs::write(&w, &bytes).unwrap();
    assert_eq!(digest(cache.path(), b.path()), base, "byte restored");

    // Mode.
    std::fs::set_permissions(
        b.path().join("README.md"),
        std::fs::Permissions::from_mode(0o600),
    )
    .unwrap();
    assert_ne!(digest(cache.path(), b.path()), base, "mode");
    std::fs::set_permissions(
        b.path().join("README.md"),
        std::fs::Permissions::from_mode(0o644),
    )
    .unwrap();

    // Name.
    std::fs::rename(b.path().join("README.md"), b.path().join("README.txt")).unwrap();
    assert_ne!(digest(cache.path(), b.path()), base, "name");
    std::fs::rename(b.path().join("README.txt"), b.path().join("README.md")).unwrap();

    // Empty directory and symlink target.
    std::fs::remove_dir(b.path().join("model/empty")).unwrap();
    assert_ne!(digest(cache.path(), b.path()), base, "empty directory");
    std::fs::create_dir(b.path().join("model/empty")).unwrap();
    std::fs::remove_file(b.path().join("config.json")).unwrap();
    symlink("README.md", b.path().join("config.json")).unwrap();
    assert_ne!(digest(cache.path(), b.path()), base, "symlink target");
}

#[test]
fn unchanged_reseal_reads_no_data_and_edits_are_seen() {
    let cache = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    sample(a.path());
    // Files modified within 100 ms of sealing are not cached (racy stamps).
    std::thread::sleep(std::time::Duration::from_millis(250));
    let cold = seal_json(cache.path(), a.path(), &[]);
    assert_eq!(cold["files_read"], 3);
    let warm = seal_json(cache.path(), a.path(), &[]);
    assert_eq!(
        warm["files_read"], 0,
        "unchanged tree must come from the file-state cache"
    );
    assert_eq!(warm["digest"], cold["digest"]);

    // Same size, new content: the stamp changes, the cache must not answer.
    let p = a.path().join("README.md");
    std::fs::write(&p, b"HELLO\n").unwrap();
    let edited = seal_json(cache.path(), a.path(), &[]);
    assert_eq!(edited["files_read"], 1);
    assert_ne!(edited["digest"], cold["digest"]);
    let fresh = seal_json(cache.path(), a.path(), &["--no-cache"]);
    assert_eq!(fresh["digest"], edited["digest"]);
}

#[test]
fn include_and_exclude() {
    let cache = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    sample(a.path());
    let only_json = seal_json(cache.path(), a.path(), &["--include", "*.json"]);
    // model/config.json and the config.json symlink; README and weights left out.
    assert_eq!(only_json["files"], 1);
    assert_eq!(only_json["symlinks"], 1);
    assert_eq!(
        only_json["dirs"], 1,
        "only directories leading to included files"
    );
    let no_model = seal_json(
        cache.path(),
        a.path(),
        &["--exclude", "model", "--exclude", "config.json"],
    );
    assert_eq!(no_model["files"], 1);
    assert_eq!(no_model["dirs"], 0);
}

fn fails_with(cache: &Path, args: &[&str], needle: &str) {
    let out = sealvol(cache, args);
    assert_eq!(out.status.code(), Some(1), "{args:?} should fail cleanly");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(needle), "{args:?}: {err}");
    assert_eq!(
        err.trim_end().lines().count(),
        1,
        "one-line error, got: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
}

#[test]
fn bad_input_gets_one_clear_line() {
    let cache = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    sample(a.path());
    let dir = a.path().to_str().unwrap();
    fails_with(
        cache.path(),
        &["seal", "/nonexistent/sealvol"],
        "No such file",
    );
    fails_with(
        cache.path(),
        &["seal", &format!("{dir}/README.md")],
        "not a directory",
    );
    fails_with(
        cache.path(),
        &["seal", dir, "--include", "a[b"],
        "invalid glob",
    );
    symlink("/etc/passwd", a.path().join("escape")).unwrap();
    fails_with(cache.path(), &["seal", dir], "points outside the volume");
    std::fs::remove_file(a.path().join("escape")).unwrap();
    let fifo = a.path().join("pipe");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    fails_with(cache.path(), &["seal", dir], "special files");
    // As the message says, excluding it is enough.
    let v = seal_json(cache.path(), a.path(), &["--exclude", "pipe"]);
    assert_eq!(v["files"], 3);
    std::fs::remove_file(&fifo).unwrap();

    use std::os::unix::ffi::OsStrExt;
    let odd = a.path().join(std::ffi::OsStr::from_bytes(b"caf\xe9.bin"));
    std::fs::write(&odd, b"latin-1 name").unwrap();
    fails_with(cache.path(), &["seal", dir], "not valid UTF-8");
    let v = seal_json(cache.path(), a.path(), &["--exclude", "*.bin"]);
    assert_eq!(v["files"], 3);
}

#[test]
fn a_file_truncated_while_sealing_gives_a_clean_error() {
    // Sealing maps large files; truncating one under the mapping raises
    // SIGBUS. Whatever the timing, the command must end with a digest or a
    // one-line error, never be killed by a signal.
    let cache = tempfile::tempdir().unwrap();
    let a = tempfile::tempdir().unwrap();
    let big = a.path().join("big.bin");
    let mut saw_error = false;
    for delay_ms in [0u64, 5, 20, 60] {
        std::fs::write(&big, vec![7u8; 192 << 20]).unwrap();
        let child = std::process::Command::new(sealvol_tests::sealvol_bin())
            .args(["seal", a.path().to_str().unwrap(), "--no-cache"])
            .env("SEALVOL_CACHE_DIR", cache.path())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(delay_ms));
        std::fs::OpenOptions::new()
            .write(true)
            .open(&big)
            .unwrap()
            .set_len(4096)
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.code().is_some(),
            "killed by a signal: {:?} {err}",
            out.status
        );
        if !out.status.success() {
            saw_error = true;
            assert!(
                err.contains("shrank while it was being read")
                    || err.contains("file changed while"),
                "{err}"
            );
        }
    }
    assert!(
        saw_error,
        "no run overlapped the truncation; the test did not exercise it"
    );
}
