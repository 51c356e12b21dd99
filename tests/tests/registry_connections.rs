//! `sealvol serve` holds no connection for a client that stops sending:
//! headers must arrive within `[http] read_header_timeout_seconds`, a
//! body that stalls for `idle_timeout_seconds` fails with 408, and past
//! `max_connections` clients wait for a slot instead of each costing the
//! server a task and a file. Clients that behave are served throughout.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use sealvol_tests::{host, Server};

/// A registry with short connection timeouts and at most `max`
/// connections.
fn server(root: &std::path::Path, max: usize) -> Server {
    Server::start_config_env(
        root,
        &format!(
            "[http]\nread_header_timeout_seconds = 2\nidle_timeout_seconds = 2\nmax_connections = {max}\n"
        ),
        &[],
    )
}

/// A connection that has sent `bytes` and will send nothing more.
fn stalled(addr: &str, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect to the registry");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(bytes).expect("send the partial request");
    s
}

/// Reads until the server closes `s`; what it sent before closing.
/// Panics if it is still open when the read times out.
fn until_closed(s: &mut TcpStream) -> Vec<u8> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return got,
            Err(e) => panic!("the connection is still open ({e}); it sent {got:?}"),
        }
    }
}

/// `GET /v2/` on a fresh connection: its status line.
fn get_base(addr: &str) -> String {
    let mut s = TcpStream::connect(addr).expect("connect to the registry");
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(
        format!("GET /v2/ HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .unwrap();
    let answer = String::from_utf8_lossy(&until_closed(&mut s)).into_owned();
    answer.lines().next().unwrap_or_default().to_string()
}

#[test]
fn clients_that_stop_sending_headers_are_closed_and_others_are_served() {
    let root = tempfile::tempdir().unwrap();
    let serve = server(root.path(), 1000);
    let addr = host(&serve);
    let started = Instant::now();
    let mut slow: Vec<TcpStream> = (0..20)
        .map(|i| {
            let partial = format!("GET /v2/ HTTP/1.1\r\nHost: {addr}\r\nX-Slow: {i}");
            stalled(&addr, partial.as_bytes())
        })
        .collect();
    // A client that behaves is answered while they wait.
    assert_eq!(get_base(&addr), "HTTP/1.1 200 OK");
    for s in &mut slow {
        until_closed(s);
    }
    let waited = started.elapsed();
    assert!(
        waited < Duration::from_secs(8),
        "the slow clients were closed only after {waited:?}"
    );
    // A kept-alive connection that sends no second request goes too.
    let mut idle = stalled(
        &addr,
        format!("GET /v2/ HTTP/1.1\r\nHost: {addr}\r\n\r\n").as_bytes(),
    );
    let started = Instant::now();
    let answer = String::from_utf8_lossy(&until_closed(&mut idle)).into_owned();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(started.elapsed() < Duration::from_secs(8));
    assert_eq!(get_base(&addr), "HTTP/1.1 200 OK");
}

#[test]
fn a_body_that_stops_arriving_fails_with_408() {
    let root = tempfile::tempdir().unwrap();
    let serve = server(root.path(), 1000);
    let addr = host(&serve);
    let started = Instant::now();
    let mut s = stalled(
        &addr,
        format!(
            "PUT /v2/ns/vol/manifests/latest HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/vnd.oci.image.manifest.v1+json\r\nContent-Length: 1000\r\n\r\n{{\"schemaVersion\":"
        )
        .as_bytes(),
    );
    let answer = String::from_utf8_lossy(&until_closed(&mut s)).into_owned();
    assert!(
        answer.starts_with("HTTP/1.1 408"),
        "a stalled manifest body: {answer}"
    );
    assert!(answer.contains("\"errors\""), "an OCI error body: {answer}");
    assert!(started.elapsed() < Duration::from_secs(8));

    // A blob upload's body, streamed to the store, as well.
    let mut s = stalled(
        &addr,
        format!(
            "POST /v2/ns/vol/blobs/uploads/?digest=sha256:{} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 1000\r\n\r\nsome bytes",
            "0".repeat(64)
        )
        .as_bytes(),
    );
    let answer = String::from_utf8_lossy(&until_closed(&mut s)).into_owned();
    let status = answer.split(' ').nth(1).unwrap_or_default();
    assert!(status.starts_with('4'), "a stalled blob body: {answer}");
    assert!(started.elapsed() < Duration::from_secs(14));
    assert_eq!(get_base(&addr), "HTTP/1.1 200 OK");
}

#[test]
fn clients_past_the_connection_cap_wait_for_a_slot() {
    let root = tempfile::tempdir().unwrap();
    let serve = server(root.path(), 4);
    let addr = host(&serve);
    let started = Instant::now();
    let mut slow: Vec<TcpStream> = (0..4)
        .map(|_| stalled(&addr, b"GET /v2/ HTTP/1.1\r\n"))
        .collect();
    // Let the server take all four before the fifth comes.
    std::thread::sleep(Duration::from_millis(300));
    // The fifth is served once the header timeout closes one of the four.
    assert_eq!(get_base(&addr), "HTTP/1.1 200 OK");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(1500),
        "served after {waited:?}: the four slow clients held no slot"
    );
    assert!(waited < Duration::from_secs(8), "served after {waited:?}");
    for s in &mut slow {
        until_closed(s);
    }
}
