//! The blob upload state machine (distribution spec "pushing blobs"):
//! sequences of POST (session or monolithic), PATCH (with or without a
//! `Content-Range`, in order or not), PUT (with the right digest or not),
//! GET and DELETE of a session, against the registry in process. Never a
//! panic or a 5xx; a completed upload stores exactly the bytes sent, and a
//! session's reported size is the bytes it accepted.
#![no_main]

use arbitrary::Arbitrary;
use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use libfuzzer_sys::fuzz_target;
use sealvol_fuzz::{assert_not_5xx, registry, sha256};

#[derive(Arbitrary, Debug)]
enum Op {
    /// Opens a session (or uploads monolithically with `?digest=`).
    Post {
        monolithic: bool,
        body: Vec<u8>,
    },
    /// Appends to the current session.
    Patch {
        range: Range,
        body: Vec<u8>,
    },
    /// Completes the current session.
    Put {
        right_digest: bool,
        range: Range,
        body: Vec<u8>,
    },
    Status,
    Delete,
    /// Uploads to a session of another repository.
    OtherRepo {
        body: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug)]
enum Range {
    None,
    /// `start-(start+len-1)` with the start the session's size.
    Next,
    Given(u64, u64),
    Raw(String),
}

#[derive(Default)]
struct Session {
    location: Option<String>,
    /// What the session holds as far as its answers told.
    sent: Vec<u8>,
}

fn request(method: Method, uri: &str, range: Option<String>, body: Vec<u8>) -> Request<Body> {
    let mut b = Request::builder().method(method).uri(uri);
    if let Some(r) = range {
        b = b.header("content-range", r);
    }
    if !body.is_empty() {
        b = b
            .header("content-length", body.len())
            .header("content-type", "application/octet-stream");
    }
    b.body(Body::from(body)).expect("a request")
}

fn range_value(r: &Range, s: &Session, len: usize) -> Option<String> {
    match r {
        Range::None => None,
        Range::Next => {
            let start = s.sent.len() as u64;
            Some(format!(
                "{start}-{}",
                (start + len as u64).saturating_sub(1)
            ))
        }
        Range::Given(a, b) => Some(format!("{a}-{b}")),
        // What a client could send: a value HTTP allows in a header.
        Range::Raw(v) => axum::http::HeaderValue::from_str(v)
            .is_ok()
            .then(|| v.clone()),
    }
}

fuzz_target!(|ops: Vec<Op>| {
    let reg = registry();
    let mut s = Session::default();
    for op in ops.into_iter().take(16) {
        match op {
            Op::Post { monolithic, body } => {
                let uri = if monolithic {
                    format!("/v2/fuzz/up/blobs/uploads/?digest={}", sha256(&body))
                } else {
                    "/v2/fuzz/up/blobs/uploads/".to_string()
                };
                let a = reg.send(request(Method::POST, &uri, None, body.clone()));
                assert_not_5xx(&uri, &a);
                if monolithic {
                    assert_eq!(a.status, StatusCode::CREATED, "{uri}");
                    check_stored(&body);
                } else if a.status == StatusCode::ACCEPTED {
                    let loc = a.headers.get("location").expect("a session's location");
                    s = Session {
                        location: Some(loc.to_str().expect("text").to_string()),
                        sent: Vec::new(),
                    };
                }
            }
            Op::Patch { range, body } => {
                let Some(loc) = s.location.clone() else {
                    continue;
                };
                let r = range_value(&range, &s, body.len());
                let a = reg.send(request(Method::PATCH, &loc, r.clone(), body.clone()));
                assert_not_5xx(&(&loc, &r), &a);
                if a.status == StatusCode::ACCEPTED {
                    s.sent.extend_from_slice(&body);
                    check_size(&a, &s);
                }
            }
            Op::Put {
                right_digest,
                range,
                body,
            } => {
                let Some(loc) = s.location.clone() else {
                    continue;
                };
                let mut whole = s.sent.clone();
                whole.extend_from_slice(&body);
                let digest = if right_digest {
                    sha256(&whole)
                } else {
                    sha256(b"not these bytes")
                };
                let sep = if loc.contains('?') { '&' } else { '?' };
                let uri = format!("{loc}{sep}digest={digest}");
                let r = range_value(&range, &s, body.len());
                let a = reg.send(request(Method::PUT, &uri, r.clone(), body));
                assert_not_5xx(&(&uri, &r), &a);
                if a.status == StatusCode::CREATED {
                    assert!(right_digest || whole == b"not these bytes");
                    check_stored(&whole);
                    s = Session::default();
                }
            }
            Op::Status => {
                let Some(loc) = s.location.clone() else {
                    continue;
                };
                let a = reg.send(request(Method::GET, &loc, None, Vec::new()));
                assert_not_5xx(&loc, &a);
                if a.status == StatusCode::NO_CONTENT {
                    check_size(&a, &s);
                }
            }
            Op::Delete => {
                let Some(loc) = s.location.take() else {
                    continue;
                };
                let a = reg.send(request(Method::DELETE, &loc, None, Vec::new()));
                assert_not_5xx(&loc, &a);
            }
            Op::OtherRepo { body } => {
                // A session id used under another repository's name.
                let Some(loc) = s.location.clone() else {
                    continue;
                };
                let other = loc.replacen("/v2/fuzz/up/", "/v2/fuzz/other/", 1);
                let a = reg.send(request(Method::PATCH, &other, None, body));
                assert_not_5xx(&other, &a);
                if a.status == StatusCode::ACCEPTED {
                    // The session took it: keep its size in step, but the
                    // registry should not let another repository write
                    // to it.
                    panic!("{other} wrote to a session of fuzz/up");
                }
            }
        }
    }
});

/// The `Range: 0-<size-1>` header of an upload's answer says `s.sent`.
fn check_size(a: &sealvol_fuzz::Answer, s: &Session) {
    let r = a.headers.get("range").map(|v| v.to_str().unwrap_or("?"));
    let want = if s.sent.is_empty() {
        // Distribution answers 0-0 for an empty session too.
        None
    } else {
        Some(format!("0-{}", s.sent.len() - 1))
    };
    if let Some(want) = want {
        assert_eq!(r, Some(want.as_str()), "an upload's size");
    }
}

/// A completed upload's bytes are the registry's blob, byte for byte.
fn check_stored(data: &[u8]) {
    let reg = registry();
    let uri = format!("/v2/fuzz/up/blobs/{}", sha256(data));
    let a = reg.send(request(Method::GET, &uri, None, Vec::new()));
    assert_eq!(a.status, StatusCode::OK, "{uri}");
    assert_eq!(&a.body[..], data, "{uri}");
}
