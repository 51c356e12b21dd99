//! End-to-end tests of sealvol: they run the real `sealvol` binary (and, in
//! later parts, real registries and peers) and check what a user sees.
//! This library holds the helpers the tests in `tests/tests/` share.

pub mod forge;
pub mod fuse;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Writes `ROOT.toml` for `sealvol serve --config`: `addr`, `root` and
/// the extra `config` lines; creates the root.
pub fn write_config(root: &Path, addr: &str, config: &str) -> PathBuf {
    let file = root.with_extension("toml");
    std::fs::create_dir_all(root).expect("registry root");
    std::fs::write(
        &file,
        format!(
            "addr = \"{addr}\"\nroot = {:?}\n{config}\n",
            root.to_str().expect("UTF-8 temp path")
        ),
    )
    .expect("write registry.toml");
    file
}

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

    /// Starts a registry on `root` with `config` (registry.toml lines
    /// besides `addr` and `root`) and a clock the test moves: the server
    /// adds the integer in `clock` (seconds) to the time it reads, which
    /// it does only with `test_clock = true` in its configuration.
    pub fn start_with_clock(root: &std::path::Path, config: &str, clock: &Path) -> Server {
        let file = write_config(root, "127.0.0.1:0", &format!("test_clock = true\n{config}"));
        Server::start_env(
            &["serve", "--config", file.to_str().expect("UTF-8 temp path")],
            root,
            &[("SEALVOL_TEST_CLOCK_FILE", clock.as_os_str())],
        )
    }

    /// Starts `sealvol ARGS` (a `serve` command) and waits until it listens.
    pub fn start_with(args: &[&str], root: &std::path::Path) -> Server {
        Server::start_env(args, root, &[])
    }

    fn start_env(
        args: &[&str],
        root: &std::path::Path,
        env: &[(&str, &std::ffi::OsStr)],
    ) -> Server {
        Server::try_spawn(args, root, env.iter().copied()).unwrap_or_else(|e| panic!("{e}"))
    }

    /// Runs `sealvol ARGS` and reads the line that says where it listens;
    /// Err (the process stopped) when it exits without one.
    fn try_spawn<K, V>(
        args: &[&str],
        root: &Path,
        env: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Server, String>
    where
        K: AsRef<std::ffi::OsStr>,
        V: AsRef<std::ffi::OsStr>,
    {
        let mut cmd = Command::new(sealvol_bin());
        cmd.args(args).envs(env);
        Server::try_spawn_command(cmd, args, root)
    }

    /// Runs `cmd` (`sealvol ARGS`, its environment set) and reads the line
    /// that says where it listens, as [`Server::try_spawn`].
    fn try_spawn_command(mut cmd: Command, args: &[&str], root: &Path) -> Result<Server, String> {
        let mut child = cmd
            .env("SEALVOL_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start sealvol serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let mut server = Server {
            child: Some(child),
            url: String::new(),
            root: root.to_path_buf(),
        };
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        match line
            .trim()
            .rsplit(' ')
            .next()
            .filter(|u| u.starts_with("http://127.0.0.1:") || u.starts_with("https://127.0.0.1:"))
        {
            Some(url) => {
                server.url = url.to_string();
                Ok(server)
            }
            None => {
                if let Some(mut c) = server.child.take() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                Err(format!(
                    "sealvol {} did not say where it listens: {line:?}",
                    args.join(" ")
                ))
            }
        }
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

/// `$SEALVOL_VENV/bin/NAME`, or `.venv/bin/NAME` in the workspace root: a
/// program of the Python venv that `scripts/deps.sh` sets up (`python`, with
/// `blake3`, `oras` and `bcrypt` installed).
pub fn venv_bin(name: &str) -> PathBuf {
    let venv = match std::env::var_os("SEALVOL_VENV") {
        Some(v) if !v.is_empty() => PathBuf::from(v),
        _ => Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the tests crate lives in the workspace root")
            .join(".venv"),
    };
    venv.join("bin").join(name)
}

/// A free loopback port: bound, then released for the caller to bind.
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind a free loopback port")
        .port()
}

/// Debian's CNCF distribution 2.8 (`/usr/bin/docker-registry`, installed by
/// `scripts/deps.sh`), the reference peer: filesystem storage in a temporary
/// folder, deletes enabled, on a loopback port picked here, plain HTTP, and
/// optionally `htpasswd` authentication. Killed when dropped, even if a test
/// fails.
pub struct DockerRegistry {
    child: Option<Child>,
    addr: String,
    storage: PathBuf,
    dir: tempfile::TempDir,
}

/// The realm of [`DockerRegistry::start_with_htpasswd`]'s `Basic` challenge.
pub const HTPASSWD_REALM: &str = "sealvol-test";

impl DockerRegistry {
    const BIN: &'static str = "/usr/bin/docker-registry";

    /// Starts the registry, open to anyone, and waits (up to 20 s) until
    /// `GET /v2/` answers 200.
    pub fn start() -> DockerRegistry {
        DockerRegistry::launch(None)
    }

    /// Starts a registry that lets in only `user` with `password` (HTTP
    /// Basic, `auth: htpasswd`, realm [`HTPASSWD_REALM`]) over plain HTTP,
    /// which distribution 2.8 accepts without a word. Waits (up to 20 s)
    /// until an anonymous `GET /v2/` answers 401, then checks that the
    /// credentials get 200. The htpasswd line is hashed with Python's
    /// `bcrypt` from the project venv ([`venv_bin`]).
    pub fn start_with_htpasswd(user: &str, password: &str) -> DockerRegistry {
        let line = htpasswd_line(user, password);
        let registry = DockerRegistry::launch(Some(&line));
        let basic = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
        };
        let status = http_status_with(&registry.addr, "/v2/", Some(&basic));
        assert_eq!(
            status,
            Some(200),
            "docker-registry on {} did not accept {user}'s password on GET /v2/; its log:\n{}",
            registry.addr,
            registry.log()
        );
        registry
    }

    /// Starts the registry (with `htpasswd` as its password file when given)
    /// and waits until `GET /v2/` answers: 200, or 401 with auth on.
    fn launch(htpasswd: Option<&str>) -> DockerRegistry {
        assert!(
            Path::new(Self::BIN).exists(),
            "{} is missing: run `bash scripts/deps.sh` (as root) to install docker-registry",
            Self::BIN
        );
        let ready = if htpasswd.is_some() { 401 } else { 200 };
        // The port is free when picked, but another process may take it
        // before the registry binds: a registry that exits at once gets a
        // second and a third port.
        let mut last_log = String::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("temporary folder for docker-registry");
            let storage = dir.path().join("storage");
            let addr = format!("127.0.0.1:{}", free_port());
            let mut config = format!(
                "version: 0.1\n\
                 log:\n  level: warn\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
                 http:\n  addr: {addr}\n  secret: sealvol-tests\n",
                storage.display()
            );
            if let Some(line) = htpasswd {
                let file = dir.path().join("htpasswd");
                std::fs::write(&file, line).expect("write the htpasswd file");
                config.push_str(&format!(
                    "auth:\n  htpasswd:\n    realm: {HTPASSWD_REALM}\n    path: {}\n",
                    file.display()
                ));
            }
            let config_path = dir.path().join("config.yml");
            std::fs::write(&config_path, config).expect("write docker-registry config");
            let log = std::fs::File::create(dir.path().join("registry.log")).expect("log file");
            let child = Command::new(Self::BIN)
                .arg("serve")
                .arg(&config_path)
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("log file"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| panic!("start {}: {e}", Self::BIN));
            let mut registry = DockerRegistry {
                child: Some(child),
                addr,
                storage,
                dir,
            };
            match registry.wait_ready(ready, Duration::from_secs(20)) {
                Ok(()) => return registry,
                Err(true) => last_log = registry.log(),
                Err(false) => panic!(
                    "docker-registry on {} did not answer GET /v2/ with {ready} within 20 s; its log:\n{}",
                    registry.addr,
                    registry.log()
                ),
            }
        }
        panic!(
            "docker-registry exited before it answered GET /v2/ (three ports tried); its log:\n{last_log}"
        );
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        self.addr.clone()
    }

    /// The folder the registry stores its data in (`storage.filesystem`).
    pub fn storage(&self) -> &Path {
        &self.storage
    }

    /// What the registry wrote to stdout and stderr so far (warnings and
    /// errors only).
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("registry.log")).unwrap_or_default()
    }

    /// Polls `GET /v2/` until it answers `status`; `Err(true)` if the
    /// process exited, `Err(false)` on timeout.
    fn wait_ready(&mut self, status: u16, timeout: Duration) -> Result<(), bool> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(c) = &mut self.child {
                if let Ok(Some(_)) = c.try_wait() {
                    return Err(true);
                }
            }
            if http_status(&self.addr, "/v2/") == Some(status) {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err(false)
    }

    fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for DockerRegistry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The status code of a plain `GET PATH` to `addr`, or None if it fails.
/// Plain std, so it also works inside an async runtime.
fn http_status(addr: &str, path: &str) -> Option<u16> {
    http_status_with(addr, path, None)
}

/// [`http_status`] with `Authorization: Basic BASIC` when given (`BASIC`:
/// base64 of `user:password`).
fn http_status_with(addr: &str, path: &str, basic: Option<&str>) -> Option<u16> {
    let mut s = TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    let auth = basic
        .map(|b| format!("Authorization: Basic {b}\r\n"))
        .unwrap_or_default();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )
    .ok()?;
    let mut line = String::new();
    BufReader::new(s).read_line(&mut line).ok()?;
    line.split(' ').nth(1)?.parse().ok()
}

/// One `user:<bcrypt hash>` line of an htpasswd file, hashed by Python's
/// `bcrypt` in the project venv. Cost 4, the lowest: distribution checks
/// the password against the hash on every request.
pub fn htpasswd_line(user: &str, password: &str) -> String {
    assert!(
        !user.is_empty() && !user.contains([':', '\n', '\r']),
        "htpasswd user {user:?}: no colon or line break"
    );
    let python = venv_bin("python");
    let mut child = Command::new(&python)
        .args([
            "-c",
            "import sys, bcrypt\n\
             h = bcrypt.hashpw(sys.stdin.buffer.read(), bcrypt.gensalt(rounds=4))\n\
             sys.stdout.write(sys.argv[1] + ':' + h.decode() + '\\n')",
            user,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "run {}: {e}; run `bash scripts/deps.sh` to set up the venv",
                python.display()
            )
        });
    child
        .stdin
        .take()
        .expect("piped stdin")
        .write_all(password.as_bytes())
        .expect("send the password to python");
    let out = child.wait_with_output().expect("wait for python");
    assert!(
        out.status.success(),
        "hashing the htpasswd password with python bcrypt failed (run `bash scripts/deps.sh`): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8(out.stdout).expect("UTF-8 htpasswd line");
    assert!(
        line.starts_with(&format!("{user}:$2")) && line.ends_with('\n'),
        "not an htpasswd bcrypt line: {line:?}"
    );
    line
}

/// A loopback HTTP/1.1 reverse proxy to a registry that corrupts blobs: the
/// body of every successful `GET /v2/<name>/blobs/sha256:<hex>` reaches the
/// client with its middle byte flipped (xor 0xff), length unchanged.
/// Everything else (manifests, `HEAD`, uploads, errors) passes through
/// untouched, except that a `Location` pointing at the upstream is rewritten
/// to point at the proxy, so clients stay on it. One request per connection
/// (`Connection: close`); redirects are passed on, not followed. Stops when
/// dropped.
pub struct FlipProxy {
    addr: String,
    flipped: Arc<AtomicUsize>,
    failed: Arc<AtomicUsize>,
    seen: Arc<std::sync::Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    accept: Option<std::thread::JoinHandle<()>>,
}

impl FlipProxy {
    /// Starts a proxy to `http://{upstream}` (`upstream` is `HOST:PORT`).
    pub fn start(upstream: &str) -> FlipProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the flip proxy");
        FlipProxy::serve_on(listener, upstream, None, 0)
    }

    /// A proxy that corrupts nothing but answers the first `n` requests for
    /// blobs or uploads with `503 Service Unavailable` without forwarding
    /// them: a registry that fails now and then.
    pub fn start_failing(upstream: &str, n: usize) -> FlipProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the flip proxy");
        FlipProxy::serve_on(listener, upstream, Some(Vec::new()), n)
    }

    /// A proxy that corrupts nothing: it counts, in [`FlipProxy::requests`].
    pub fn start_counting(upstream: &str) -> FlipProxy {
        FlipProxy::start_only(upstream, &[])
    }

    /// Like [`FlipProxy::start`], but corrupts only the blobs whose digest
    /// (`sha256:<hex>`) is in `digests`; every other blob passes through
    /// intact. Lets a test damage one chunk while the manifests and the tree
    /// index still arrive whole.
    pub fn start_only(upstream: &str, digests: &[String]) -> FlipProxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the flip proxy");
        FlipProxy::serve_on(listener, upstream, Some(digests.to_vec()), 0)
    }

    /// Proxies `listener` to `upstream`, corrupting the blobs in `only`
    /// (all when None).
    fn serve_on(
        listener: TcpListener,
        upstream: &str,
        only: Option<Vec<String>>,
        fail_first: usize,
    ) -> FlipProxy {
        let addr = listener.local_addr().expect("proxy address").to_string();
        let flipped = Arc::new(AtomicUsize::new(0));
        let failed = Arc::new(AtomicUsize::new(0));
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let proxy = Arc::new(Proxy {
            upstream: upstream.to_string(),
            addr: addr.clone(),
            flipped: flipped.clone(),
            only,
            fail_first,
            failed: failed.clone(),
            seen: seen.clone(),
        });
        let stopping = stop.clone();
        // The blocking client lives on the proxy's own threads, never on the
        // test's, so a test running inside an async runtime may use the proxy.
        let accept = std::thread::spawn(move || {
            let client = reqwest::blocking::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .timeout(Duration::from_secs(300))
                .build()
                .expect("build the proxy's HTTP client");
            for conn in listener.incoming() {
                if stopping.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let (proxy, client) = (proxy.clone(), client.clone());
                std::thread::spawn(move || proxy.serve(conn, &client));
            }
        });
        FlipProxy {
            addr,
            flipped,
            failed,
            seen,
            stop,
            accept: Some(accept),
        }
    }

    /// `127.0.0.1:PORT`.
    pub fn addr(&self) -> String {
        self.addr.clone()
    }

    /// How many blob bodies the proxy has corrupted so far.
    pub fn flipped(&self) -> usize {
        self.flipped.load(Ordering::SeqCst)
    }

    /// How many requests [`FlipProxy::start_failing`] has refused so far.
    pub fn failed(&self) -> usize {
        self.failed.load(Ordering::SeqCst)
    }

    /// The requests forwarded so far, as `METHOD TARGET`.
    pub fn requests(&self) -> Vec<String> {
        self.seen.lock().expect("requests seen").clone()
    }
}

impl Drop for FlipProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(&self.addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

struct Proxy {
    upstream: String,
    addr: String,
    flipped: Arc<AtomicUsize>,
    /// The blob digests to corrupt; None: every blob.
    only: Option<Vec<String>>,
    /// How many blob and upload requests to refuse with 503 first.
    fail_first: usize,
    failed: Arc<AtomicUsize>,
    /// Every request forwarded, as `METHOD TARGET`.
    seen: Arc<std::sync::Mutex<Vec<String>>>,
}

/// A request as read from the client.
struct ProxyRequest {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Proxy {
    fn serve(&self, conn: TcpStream, client: &reqwest::blocking::Client) {
        let _ = conn.set_read_timeout(Some(Duration::from_secs(60)));
        let Ok(mut out) = conn.try_clone() else {
            return;
        };
        let mut reader = BufReader::new(conn);
        let reply = match read_request(&mut reader, &mut out) {
            Ok(req) => self.forward(req, client),
            Err(e) => simple_response(400, &format!("flip proxy: bad request: {e}")),
        };
        let _ = out.write_all(&reply);
        let _ = out.flush();
        let _ = out.shutdown(Shutdown::Write);
    }

    /// Sends `req` upstream and returns the bytes of the response to send
    /// back.
    fn forward(&self, req: ProxyRequest, client: &reqwest::blocking::Client) -> Vec<u8> {
        use reqwest::header::{HeaderName, HeaderValue};
        let Ok(method) = reqwest::Method::from_bytes(req.method.as_bytes()) else {
            return simple_response(400, "flip proxy: bad method");
        };
        self.seen
            .lock()
            .expect("requests seen")
            .push(format!("{} {}", req.method, req.target));
        if req.target.contains("/blobs/")
            && self
                .failed
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                    (n < self.fail_first).then_some(n + 1)
                })
                .is_ok()
        {
            return simple_response(503, "flip proxy: failing on purpose");
        }
        let mut headers = reqwest::header::HeaderMap::new();
        for (name, value) in &req.headers {
            if is_hop_header(name) || name.eq_ignore_ascii_case("host") {
                continue;
            }
            if let (Ok(n), Ok(v)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_str(value),
            ) {
                headers.append(n, v);
            }
        }
        let has_body = !req.body.is_empty()
            || req.headers.iter().any(|(n, _)| {
                n.eq_ignore_ascii_case("content-length")
                    || n.eq_ignore_ascii_case("transfer-encoding")
            });
        let mut upstream_req = client
            .request(
                method.clone(),
                format!("http://{}{}", self.upstream, req.target),
            )
            .headers(headers);
        if has_body {
            upstream_req = upstream_req.body(req.body);
        }
        let resp = match upstream_req.send() {
            Ok(r) => r,
            Err(e) => return simple_response(502, &format!("flip proxy: upstream: {e}")),
        };
        let status = resp.status();
        let resp_headers = resp.headers().clone();
        let mut body = match resp.bytes() {
            Ok(b) => b.to_vec(),
            Err(e) => return simple_response(502, &format!("flip proxy: upstream body: {e}")),
        };
        let bodiless = method == reqwest::Method::HEAD
            || status.is_informational()
            || status == reqwest::StatusCode::NO_CONTENT
            || status == reqwest::StatusCode::NOT_MODIFIED;
        if method == reqwest::Method::GET
            && status.is_success()
            && !body.is_empty()
            && is_blob_path(req.target.split('?').next().unwrap_or_default())
            && self.selected(&req.target)
        {
            let mid = body.len() / 2;
            body[mid] ^= 0xff;
            self.flipped.fetch_add(1, Ordering::SeqCst);
        }

        let mut out = format!(
            "HTTP/1.1 {} {}\r\n",
            status.as_u16(),
            status.canonical_reason().unwrap_or("")
        )
        .into_bytes();
        let upstream_url = format!("http://{}", self.upstream);
        for (name, value) in &resp_headers {
            let n = name.as_str();
            if is_hop_header(n) && !(bodiless && n == "content-length") {
                continue;
            }
            out.extend_from_slice(n.as_bytes());
            out.extend_from_slice(b": ");
            match value.to_str() {
                Ok(v) if n == "location" && v.starts_with(&upstream_url) => {
                    let rest = &v[upstream_url.len()..];
                    if rest.is_empty() || rest.starts_with('/') || rest.starts_with('?') {
                        out.extend_from_slice(format!("http://{}{rest}", self.addr).as_bytes());
                    } else {
                        out.extend_from_slice(value.as_bytes());
                    }
                }
                _ => out.extend_from_slice(value.as_bytes()),
            }
            out.extend_from_slice(b"\r\n");
        }
        if !bodiless {
            out.extend_from_slice(format!("content-length: {}\r\n", body.len()).as_bytes());
        }
        out.extend_from_slice(b"connection: close\r\n\r\n");
        if !bodiless {
            out.extend_from_slice(&body);
        }
        out
    }
}

impl Proxy {
    /// Whether the blob at `target` is one to corrupt.
    fn selected(&self, target: &str) -> bool {
        let path = target.split('?').next().unwrap_or_default();
        match &self.only {
            None => true,
            Some(digests) => digests
                .iter()
                .any(|d| path.rsplit_once("/blobs/").is_some_and(|(_, p)| p == d)),
        }
    }
}

/// Headers about one connection (RFC 9110 §7.6.1) that a proxy does not
/// forward, and the body framing, which each side sets anew (a response to
/// `HEAD` keeps the upstream's `Content-Length`).
fn is_hop_header(name: &str) -> bool {
    [
        "connection",
        "keep-alive",
        "proxy-connection",
        "transfer-encoding",
        "te",
        "trailer",
        "upgrade",
        "expect",
        "content-length",
    ]
    .iter()
    .any(|h| name.eq_ignore_ascii_case(h))
}

/// `/v2/<name>/blobs/sha256:<64 hex>`.
fn is_blob_path(path: &str) -> bool {
    let Some(rest) = path.strip_prefix("/v2/") else {
        return false;
    };
    let Some((name, digest)) = rest.rsplit_once("/blobs/") else {
        return false;
    };
    let Some(hex) = digest.strip_prefix("sha256:") else {
        return false;
    };
    !name.is_empty() && hex.len() == 64 && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

fn simple_response(status: u16, message: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} Proxy\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{message}",
        message.len()
    )
    .into_bytes()
}

/// Reads one request: its head, then a body framed by `Content-Length` or
/// chunked transfer coding. Answers `Expect: 100-continue` on `out`.
fn read_request(
    reader: &mut BufReader<TcpStream>,
    out: &mut TcpStream,
) -> std::io::Result<ProxyRequest> {
    let bad = |m: &str| std::io::Error::new(std::io::ErrorKind::InvalidData, m.to_string());
    let mut line = String::new();
    reader.read_line(&mut line)?;
    let mut parts = line.split_whitespace();
    let (Some(method), Some(target)) = (parts.next(), parts.next()) else {
        return Err(bad("no request line"));
    };
    let (method, target) = (method.to_string(), target.to_string());
    let mut headers = Vec::new();
    loop {
        line.clear();
        if reader.read_line(&mut line)? == 0 {
            return Err(bad("connection closed in the request head"));
        }
        let l = line.trim_end_matches(['\r', '\n']);
        if l.is_empty() {
            break;
        }
        let (n, v) = l
            .split_once(':')
            .ok_or_else(|| bad("header without a colon"))?;
        headers.push((n.trim().to_string(), v.trim().to_string()));
    }
    let header = |name: &str| {
        headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    };
    if header("expect").is_some_and(|v| v.eq_ignore_ascii_case("100-continue")) {
        out.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
    }
    let mut body = Vec::new();
    if header("transfer-encoding").is_some_and(|v| v.to_ascii_lowercase().contains("chunked")) {
        loop {
            line.clear();
            reader.read_line(&mut line)?;
            let size = line.trim().split(';').next().unwrap_or_default();
            let size = usize::from_str_radix(size, 16).map_err(|_| bad("bad chunk size"))?;
            if size == 0 {
                // Trailers, up to the empty line.
                loop {
                    line.clear();
                    if reader.read_line(&mut line)? == 0 || line.trim().is_empty() {
                        break;
                    }
                }
                break;
            }
            let start = body.len();
            body.resize(start + size, 0);
            reader.read_exact(&mut body[start..])?;
            line.clear();
            reader.read_line(&mut line)?;
        }
    } else if let Some(len) = header("content-length") {
        let len: usize = len.parse().map_err(|_| bad("bad content-length"))?;
        body.resize(len, 0);
        reader.read_exact(&mut body)?;
    }
    Ok(ProxyRequest {
        method,
        target,
        headers,
        body,
    })
}

/// A `HOST:PORT` on loopback where nothing listens (bound, then released):
/// a registry that is down.
pub fn closed_addr() -> String {
    format!("127.0.0.1:{}", free_port())
}

/// A user's machine as sealvol and its peers (skopeo, oras) see it, private
/// to one test: its own chunk and file-state cache, `HOME`, docker config
/// and containers auth file, so neither the developer's credentials nor
/// another test's cache can change what a command does. Removed when
/// dropped.
pub struct Sandbox {
    dir: tempfile::TempDir,
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox::new()
    }
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let dir = tempfile::tempdir().expect("sandbox folder");
        for sub in ["home", "docker", "cache"] {
            std::fs::create_dir(dir.path().join(sub)).expect("sandbox subfolder");
        }
        Sandbox { dir }
    }

    /// The sandbox folder: scratch space for the test's trees.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The cache directory its sealvol commands use.
    pub fn cache(&self) -> PathBuf {
        self.path().join("cache")
    }

    /// The folder `DOCKER_CONFIG` names for its commands (empty at first):
    /// where `sealvol login`, docker and skopeo keep `config.json`.
    pub fn docker_config(&self) -> PathBuf {
        self.path().join("docker")
    }

    /// `program` with the sandbox's environment (`HOME`, `DOCKER_CONFIG`,
    /// `REGISTRY_AUTH_FILE`, `SEALVOL_CACHE_DIR`; `SEALVOL_REGISTRY` and
    /// `SEALVOL_LOG` unset).
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let home = self.path().join("home");
        let mut c = Command::new(program);
        c.env("HOME", &home)
            .env("DOCKER_CONFIG", self.docker_config())
            .env("REGISTRY_AUTH_FILE", home.join("auth.json"))
            .env("SEALVOL_CACHE_DIR", self.cache())
            .env_remove("SEALVOL_REGISTRY")
            .env_remove("SEALVOL_LOG")
            .stdin(Stdio::null());
        c
    }

    /// Runs `sealvol ARGS` with `registry` (`HOST:PORT`) as the default
    /// registry that `bdn:` refs resolve against.
    pub fn sealvol(&self, registry: &str, args: &[&str]) -> Output {
        self.command(sealvol_bin())
            .env("SEALVOL_REGISTRY", registry)
            .args(args)
            .output()
            .expect("run sealvol")
    }

    /// [`Sandbox::sealvol`] with `stdin` as the command's standard input
    /// (a pipe, not a terminal), closed after the last byte.
    pub fn sealvol_stdin(&self, registry: &str, args: &[&str], stdin: &[u8]) -> Output {
        let mut child = self
            .command(sealvol_bin())
            .env("SEALVOL_REGISTRY", registry)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("run sealvol");
        let mut pipe = child.stdin.take().expect("piped stdin");
        let input = stdin.to_vec();
        // Written on its own thread so a command that prints a lot before
        // reading cannot deadlock with us; one that exits without reading
        // everything closes the pipe, which is not an error here.
        let writer = std::thread::spawn(move || {
            let _ = pipe.write_all(&input);
        });
        let out = child.wait_with_output().expect("wait for sealvol");
        let _ = writer.join();
        out
    }
}

/// One entry of a file tree as a pull must reproduce it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Node {
    /// Permission bits.
    Dir {
        mode: u32,
    },
    /// Permission bits, length and `sha256:<hex>` of the bytes.
    File {
        mode: u32,
        len: u64,
        sha256: String,
    },
    Symlink {
        target: PathBuf,
    },
}

/// Every entry below `root` (not `root` itself) by its `/`-separated path
/// relative to `root`; symlinks are read, not followed.
pub fn tree(root: &Path) -> std::collections::BTreeMap<String, Node> {
    use std::os::unix::fs::PermissionsExt;
    fn walk(root: &Path, dir: &Path, out: &mut std::collections::BTreeMap<String, Node>) {
        let entries = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("read directory {}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            let rel = path
                .strip_prefix(root)
                .expect("below the root")
                .to_str()
                .expect("UTF-8 name")
                .to_string();
            let meta = std::fs::symlink_metadata(&path).expect("lstat");
            let mode = meta.permissions().mode() & 0o7777;
            let node = if meta.file_type().is_symlink() {
                Node::Symlink {
                    target: std::fs::read_link(&path).expect("readlink"),
                }
            } else if meta.is_dir() {
                walk(root, &path, out);
                Node::Dir { mode }
            } else {
                let bytes = std::fs::read(&path).expect("read file");
                Node::File {
                    mode,
                    len: bytes.len() as u64,
                    sha256: sha256(&bytes),
                }
            };
            out.insert(rel, node);
        }
    }
    let mut out = std::collections::BTreeMap::new();
    walk(root, root, &mut out);
    out
}

// Assertions and small helpers the end-to-end test files share.

pub fn write(path: &Path, bytes: &[u8], mode: u32) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, bytes).unwrap();
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

pub fn s(p: &Path) -> &str {
    p.to_str().expect("UTF-8 temp path")
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// Asserts that the command succeeded; its stdout, trimmed.
pub fn ok(out: Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what} failed ({:?}): {}",
        out.status,
        stderr(&out)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Asserts that the command succeeded; its stdout as one JSON value.
pub fn json(out: Output, what: &str) -> serde_json::Value {
    let text = ok(out, what);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text}"))
}

/// Asserts a clean failure: exit code 1 and exactly one line on stderr,
/// starting `sealvol: `. Returns that line.
pub fn fails(out: Output, what: &str) -> String {
    let err = stderr(&out);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what} should fail cleanly: {err}"
    );
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(
        lines.len(),
        1,
        "{what}: one-line error expected, got: {err:?}"
    );
    assert!(lines[0].starts_with("sealvol: "), "{what}: {err:?}");
    assert!(!err.contains("panicked"), "{what}: {err}");
    lines[0].to_string()
}

/// Same entries, kinds, modes, bytes and symlink targets.
pub fn assert_same_tree(expected: &Path, actual: &Path) {
    let what = format!("{} differs from {}", actual.display(), expected.display());
    assert_tree(&tree(expected), &tree(actual), &what);
}

/// Panics with `what` and one line per differing entry unless the trees
/// (as [`tree`] reads them) are equal.
pub fn assert_tree(
    want: &std::collections::BTreeMap<String, Node>,
    got: &std::collections::BTreeMap<String, Node>,
    what: &str,
) {
    if want != got {
        let keys: std::collections::BTreeSet<&String> = want.keys().chain(got.keys()).collect();
        let diffs: Vec<String> = keys
            .into_iter()
            .filter(|k| want.get(*k) != got.get(*k))
            .map(|k| format!("{k}: want {:?}, got {:?}", want.get(k), got.get(k)))
            .collect();
        panic!("{what}:\n{}", diffs.join("\n"));
    }
}

/// Bytes that look random but are the same on every run (xorshift64*), so
/// chunk boundaries are stable and a flipped byte cannot hide.
pub fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        out.extend_from_slice(&x.wrapping_mul(0x2545_f491_4f6c_dd1d).to_le_bytes());
    }
    out.truncate(len);
    out
}

/// `HOST:PORT` of a running `sealvol serve`.
pub fn host(server: &Server) -> String {
    server
        .url
        .trim_start_matches("http://")
        .trim_start_matches("https://")
        .to_string()
}

// Sync sources: object-store emulators and a Hugging Face Hub fixture, each
// a real server process on a loopback port, and a registry that can crash
// and come back.

impl Server {
    /// Starts a registry on `root` with `config` (registry.toml lines
    /// besides `addr` and `root`, e.g. `sync_workers = 1`) and `env` added
    /// to its environment (the sync sources' endpoints: `AWS_ENDPOINT_URL`,
    /// `AZURITE_BLOB_STORAGE_URL`, `STORAGE_EMULATOR_HOST`, `HF_ENDPOINT`).
    /// Waits until it listens.
    pub fn start_config_env(root: &Path, config: &str, env: &[(&str, &str)]) -> Server {
        Server::try_start_config_env(root, "127.0.0.1:0", config, env)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// SIGKILLs the registry (a crash: no shutdown code runs) and starts it
    /// again on the same root and port with `config` and `env` (as given to
    /// [`Server::start_config_env`]). Tries for up to 10 s while the port is
    /// not free again yet.
    pub fn kill_and_restart(self, config: &str, env: &[(&str, &str)]) -> Server {
        let addr = host(&self);
        let root = self.root.clone();
        self.kill();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match Server::try_start_config_env(&root, &addr, config, env) {
                Ok(server) => return server,
                Err(e) if Instant::now() > deadline => {
                    panic!("sealvol serve did not come back on {addr}: {e}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(200)),
            }
        }
    }

    /// Writes `root.toml` (addr, root, `config`) and runs `sealvol serve
    /// --config` on it; Err when it exits before saying where it listens.
    fn try_start_config_env(
        root: &Path,
        addr: &str,
        config: &str,
        env: &[(&str, &str)],
    ) -> Result<Server, String> {
        let file = write_config(root, addr, config);
        let config = file.to_str().expect("UTF-8 temp path");
        Server::try_spawn(&["serve", "--config", config], root, env.iter().copied())
    }
}

/// A server process of the tests (an emulator, a fixture) with its log and
/// data in a temporary folder; killed and waited for when dropped, even if
/// a test fails.
struct Daemon {
    what: &'static str,
    child: Option<Child>,
    dir: tempfile::TempDir,
    port: u16,
}

impl Daemon {
    /// Runs `make(port, dir)` on a free port, stdout and stderr to
    /// `dir/log`, and waits (up to 30 s) until the port answers HTTP with
    /// any status. A process that exits at once (the port was taken
    /// meanwhile) gets a second and a third port.
    fn launch(what: &'static str, make: impl Fn(u16, &Path) -> Command) -> Daemon {
        let mut last_log = String::new();
        for _ in 0..3 {
            let dir = tempfile::tempdir().expect("temporary folder for an emulator");
            let port = free_port();
            let log = std::fs::File::create(dir.path().join("log")).expect("log file");
            let mut cmd = make(port, dir.path());
            let child = cmd
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("log file"))
                .stderr(log)
                .spawn()
                .unwrap_or_else(|e| {
                    panic!("start {what} ({cmd:?}): {e}; run `bash scripts/deps.sh` to install it")
                });
            let mut d = Daemon {
                what,
                child: Some(child),
                dir,
                port,
            };
            let addr = d.addr();
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                if let Some(Ok(Some(_))) = d.child.as_mut().map(|c| c.try_wait()) {
                    last_log = d.log();
                    break;
                }
                if http_status(&addr, "/").is_some() {
                    return d;
                }
                if Instant::now() > deadline {
                    panic!(
                        "{what} on {addr} did not answer HTTP within 30 s; its log:\n{}",
                        d.log()
                    );
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        panic!("{what} exited before it answered (three ports tried); its log:\n{last_log}");
    }

    fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }
}

impl Drop for Daemon {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// A blocking HTTP client for seeding emulators (not to be used inside an
/// async runtime).
fn seeding_client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("build an HTTP client")
}

/// Sends `req`; panics with `what`, the status, the body and the
/// emulator's log unless it succeeded.
fn send_ok(d: &Daemon, req: reqwest::blocking::RequestBuilder, what: &str) {
    let resp = req
        .send()
        .unwrap_or_else(|e| panic!("{} {what}: {e}", d.what));
    let status = resp.status();
    if !status.is_success() {
        let body = resp.text().unwrap_or_default();
        panic!("{} {what}: {status}: {body}\nits log:\n{}", d.what, d.log());
    }
}

/// [`send_ok`] that returns the response body.
fn receive_ok(d: &Daemon, req: reqwest::blocking::RequestBuilder, what: &str) -> Vec<u8> {
    let resp = req
        .send()
        .unwrap_or_else(|e| panic!("{} {what}: {e}", d.what));
    let status = resp.status();
    let body = resp
        .bytes()
        .unwrap_or_else(|e| panic!("{} {what}: body: {e}", d.what));
    if !status.is_success() {
        panic!(
            "{} {what}: {status}: {}\nits log:\n{}",
            d.what,
            String::from_utf8_lossy(&body),
            d.log()
        );
    }
    body.to_vec()
}

/// `key` with every byte but `A-Z a-z 0-9 - _ . ~ /` percent-encoded: an
/// object key as a URL path.
fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len());
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~/".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `?k=v&…` with keys and values percent-encoded; empty for no pairs.
fn query_string(pairs: &[(&str, &str)]) -> String {
    let enc = |s: &str| encode_key(s).replace('/', "%2F");
    pairs
        .iter()
        .enumerate()
        .map(|(i, (k, v))| format!("{}{}={}", if i == 0 { '?' } else { '&' }, enc(k), enc(v)))
        .collect()
}

/// moto's S3 server (`moto_server` from the venv) on a loopback port, in
/// memory. Its seeding requests carry a dummy SigV4 `Authorization` (moto
/// checks no signatures, but refuses anonymous reads and deletes), so any
/// `ACCESS_KEY_ID:SECRET_ACCESS_KEY` secret works for a sync.
pub struct Moto {
    daemon: Daemon,
    url: String,
    client: reqwest::blocking::Client,
}

impl Moto {
    const AUTH: &'static str = "AWS4-HMAC-SHA256 Credential=test/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00";

    /// Starts moto and waits until it answers.
    pub fn start() -> Moto {
        let bin = venv_bin("moto_server");
        let daemon = Daemon::launch("moto_server", |port, _| {
            let mut c = Command::new(&bin);
            c.args(["-H", "127.0.0.1", "-p", &port.to_string()]);
            c
        });
        let url = format!("http://{}", daemon.addr());
        Moto {
            daemon,
            url,
            client: seeding_client(),
        }
    }

    /// `http://127.0.0.1:PORT`, for `AWS_ENDPOINT_URL`.
    pub fn url(&self) -> &str {
        &self.url
    }

    fn object_url(&self, bucket: &str, key: &str) -> String {
        format!("{}/{bucket}/{}", self.url, encode_key(key))
    }

    pub fn create_bucket(&self, bucket: &str) {
        let req = self
            .client
            .put(format!("{}/{bucket}", self.url))
            .header("authorization", Self::AUTH)
            .body(Vec::new());
        send_ok(&self.daemon, req, &format!("create bucket {bucket}"));
    }

    /// Stores `bytes` as `bucket/key` in one part (its ETag is the MD5).
    pub fn put(&self, bucket: &str, key: &str, bytes: &[u8]) {
        // A content type, or moto's web framework reads the body as a form.
        let req = self
            .client
            .put(self.object_url(bucket, key))
            .header("authorization", Self::AUTH)
            .header("content-type", "application/octet-stream")
            .body(bytes.to_vec());
        send_ok(&self.daemon, req, &format!("put {bucket}/{key}"));
    }

    /// The bytes of `bucket/key`.
    pub fn get(&self, bucket: &str, key: &str) -> Vec<u8> {
        let req = self
            .client
            .get(self.object_url(bucket, key))
            .header("authorization", Self::AUTH);
        receive_ok(&self.daemon, req, &format!("get {bucket}/{key}"))
    }

    pub fn delete(&self, bucket: &str, key: &str) {
        let req = self
            .client
            .delete(self.object_url(bucket, key))
            .header("authorization", Self::AUTH);
        send_ok(&self.daemon, req, &format!("delete {bucket}/{key}"));
    }

    /// What moto printed so far (one line per request).
    pub fn log(&self) -> String {
        self.daemon.log()
    }
}

/// The account every azurite serves, and its well-known key.
pub const AZURITE_ACCOUNT: &str = "devstoreaccount1";
const AZURITE_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

/// Azurite's blob service (from `.deps/azurite`, installed by
/// `scripts/deps.sh`) on a loopback port, data in a temporary folder. It
/// serves the account [`AZURITE_ACCOUNT`] path-style
/// (`URL/devstoreaccount1/CONTAINER/BLOB`); seeding requests are signed with
/// its well-known key (Shared Key).
pub struct Azurite {
    daemon: Daemon,
    url: String,
    client: reqwest::blocking::Client,
}

impl Azurite {
    const VERSION: &'static str = "2021-08-06";

    /// Starts azurite-blob and waits until it answers.
    pub fn start() -> Azurite {
        let bin = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("the tests crate lives in the workspace root")
            .join(".deps/azurite/node_modules/.bin/azurite-blob");
        assert!(
            bin.exists(),
            "{} is missing: run `bash scripts/deps.sh` to install azurite",
            bin.display()
        );
        let daemon = Daemon::launch("azurite", |port, dir| {
            let data = dir.join("data");
            std::fs::create_dir_all(&data).expect("azurite data folder");
            let mut c = Command::new(&bin);
            c.args(["--blobHost", "127.0.0.1", "--blobPort", &port.to_string()])
                .arg("--location")
                .arg(&data)
                .args(["--silent", "--skipApiVersionCheck", "--disableTelemetry"]);
            c
        });
        let url = format!("http://{}", daemon.addr());
        Azurite {
            daemon,
            url,
            client: seeding_client(),
        }
    }

    /// `http://127.0.0.1:PORT`, for `AZURITE_BLOB_STORAGE_URL`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A request to `/devstoreaccount1/PATH?QUERY` signed with Shared Key.
    fn signed(
        &self,
        method: reqwest::Method,
        path: &str,
        query: &[(&str, &str)],
        extra: &[(&str, &str)],
        body: &[u8],
    ) -> reqwest::blocking::RequestBuilder {
        let path = format!("/{AZURITE_ACCOUNT}/{}", encode_key(path));
        let date = http_date(std::time::SystemTime::now());
        let mut ms: Vec<(String, String)> = vec![
            ("x-ms-date".into(), date),
            ("x-ms-version".into(), Self::VERSION.into()),
        ];
        ms.extend(
            extra
                .iter()
                .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string())),
        );
        ms.sort();
        let content_type = if body.is_empty() {
            ""
        } else {
            "application/octet-stream"
        };
        let length = if body.is_empty() {
            String::new()
        } else {
            body.len().to_string()
        };
        // Version 2015-02-21 and later: an empty Content-Length for 0.
        let mut to_sign = format!(
            "{}\n\n\n{length}\n\n{content_type}\n\n\n\n\n\n\n",
            method.as_str()
        );
        for (k, v) in &ms {
            to_sign.push_str(&format!("{k}:{v}\n"));
        }
        to_sign.push_str(&format!("/{AZURITE_ACCOUNT}{path}"));
        let mut q: Vec<(String, &str)> = query
            .iter()
            .map(|(k, v)| (k.to_ascii_lowercase(), *v))
            .collect();
        q.sort();
        for (k, v) in &q {
            to_sign.push_str(&format!("\n{k}:{v}"));
        }
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let key = b64.decode(AZURITE_KEY).expect("azurite key is base64");
        let signature = b64.encode(hmac_sha256(&key, to_sign.as_bytes()));
        let mut req = self
            .client
            .request(method, format!("{}{path}{}", self.url, query_string(query)))
            .header(
                "authorization",
                format!("SharedKey {AZURITE_ACCOUNT}:{signature}"),
            )
            .body(body.to_vec());
        for (k, v) in &ms {
            req = req.header(k.as_str(), v.as_str());
        }
        if !content_type.is_empty() {
            req = req.header("content-type", content_type);
        }
        req
    }

    pub fn create_container(&self, container: &str) {
        let req = self.signed(
            reqwest::Method::PUT,
            container,
            &[("restype", "container")],
            &[],
            &[],
        );
        send_ok(&self.daemon, req, &format!("create container {container}"));
    }

    /// Stores `bytes` as the block blob `container/name`.
    pub fn put(&self, container: &str, name: &str, bytes: &[u8]) {
        let req = self.signed(
            reqwest::Method::PUT,
            &format!("{container}/{name}"),
            &[],
            &[("x-ms-blob-type", "BlockBlob")],
            bytes,
        );
        send_ok(&self.daemon, req, &format!("put {container}/{name}"));
    }

    /// The bytes of the blob `container/name`.
    pub fn get(&self, container: &str, name: &str) -> Vec<u8> {
        let req = self.signed(
            reqwest::Method::GET,
            &format!("{container}/{name}"),
            &[],
            &[],
            &[],
        );
        receive_ok(&self.daemon, req, &format!("get {container}/{name}"))
    }

    pub fn delete(&self, container: &str, name: &str) {
        let req = self.signed(
            reqwest::Method::DELETE,
            &format!("{container}/{name}"),
            &[],
            &[],
            &[],
        );
        send_ok(&self.daemon, req, &format!("delete {container}/{name}"));
    }

    /// What azurite printed so far.
    pub fn log(&self) -> String {
        self.daemon.log()
    }
}

/// HMAC-SHA256 (RFC 2104) of `msg` under `key`.
fn hmac_sha256(key: &[u8], msg: &[u8]) -> [u8; 32] {
    use sha2::Digest as _;
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&sha2::Sha256::digest(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let inner = sha2::Sha256::new()
        .chain_update(pad(0x36))
        .chain_update(msg)
        .finalize();
    sha2::Sha256::new()
        .chain_update(pad(0x5c))
        .chain_update(inner)
        .finalize()
        .into()
}

/// `Thu, 03 Dec 2026 08:08:03 GMT` (RFC 9110 IMF-fixdate).
fn http_date(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .expect("after 1970")
        .as_secs();
    let (days, rem) = ((secs / 86_400) as i64, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    const WEEKDAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    format!(
        "{}, {day:02} {} {year} {:02}:{:02}:{:02} GMT",
        WEEKDAYS[days.rem_euclid(7) as usize],
        MONTHS[(month - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// gcp-storage-emulator (from the venv) on a loopback port, in memory,
/// speaking the GCS JSON API; reads need no credentials.
pub struct GcsEmulator {
    daemon: Daemon,
    url: String,
    client: reqwest::blocking::Client,
}

impl GcsEmulator {
    /// Starts the emulator and waits until it answers.
    pub fn start() -> GcsEmulator {
        let bin = venv_bin("gcp-storage-emulator");
        let daemon = Daemon::launch("gcp-storage-emulator", |port, _| {
            let mut c = Command::new(&bin);
            c.args(["start", "--host", "127.0.0.1", "--port", &port.to_string()])
                .arg("--in-memory");
            c
        });
        let url = format!("http://{}", daemon.addr());
        GcsEmulator {
            daemon,
            url,
            client: seeding_client(),
        }
    }

    /// `http://127.0.0.1:PORT`, for `STORAGE_EMULATOR_HOST`.
    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn create_bucket(&self, bucket: &str) {
        let req = self
            .client
            .post(format!("{}/storage/v1/b?project=test", self.url))
            .header("content-type", "application/json")
            .body(serde_json::json!({ "name": bucket }).to_string());
        send_ok(&self.daemon, req, &format!("create bucket {bucket}"));
    }

    /// Uploads `bytes` as the object `bucket/name`: a media upload, or a
    /// multipart one for no bytes (the emulator fails on an empty media
    /// upload).
    pub fn put(&self, bucket: &str, name: &str, bytes: &[u8]) {
        if bytes.is_empty() {
            let body = format!(
                "--sealvol\r\nContent-Type: application/json; charset=UTF-8\r\n\r\n{}\r\n\
                 --sealvol\r\nContent-Type: application/octet-stream\r\n\r\n\r\n--sealvol--\r\n",
                serde_json::json!({ "name": name })
            );
            let req = self
                .client
                .post(format!(
                    "{}/upload/storage/v1/b/{bucket}/o?uploadType=multipart",
                    self.url
                ))
                .header("content-type", "multipart/related; boundary=sealvol")
                .body(body);
            return send_ok(&self.daemon, req, &format!("put empty {bucket}/{name}"));
        }
        let req = self
            .client
            .post(format!(
                "{}/upload/storage/v1/b/{bucket}/o{}",
                self.url,
                query_string(&[("uploadType", "media"), ("name", name)])
            ))
            .header("content-type", "application/octet-stream")
            .body(bytes.to_vec());
        send_ok(&self.daemon, req, &format!("put {bucket}/{name}"));
    }

    /// The bytes of the object `bucket/name`.
    pub fn get(&self, bucket: &str, name: &str) -> Vec<u8> {
        let segment = encode_key(name).replace('/', "%2F");
        let req = self.client.get(format!(
            "{}/storage/v1/b/{bucket}/o/{segment}?alt=media",
            self.url
        ));
        receive_ok(&self.daemon, req, &format!("get {bucket}/{name}"))
    }

    pub fn delete(&self, bucket: &str, name: &str) {
        // The object name is one path segment: its slashes encoded too.
        let segment = encode_key(name).replace('/', "%2F");
        let req = self
            .client
            .delete(format!("{}/storage/v1/b/{bucket}/o/{segment}", self.url));
        send_ok(&self.daemon, req, &format!("delete {bucket}/{name}"));
    }

    /// What the emulator printed so far.
    pub fn log(&self) -> String {
        self.daemon.log()
    }
}

/// The Hugging Face Hub API fixture (`tests/fixtures/hf_hub.py`, run by the
/// venv's python) serving the repositories under `root`
/// (`root/models/ORG/REPO/…`), killed and waited for when dropped.
pub struct HfHub {
    child: Option<Child>,
    url: String,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl HfHub {
    /// Starts the fixture on a port it picks; `rate` throttles downloads to
    /// that many bytes per second, `fail_first` answers 503 to that many
    /// downloads first. Waits until it prints where it listens.
    pub fn start(root: &Path, rate: Option<u64>, fail_first: u32) -> HfHub {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/hf_hub.py");
        assert!(script.exists(), "{} is missing", script.display());
        let dir = tempfile::tempdir().expect("temporary folder for the hub fixture");
        let log = dir.path().join("log");
        let mut cmd = Command::new(venv_bin("python"));
        cmd.arg(&script)
            .arg("--root")
            .arg(root)
            .args(["--port", "0", "--verbose"]);
        if let Some(r) = rate {
            cmd.args(["--rate", &r.to_string()]);
        }
        if fail_first > 0 {
            cmd.args(["--fail-first", &fail_first.to_string()]);
        }
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).expect("log file"))
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", script.display()));
        let mut stdout = BufReader::new(child.stdout.take().expect("piped stdout"));
        let mut hub = HfHub {
            child: Some(child),
            url: String::new(),
            log,
            _dir: dir,
        };
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        hub.url = line
            .trim()
            .strip_prefix("listening on ")
            .filter(|u| u.starts_with("http://127.0.0.1:") || u.starts_with("https://127.0.0.1:"))
            .unwrap_or_else(|| {
                panic!(
                    "the hub fixture did not say where it listens: {line:?}; its log:\n{}",
                    hub.log()
                )
            })
            .trim_end_matches('/')
            .to_string();
        // Whatever else it prints is read and dropped, so it never blocks
        // on a full pipe.
        std::thread::spawn(move || std::io::copy(&mut stdout, &mut std::io::sink()));
        hub
    }

    /// `http://127.0.0.1:PORT`, for `HF_ENDPOINT`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// What the fixture wrote to stderr so far: a line per request.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The file paths (`org/repo/PATH` for models, `datasets/org/repo/PATH`)
    /// of every download so far (`GET` of a file's bytes, begun whether or
    /// not it finished), in order.
    pub fn downloads(&self) -> Vec<String> {
        self.log()
            .lines()
            .filter_map(|line| {
                // `127.0.0.1 - "GET /cdn/KIND/ORG/REPO/COMMIT/PATH?sig=… HTTP/1.1" 200 -`
                let target = line.split("\"GET /cdn/").nth(1)?.split([' ', '?']).next()?;
                let mut parts = target.splitn(5, '/');
                let (kind, org, repo, _commit, path) = (
                    parts.next()?,
                    parts.next()?,
                    parts.next()?,
                    parts.next()?,
                    parts.next()?,
                );
                let path = percent_decode(path);
                Some(match kind {
                    "models" => format!("{org}/{repo}/{path}"),
                    _ => format!("{kind}/{org}/{repo}/{path}"),
                })
            })
            .collect()
    }
}

/// `%XX` escapes of a URL path decoded (as UTF-8, lossily).
fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match (
            b[i],
            b.get(i + 1).copied().and_then(hex),
            b.get(i + 2).copied().and_then(hex),
        ) {
            (b'%', Some(h), Some(l)) => {
                out.push((h * 16 + l) as u8);
                i += 3;
            }
            (c, _, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

impl Drop for HfHub {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// Workload identity (tests/tests/workload_identity.rs): moto with IAM
// enforced, and a registry whose AWS settings are the test's alone.

impl Moto {
    /// An IAM role that trusts web identities, with `policy` (a policy
    /// document) inline when given; its ARN.
    pub fn create_role(&self, name: &str, policy: Option<&str>) -> String {
        let trust = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"Federated":"arn:aws:iam::123456789012:oidc-provider/oidc.example"},"Action":"sts:AssumeRoleWithWebIdentity"}]}"#;
        self.iam(
            &format!("create role {name}"),
            &[
                ("Action", "CreateRole"),
                ("RoleName", name),
                ("AssumeRolePolicyDocument", trust),
            ],
        );
        if let Some(policy) = policy {
            self.iam(
                &format!("put the policy of role {name}"),
                &[
                    ("Action", "PutRolePolicy"),
                    ("RoleName", name),
                    ("PolicyName", "inline"),
                    ("PolicyDocument", policy),
                ],
            );
        }
        format!("arn:aws:iam::123456789012:role/{name}")
    }

    /// One IAM API call (a form POST that moto routes by the service its
    /// `Authorization` names).
    fn iam(&self, what: &str, pairs: &[(&str, &str)]) {
        let mut pairs = pairs.to_vec();
        pairs.push(("Version", "2010-05-08"));
        let body = query_string(&pairs).trim_start_matches('?').to_string();
        let req = self
            .client
            .post(format!("{}/", self.url))
            .header("authorization", Self::AUTH.replace("/s3/", "/iam/"))
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body);
        send_ok(&self.daemon, req, what);
    }

    /// From now on moto checks every request after the next `unsigned`
    /// ones as AWS would: a signature by a key it issued, and an IAM
    /// policy that allows the action (its `reset-auth` API, the runtime
    /// form of `INITIAL_NO_AUTH_ACTION_COUNT`). The seeding methods stop
    /// working once the `unsigned` are spent.
    pub fn enforce_iam(&self, unsigned: u32) {
        let req = self
            .client
            .post(format!("{}/moto-api/reset-auth", self.url))
            .body(unsigned.to_string());
        send_ok(&self.daemon, req, "enforce IAM");
    }
}

impl Server {
    /// [`Server::start_config_env`] with none of the test's own `AWS_*`
    /// variables: the registry's AWS settings are `env`, whatever the
    /// environment the tests run in.
    pub fn start_config_aws_env(root: &Path, config: &str, env: &[(&str, &str)]) -> Server {
        let file = write_config(root, "127.0.0.1:0", config);
        let args = ["serve", "--config", s(&file)];
        let mut cmd = Command::new(sealvol_bin());
        cmd.args(args);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("AWS_") {
                cmd.env_remove(k);
            }
        }
        cmd.envs(env.iter().copied());
        Server::try_spawn_command(cmd, &args, root).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// A containerd of the test's own (root, state and socket in a temporary
/// folder), killed when dropped.
pub struct Containerd {
    child: Child,
    dir: tempfile::TempDir,
}

impl Containerd {
    pub fn start() -> Containerd {
        Containerd::start_with("")
    }

    /// With `extra` appended to its `config.toml` (a proxy plugin, say).
    pub fn start_with(extra: &str) -> Containerd {
        let dir = tempfile::tempdir().expect("containerd's folder");
        let d = dir.path();
        std::fs::write(
            d.join("config.toml"),
            format!(
                "version = 2\nroot = {:?}\nstate = {:?}\n[grpc]\n  address = {:?}\n\
                 [plugins.\"io.containerd.grpc.v1.cri\"]\n  disable_tcp_service = true\n{extra}",
                s(&d.join("root")),
                s(&d.join("state")),
                s(&d.join("c.sock"))
            ),
        )
        .expect("containerd's config");
        let log = std::fs::File::create(d.join("log")).expect("containerd's log");
        let child = Command::new("containerd")
            .arg("--config")
            .arg(d.join("config.toml"))
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("run containerd (installed by scripts/deps.sh)");
        let c = Containerd { child, dir };
        for _ in 0..100 {
            if c.ctr(&["version"]).status.success() {
                return c;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!(
            "containerd did not answer within 10 s; its log:\n{}",
            c.log()
        );
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default()
    }

    /// Its gRPC socket.
    pub fn address(&self) -> PathBuf {
        self.dir.path().join("c.sock")
    }

    pub fn ctr(&self, args: &[&str]) -> Output {
        Command::new("ctr")
            .arg("--address")
            .arg(self.dir.path().join("c.sock"))
            .args(args)
            .output()
            .expect("run ctr (installed with containerd by scripts/deps.sh)")
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod emulator_tests {
    #[test]
    fn hmac_sha256_matches_rfc_4231() {
        // Test cases 2 and 6 (a key longer than the block).
        assert_eq!(
            hex::encode(super::hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
        assert_eq!(
            hex::encode(super::hmac_sha256(
                &[0xaa; 131],
                b"Test Using Larger Than Block-Size Key - Hash Key First"
            )),
            "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"
        );
    }

    #[test]
    fn http_date_is_imf_fixdate() {
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_796_285_283);
        assert_eq!(super::http_date(t), "Thu, 03 Dec 2026 08:08:03 GMT");
        assert_eq!(
            super::http_date(std::time::UNIX_EPOCH + std::time::Duration::from_secs(951_782_400)),
            "Tue, 29 Feb 2000 00:00:00 GMT"
        );
    }
}
