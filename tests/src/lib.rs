//! End-to-end tests of sealvol: they run the real `sealvol` binary (and, in
//! later parts, real registries and peers) and check what a user sees.
//! This library holds the helpers the tests in `tests/tests/` share.

use std::path::PathBuf;
use std::process::{Command, Output};

/// The `sealvol` binary built next to the running test (`cargo build` puts
/// it in the same target directory as the test executables).
pub fn sealvol_bin() -> PathBuf {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("test executable lives in target/<profile>/deps");
    let bin = dir.join("sealvol");
    assert!(
        bin.exists(),
        "{} is missing: run `cargo build --workspace` before the end-to-end tests",
        bin.display()
    );
    bin
}

/// Runs `sealvol` with `args` and an isolated cache directory.
pub fn sealvol(cache: &std::path::Path, args: &[&str]) -> Output {
    Command::new(sealvol_bin())
        .args(args)
        .env("SEALVOL_CACHE_DIR", cache)
        .output()
        .expect("run sealvol")
}
