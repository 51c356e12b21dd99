//! The registry's whole HTTP app in process (CNCF distribution's
//! `FuzzApp`): any request, through every layer (auth, CSRF, body limits,
//! timeouts, panics caught), against one registry per fuzzing process whose
//! state the inputs build up. Never a panic, never a 5xx.
//!
//! An input is a request as text, so seeds are written by hand and the
//! dictionary (`fuzz/app.dict`) brings realistic path segments:
//!
//! ```text
//! METHOD /path?query
//! Name: value
//!
//! body
//! ```
//!
//! In the request line, headers and body, `{d}` stands for the sha256
//! digest of the body, `{u}` for the id of the last upload session the
//! registry opened, and `{b}` for the digest of the last blob pushed: a
//! fuzzer cannot guess them.
#![no_main]

use std::sync::Mutex;

use axum::body::Body;
use axum::http::{Method, Request, Uri};
use libfuzzer_sys::fuzz_target;
use sealvol_fuzz::{assert_not_5xx, registry, sha256};

/// `{u}` and `{b}`: what earlier inputs left.
static LAST: Mutex<(String, String)> = Mutex::new((String::new(), String::new()));

fn fill(bytes: &[u8], d: &str, u: &str, b: &str) -> Vec<u8> {
    let s = String::from_utf8_lossy(bytes);
    if !s.contains('{') {
        return bytes.to_vec();
    }
    s.replace("{d}", d)
        .replace("{u}", u)
        .replace("{b}", b)
        .into_bytes()
}

fuzz_target!(|data: &[u8]| {
    let (head, body) = match data.windows(2).position(|w| w == b"\n\n") {
        Some(i) => (&data[..i], &data[i + 2..]),
        None => (data, &[][..]),
    };
    let mut lines = head.split(|&c| c == b'\n');
    let Some(line) = lines.next() else { return };
    let Some(sp) = line.iter().position(|&c| c == b' ') else {
        return;
    };
    let (u, b) = LAST.lock().expect("last").clone();
    let d = sha256(body);
    let Ok(method) = Method::from_bytes(&line[..sp]) else {
        return;
    };
    let target = fill(&line[sp + 1..], &d, &u, &b);
    let Ok(uri) = Uri::from_maybe_shared(bytes::Bytes::from(target)) else {
        return;
    };
    let mut req = Request::builder().method(method).uri(uri);
    for h in lines {
        let Some(colon) = h.iter().position(|&c| c == b':') else {
            continue;
        };
        let value = fill(&h[colon + 1..], &d, &u, &b);
        let value = value.trim_ascii();
        let (Ok(name), Ok(value)) = (
            axum::http::HeaderName::from_bytes(&h[..colon]),
            axum::http::HeaderValue::from_bytes(value),
        ) else {
            continue;
        };
        req = req.header(name, value);
    }
    let body = fill(body, &d, &u, &b);
    let Ok(req) = req.body(Body::from(body)) else {
        return;
    };
    let what = format!("{} {}", req.method(), req.uri());
    let a = registry().send(req);
    assert_not_5xx(&what, &a);
    // Remember what the fuzzer cannot guess.
    if let Some(id) = a.headers.get("docker-upload-uuid") {
        LAST.lock().expect("last").0 = id.to_str().unwrap_or_default().to_string();
    }
    if let Some(d) = a.headers.get("docker-content-digest") {
        LAST.lock().expect("last").1 = d.to_str().unwrap_or_default().to_string();
    }
});
