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

/// A `sealvol serve` process on a loopback port it picked itself, stopped
/// (SIGTERM, then SIGKILL if it lingers) when dropped, even if a test fails.
pub struct Server {
    child: Option<std::process::Child>,
    pub url: String,
    pub root: PathBuf,
}

impl Server {
    /// Starts a registry on `root` and waits until it listens.
    pub fn start(root: &std::path::Path) -> Server {
        let root_arg = root.to_str().expect("UTF-8 temp path");
        Server::start_with(
            &["serve", "--addr", "127.0.0.1:0", "--root", root_arg],
            root,
        )
    }

    /// Starts `sealvol ARGS` (a `serve` command) and waits until it listens.
    pub fn start_with(args: &[&str], root: &std::path::Path) -> Server {
        use std::io::BufRead;
        let mut child = Command::new(sealvol_bin())
            .args(args)
            .env("SEALVOL_LOG", "warn")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start sealvol serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut server = Server {
            child: Some(child),
            url: String::new(),
            root: root.to_path_buf(),
        };
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .expect("read the serving line");
        server.url = line
            .trim()
            .rsplit(' ')
            .next()
            .filter(|u| u.starts_with("http://127.0.0.1:"))
            .unwrap_or_else(|| panic!("sealvol serve did not say where it listens: {line:?}"))
            .to_string();
        server
    }

    fn signal(&self, sig: libc::c_int) {
        if let Some(c) = &self.child {
            // SAFETY: sending a signal to our own child process.
            unsafe {
                libc::kill(c.id() as libc::pid_t, sig);
            }
        }
    }

    /// SIGTERM and wait; returns the exit status.
    pub fn stop(mut self) -> std::process::ExitStatus {
        self.signal(libc::SIGTERM);
        self.child
            .take()
            .expect("running")
            .wait()
            .expect("wait for sealvol serve")
    }

    /// SIGKILL and wait: a crash.
    pub fn kill(mut self) {
        self.signal(libc::SIGKILL);
        let _ = self.child.take().expect("running").wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: as in `signal`.
            unsafe {
                libc::kill(c.id() as libc::pid_t, libc::SIGTERM);
            }
            for _ in 0..50 {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `sha256:<hex>` of `data`.
pub fn sha256(data: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(sha2::Sha256::digest(data)))
}
