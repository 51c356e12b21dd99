//! `sealvol mount` processes for tests: a guard that stops the process and
//! lazily unmounts whatever it left, and reads with a deadline, so a hung
//! mount fails its test instead of hanging it.

use std::fs::File;
use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use crate::{sealvol_bin, Sandbox};

/// How long any one step through a mount may take.
pub const DEADLINE: Duration = Duration::from_secs(120);

/// An empty directory `name` in the sandbox to mount at, as the kernel
/// will name it.
pub fn mountpoint(sb: &Sandbox, name: &str) -> PathBuf {
    let p = sb.path().join(name);
    std::fs::create_dir_all(&p).unwrap();
    p.canonicalize().unwrap()
}

/// Whether something is mounted at `path` (from /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    let want = path.to_str().unwrap().replace(' ', "\\040");
    info.lines()
        .any(|l| l.split(' ').nth(4) == Some(want.as_str()))
}

/// Lazily unmounts `path` if anything is mounted there (the mount process
/// may have died and left it stale).
pub fn force_unmount(path: &Path) {
    if !is_mounted(path) {
        return;
    }
    let _ = Command::new("fusermount3")
        .args(["-u", "-z", "-q", "--"])
        .arg(path)
        .stderr(Stdio::null())
        .status();
    if is_mounted(path) {
        let _ = Command::new("umount").arg("-l").arg(path).status();
    }
}

/// Runs `f` on its own thread and waits at most [`DEADLINE`]: a read that
/// hangs on a broken mount fails the test (and the [`Mounted`] guard then
/// kills the mount, which ends the read) instead of hanging it.
pub fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let worker = std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(v) => v,
        // It panicked: pass its panic on.
        Err(mpsc::RecvTimeoutError::Disconnected) => match worker.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("{what} ended without a result"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("{what} did not finish within {DEADLINE:?}"),
    }
}

/// A file's bytes, read with a deadline.
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    let path = path.to_path_buf();
    within(&format!("reading {}", path.display()), move || {
        std::fs::read(path)
    })
}

/// `len` bytes at `offset`, read with one pread, with a deadline.
pub fn pread(path: &Path, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
    let path = path.to_path_buf();
    within(&format!("reading {}", path.display()), move || {
        let f = File::open(&path)?;
        let mut buf = vec![0u8; len];
        let n = f.read_at(&mut buf, offset)?;
        buf.truncate(n);
        Ok(buf)
    })
}

/// Reads `path` from its start in 64 KiB reads until the end or the first
/// error: the bytes returned before it, and the error.
pub fn read_until_error(path: &Path) -> (Vec<u8>, Option<std::io::Error>) {
    let path = path.to_path_buf();
    within(&format!("reading {} in order", path.display()), move || {
        let mut f = match File::open(&path) {
            Ok(f) => f,
            Err(e) => return (Vec::new(), Some(e)),
        };
        let mut out = Vec::new();
        let mut buf = vec![0u8; 64 << 10];
        loop {
            match f.read(&mut buf) {
                Ok(0) => return (out, None),
                Ok(n) => out.extend_from_slice(&buf[..n]),
                Err(e) => return (out, Some(e)),
            }
        }
    })
}

/// Asserts that a read failed with EIO.
pub fn assert_eio(r: std::io::Result<Vec<u8>>, what: &str) {
    match r {
        Ok(b) => panic!("{what}: read {} bytes instead of failing with EIO", b.len()),
        Err(e) => assert_eq!(e.raw_os_error(), Some(libc::EIO), "{what}: {e}"),
    }
}

/// A running `sealvol mount` process and the mountpoints it serves. When
/// dropped (a test that passed or panicked) it is stopped with SIGTERM (then
/// SIGKILL), and whatever it left mounted is lazily unmounted.
pub struct Mounted {
    child: Option<Child>,
    mountpoints: Vec<PathBuf>,
    /// The `sealvol: mounted …` lines, in order.
    ready: Vec<String>,
    /// Everything it printed on stdout after them, and on stderr.
    stdout: Arc<Mutex<String>>,
    stderr: Arc<Mutex<String>>,
}

/// Why a mount did not come up: its exit status (None: still running at
/// the deadline) and what it printed on stderr.
#[derive(Debug)]
pub struct MountFailed {
    pub status: Option<ExitStatus>,
    pub stderr: String,
}

impl Mounted {
    /// Runs `sealvol ARGS` against `registry` and waits until it has printed
    /// one `sealvol: mounted` line for each of `mountpoints`; panics
    /// otherwise.
    pub fn start(sb: &Sandbox, registry: &str, args: &[&str], mountpoints: &[&Path]) -> Mounted {
        Mounted::try_start(sb, registry, args, mountpoints).unwrap_or_else(|f| {
            panic!(
                "sealvol {args:?} did not report its mounts ready ({:?}); stderr:\n{}",
                f.status, f.stderr
            )
        })
    }

    /// [`Mounted::start`], answering how it failed when the process exits
    /// (or 60 s pass) before every mount is ready.
    pub fn try_start(
        sb: &Sandbox,
        registry: &str,
        args: &[&str],
        mountpoints: &[&Path],
    ) -> Result<Mounted, MountFailed> {
        let mut child = sb
            .command(sealvol_bin())
            .env("SEALVOL_REGISTRY", registry)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start sealvol mount");
        let stderr = Arc::new(Mutex::new(String::new()));
        let stdout = Arc::new(Mutex::new(String::new()));
        let stderr_done = {
            let mut pipe = child.stderr.take().unwrap();
            let stderr = stderr.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    stderr
                        .lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&buf[..n]));
                }
            })
        };
        let (tx, rx) = mpsc::channel();
        {
            let pipe = child.stdout.take().unwrap();
            let stdout = stdout.clone();
            let want = mountpoints.len();
            std::thread::spawn(move || {
                let mut seen = 0;
                for line in BufReader::new(pipe).lines() {
                    let Ok(line) = line else { break };
                    if seen < want && line.starts_with("sealvol: mounted ") {
                        seen += 1;
                        let _ = tx.send(line);
                    } else {
                        stdout.lock().unwrap().push_str(&(line + "\n"));
                    }
                }
            });
        }
        let mut m = Mounted {
            child: Some(child),
            mountpoints: mountpoints.iter().map(|p| p.to_path_buf()).collect(),
            ready: Vec::new(),
            stdout,
            stderr,
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while m.ready.len() < mountpoints.len() {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => m.ready.push(line),
                Err(_) => {
                    let exited = m.child.as_mut().unwrap().try_wait().unwrap();
                    if exited.is_some() {
                        m.child = None;
                        let _ = stderr_done.join();
                        return Err(MountFailed {
                            status: exited,
                            stderr: m.stderr(),
                        });
                    }
                    if Instant::now() > deadline {
                        // Let what it printed last reach `stderr`.
                        std::thread::sleep(Duration::from_millis(200));
                        return Err(MountFailed {
                            status: None,
                            stderr: m.stderr(),
                        });
                    }
                }
            }
        }
        Ok(m)
    }

    /// The `sealvol: mounted …` lines it printed, one per mountpoint, in
    /// order.
    pub fn ready(&self) -> &[String] {
        &self.ready
    }

    /// What it printed on stdout after the ready lines, so far.
    pub fn stdout(&self) -> String {
        self.stdout.lock().unwrap().clone()
    }

    /// What it printed on stderr so far.
    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// The process id; panics once it was stopped.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// Sends it signal `sig`.
    pub fn signal(&self, sig: libc::c_int) {
        // SAFETY: signalling our own child process.
        unsafe {
            libc::kill(self.pid(), sig);
        }
    }

    /// SIGTERM, and the exit status once it has unmounted and exited.
    pub fn stop(&mut self) -> ExitStatus {
        self.signal(libc::SIGTERM);
        let mut child = self.child.take().expect("running");
        within("sealvol mount to stop", move || child.wait().unwrap())
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SAFETY: as in `signal`.
            unsafe {
                libc::kill(c.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for p in &self.mountpoints {
            force_unmount(p);
        }
    }
}
