//! A seeded fuzzer of malformed requests against the real `sealvol serve`:
//! a few thousand requests with random paths, percent-encodings, digests,
//! tags, `Range` and `Content-Range` values, out-of-order upload chunks,
//! garbage, deeply nested and huge JSON manifests, forged version indexes
//! and broken HTTP framing, sent over plain sockets so that nothing is
//! tidied on the way. What every answer must be:
//!
//! - never a 5xx (a malformed request is the client's fault);
//! - under `/v2/` and `/api/v1/`, a 4xx carries the JSON error body
//!   `{"errors":[{"code":…}]}`; under `/ui/` the view's own page (or the
//!   same JSON, from the layers before it);
//! - every request is answered (or, when its framing is broken on purpose,
//!   its connection closed) within 30 s;
//!
//! and at the end the server is alive and the pushed volume's versions are
//! as they were: whatever was sent, no sealed version moved.
//!
//! The seed is fixed, so a failure reproduces; `SEALVOL_FUZZ_SEED` and
//! `SEALVOL_FUZZ_REQUESTS` run another sequence or a longer one.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use sealvol_spec::ChunkingParams;
use sealvol_tests::forge::Mirror;
use sealvol_tests::{host, noise, sha256, Server};
use serde_json::{json, Value};

const SEED: u64 = 0x5ea1_f022_0028;
const REQUESTS: usize = 2000;
/// Clients sending at once after the ordered pass, `REQUESTS / 2` in all.
const CONCURRENT: usize = 4;
/// The volume the fuzzer may not delete from: its versions must survive.
const VOL: &str = "ns/vol";
/// Where requests that would delete or change things legitimately go.
const SCRATCH: &str = "ns/scratch";
const INDEX_TYPE: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// xorshift64: small, and the same sequence everywhere.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// A short string of any characters, percent-encoded for a path or a
    /// query (NUL, `/`, `%`, non-UTF-8 and unicode included).
    fn junk(&mut self) -> String {
        let n = self.below(12);
        let raw: Vec<u8> = (0..n)
            .map(|_| match self.below(4) {
                0 => *self.pick(b"\0/%?#&=:.\\ \"'<>+\xff\xc3\xa9"),
                1 => b'a' + self.below(26) as u8,
                _ => self.next() as u8,
            })
            .collect();
        encode(&raw)
    }
}

/// Percent-encodes everything but unreserved characters.
fn encode(raw: &[u8]) -> String {
    raw.iter()
        .map(|&b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// What the pushed volume holds, for requests that name real things.
#[derive(Clone)]
struct Known {
    /// `b3:<hex>` of its two versions.
    versions: Vec<String>,
    /// Their index digests and bytes.
    indexes: Vec<(String, Vec<u8>)>,
    /// Tree, shard and view manifests of the first: digest and bytes.
    manifests: Vec<(String, Vec<u8>)>,
    /// Blobs in the volume's repository (chunks, configs, tree blobs).
    blobs: Vec<String>,
    /// Upload sessions started here: repository and id.
    uploads: Vec<(String, String)>,
    /// `b3:<hex>` of the scratch volume's version.
    scratch: String,
}

/// One request. `declared` overrides `Content-Length` (a lie, then the
/// socket's write side is closed so that the server sees the body end);
/// `raw` replaces the whole request with bytes of broken framing.
#[derive(Clone, Debug, Default)]
struct Req {
    method: String,
    target: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    declared: Option<String>,
    raw: Option<Vec<u8>>,
}

impl Req {
    fn new(method: &str, target: String) -> Req {
        Req {
            method: method.into(),
            target,
            ..Default::default()
        }
    }

    fn header(mut self, k: &str, v: impl Into<String>) -> Req {
        self.headers.push((k.into(), v.into()));
        self
    }

    fn body(mut self, body: Vec<u8>) -> Req {
        self.body = body;
        self
    }

    fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or_default()
    }

    /// What is written to the socket.
    fn bytes(&self, addr: &str) -> Vec<u8> {
        if let Some(raw) = &self.raw {
            return raw.clone();
        }
        let mut head = format!(
            "{} {} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n",
            self.method, self.target
        );
        for (k, v) in &self.headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        let length = match &self.declared {
            Some(d) => Some(d.clone()),
            None if !self.body.is_empty() || ["PUT", "POST", "PATCH"].contains(&&*self.method) => {
                Some(self.body.len().to_string())
            }
            None => None,
        };
        if let Some(l) = length {
            head.push_str(&format!("Content-Length: {l}\r\n"));
        }
        head.push_str("\r\n");
        let mut out = head.into_bytes();
        out.extend_from_slice(&self.body);
        out
    }

    /// Whether the request is broken at the HTTP level on purpose, so that
    /// hyper answers (or closes) before the registry sees it.
    fn broken_framing(&self) -> bool {
        self.raw.is_some() || self.declared.is_some()
    }

    fn describe(&self) -> String {
        let mut d = format!("{} {}", self.method, self.target);
        for (k, v) in &self.headers {
            d.push_str(&format!(" [{k}: {v}]"));
        }
        if let Some(l) = &self.declared {
            d.push_str(&format!(" [Content-Length: {l}]"));
        }
        let body = String::from_utf8_lossy(&self.body);
        let body: String = body.chars().take(160).collect();
        if !self.body.is_empty() {
            d.push_str(&format!(" body({} bytes): {body:?}", self.body.len()));
        }
        if let Some(raw) = &self.raw {
            let raw = String::from_utf8_lossy(raw);
            d = format!("raw: {:?}", raw.chars().take(200).collect::<String>());
        }
        d
    }
}

/// What came back.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        (self.headers.iter())
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends `req` on a fresh connection and reads the answer to the end;
/// `None` when the server closed without answering.
fn send(addr: &str, req: &Req) -> Result<Option<Reply>, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(30))).unwrap();
    // The server may answer (and close) before taking the whole body.
    let _ = s.write_all(&req.bytes(addr));
    if req.broken_framing() {
        let _ = s.shutdown(Shutdown::Write);
    }
    let mut got = Vec::new();
    if let Err(e) = s.read_to_end(&mut got) {
        match e.kind() {
            std::io::ErrorKind::ConnectionReset => {}
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                return Err(format!("no answer within 30 s (got {} bytes)", got.len()))
            }
            _ => return Err(format!("read: {e}")),
        }
    }
    if got.is_empty() {
        return Ok(None);
    }
    parse_reply(&got, req.method == "HEAD").map(Some)
}

fn parse_reply(got: &[u8], head: bool) -> Result<Reply, String> {
    let end = (got.windows(4).position(|w| w == b"\r\n\r\n"))
        .ok_or_else(|| format!("no header end in {:?}", String::from_utf8_lossy(got)))?;
    let text = String::from_utf8_lossy(&got[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let status_line = lines.next().unwrap_or_default();
    let status = (status_line.split(' ').nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("bad status line {status_line:?}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .collect();
    let mut body = got[end + 4..].to_vec();
    let chunked = (headers.iter())
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked && !head {
        body = dechunk(&body);
    }
    Ok(Reply {
        status,
        headers,
        body,
    })
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size = String::from_utf8_lossy(&data[..eol]);
        let Ok(n) = usize::from_str_radix(size.split(';').next().unwrap_or("").trim(), 16) else {
            break;
        };
        data = &data[eol + 2..];
        if n == 0 || data.len() < n {
            break;
        }
        out.extend_from_slice(&data[..n]);
        data = data.get(n + 2..).unwrap_or_default();
    }
    out
}

/// What is wrong with `reply` to `req`, if anything.
fn judge(req: &Req, reply: Option<&Reply>) -> Option<String> {
    let Some(reply) = reply else {
        return (!req.broken_framing()).then(|| "closed without an answer".to_string());
    };
    if reply.status >= 500 {
        return Some(format!(
            "{}: {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        ));
    }
    if !(400..500).contains(&reply.status) || req.method == "HEAD" || req.broken_framing() {
        return None;
    }
    let path = req.path();
    let oci_body = || {
        let v: Value = serde_json::from_slice(&reply.body).ok()?;
        v["errors"][0]["code"].as_str().map(str::to_string)
    };
    if path.starts_with("/v2/") || path == "/v2" || path.starts_with("/api/v1") {
        if oci_body().is_none() {
            return Some(format!(
                "{} without an error body: {:?}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
            ));
        }
    } else if path.starts_with("/ui/") || path == "/ui" {
        let ct = reply.header("content-type").unwrap_or_default();
        let page = ct.starts_with("text/html") && !reply.body.is_empty();
        if !page && oci_body().is_none() {
            return Some(format!(
                "{} with neither the view's page nor an error body ({ct:?}): {:?}",
                reply.status,
                String::from_utf8_lossy(&reply.body)
            ));
        }
    }
    None
}

// ---- what the requests are made of ----------------------------------------

fn hex64(rng: &mut Rng) -> String {
    (0..64)
        .map(|_| char::from(*rng.pick(b"0123456789abcdef")))
        .collect()
}

/// A repository name: the volume, scratch ones, or a malformed one.
/// `changes` keeps requests that delete or change things off the volume.
fn repo(rng: &mut Rng, changes: bool) -> String {
    let fixed = [
        VOL,
        SCRATCH,
        "ns/other",
        "NS/Vol",
        "ns",
        "a/b/c/d",
        "ns//vol",
        "ns/vol/",
        "..",
        "ns/..",
        "ns/%2E%2E",
        "ns%2Fvol",
        "ns/vol%00",
        "ns/%FF",
        "ns/%C3%A9",
        "ns/-",
        "ns/_",
        "ns/a..b",
        "ns/vol/manifests",
        "ns/vol/blobs",
        "_catalog",
        "ns/UPPER",
    ];
    let r = match rng.below(20) {
        0 => "a".repeat(rng.pick(&[255, 256, 300, 5000]).to_owned()),
        1 => format!("ns/{}", rng.junk()),
        2 => format!("{}/{}", rng.junk(), rng.junk()),
        3..=9 => VOL.to_string(),
        10..=12 => SCRATCH.to_string(),
        _ => rng.pick(&fixed).to_string(),
    };
    // `ns%2Fvol` is the volume too, decoded by the volume API and the view.
    if changes && (r == VOL || r == "ns%2Fvol") {
        SCRATCH.to_string()
    } else {
        r
    }
}

fn digest(rng: &mut Rng, k: &Known) -> String {
    match rng.below(12) {
        0..=2 => rng.pick(&k.blobs).clone(),
        3 => rng.pick(&k.indexes).0.clone(),
        4 => rng.pick(&k.manifests).0.clone(),
        5 => format!("sha256:{}", hex64(rng)),
        6 => format!("sha256:{}", &hex64(rng)[..63]),
        7 => format!("sha256:{}", hex64(rng).to_uppercase()),
        8 => format!("sha512:{}{}", hex64(rng), hex64(rng)),
        9 => rng.pick(&k.versions).clone(),
        10 => rng.junk(),
        _ => (*rng.pick(&[
            "sha256:",
            "sha256",
            ":",
            "sha256:%00",
            "sha256:zz",
            "b3:",
            "",
            "sha256:..",
        ]))
        .to_string(),
    }
}

fn reference(rng: &mut Rng, k: &Known) -> String {
    match rng.below(10) {
        0..=2 => digest(rng, k),
        3 => format!("b3-{}", rng.pick(&k.versions).trim_start_matches("b3:")),
        4 => format!("b3-{}", hex64(rng)),
        5 => "t".repeat(rng.pick(&[128, 129, 1000]).to_owned()),
        6 => rng.junk(),
        _ => (*rng.pick(&[
            "head",
            "prod",
            "latest",
            "v1",
            "-x",
            ".x",
            "a%00",
            "tag%20x",
            "%F0%9F%92%A9",
            "",
        ]))
        .to_string(),
    }
}

fn query(rng: &mut Rng, k: &Known) -> String {
    let mut parts = Vec::new();
    for _ in 0..rng.below(4) {
        let part = match rng.below(14) {
            0 => "n=-1".to_string(),
            1 => format!(
                "n={}",
                rng.pick(&[
                    "0",
                    "1",
                    "2",
                    "abc",
                    "",
                    "18446744073709551616",
                    "99999999999"
                ])
            ),
            2 => "last=%ff".to_string(),
            3 => format!("last={}", rng.junk()),
            4 => format!("digest={}", digest(rng, k)),
            5 => format!("mount={}&from={}", digest(rng, k), repo(rng, false)),
            6 => format!("artifactType={}", rng.junk()),
            7 => format!(
                "path={}",
                rng.pick(&["..", "../..", "%ff", "a/b", "/", "%00", "a.bin"])
            ),
            8 => format!("a={}&b={}", digest(rng, k), digest(rng, k)),
            9 => "include_tombstoned=maybe".to_string(),
            10 => format!("namespace={}", rng.junk()),
            11 => format!("q={}", rng.junk()),
            12 => rng.junk(),
            _ => "&&==&".to_string(),
        };
        parts.push(part);
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

fn range(rng: &mut Rng) -> String {
    (*rng.pick(&[
        "bytes=0-0",
        "bytes=0-",
        "bytes=-1",
        "bytes=-0",
        "bytes=5-2",
        "bytes=1-1000000000",
        "bytes=0-18446744073709551615",
        "bytes=18446744073709551615-",
        "bytes=-18446744073709551616",
        "bytes=0-1,3-4",
        "bytes=",
        "bytes=a-b",
        "items=0-1",
        "bytes=--1",
        "0-1",
    ]))
    .to_string()
}

fn content_range(rng: &mut Rng) -> String {
    match rng.below(4) {
        0 => format!("{}-{}", rng.below(2000), rng.below(2000)),
        _ => (*rng.pick(&[
            "0-0",
            "5-2",
            "bytes 0-9/10",
            "bytes */10",
            "-",
            "a-b",
            "0-18446744073709551615",
            "18446744073709551615-18446744073709551615",
            "99999999999999999999-1",
            "10-20",
            "",
        ]))
        .to_string(),
    }
}

fn content_type(rng: &mut Rng) -> String {
    (*rng.pick(&[
        INDEX_TYPE,
        MANIFEST_TYPE,
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.index.v1+json; charset=utf-8",
        "application/vnd.sealvol.version.v1",
        "application/vnd.x",
        "application/json",
        "application/octet-stream",
        "text/plain",
        ";;;",
        "",
    ]))
    .to_string()
}

fn descriptor(rng: &mut Rng, k: &Known, media_type: &str) -> Value {
    let mut d = json!({
        "mediaType": media_type,
        "digest": digest(rng, k),
        "size": rng.below(5000),
    });
    match rng.below(8) {
        0 => d["size"] = json!(-1),
        1 => d["size"] = json!(1e300),
        2 => d["size"] = json!("12"),
        3 => d["mediaType"] = json!(null),
        4 => {
            d["annotations"] =
                json!({"dev.sealvol.role": rng.pick(&["tree", "chunks", "view", ""]).to_string()})
        }
        5 => d["urls"] = json!(["http://127.0.0.1:1/x"]),
        6 => d["platform"] = json!({"os": "\u{0}", "architecture": "é"}),
        _ => {}
    }
    d
}

/// A manifest body: garbage, or JSON that is wrong in one way or several.
fn manifest_body(rng: &mut Rng, k: &Known) -> Vec<u8> {
    let index = &rng.pick(&k.indexes).1.clone();
    match rng.below(19) {
        0 => {
            let n = rng.below(400);
            rng.bytes(n)
        }
        1 => (*rng.pick(&[
            "",
            "null",
            "[]",
            "{}",
            "\"x\"",
            "1e999",
            "{\"schemaVersion\":2}",
            "{\"schemaVersion\":\"2\"}",
            "{\"schemaVersion\":2.0,\"layers\":[]}",
            "{\"schemaVersion\":18446744073709551616}",
            "{\"schemaVersion\":2,\"manifests\":null}",
            "{\"schemaVersion\":2,\"manifests\":{}}",
            "{\"schemaVersion\":2,\"manifests\":[]}",
            "{\"schemaVersion\":2,\"manifests\":[],\"annotations\":{\"dev.sealvol.version\":\"b3:00\"}}",
            "{\"schemaVersion\":2,\"config\":{},\"layers\":[]}",
            "{\"schemaVersion\":2,\"schemaVersion\":1}",
            "{\"schemaVersion\":2,\"mediaType\":\"\\u0000\"}",
        ]))
        .as_bytes()
        .to_vec(),
        2 => {
            let depth = *rng.pick(&[129, 1000, 100_000]);
            format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes()
        }
        3 => {
            let depth = *rng.pick(&[200, 3000]);
            let nested = format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth));
            format!(
                "{{\"schemaVersion\":2,\"mediaType\":\"{INDEX_TYPE}\",\"manifests\":[],\"annotations\":{nested}}}"
            )
            .into_bytes()
        }
        4 => {
            let layers: Vec<Value> = (0..*rng.pick(&[0, 1, 3, 20_000]))
                .map(|_| descriptor(rng, k, "application/vnd.sealvol.chunk.v1"))
                .collect();
            let mut m = json!({
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "config": descriptor(rng, k, "application/vnd.oci.empty.v1+json"),
                "layers": layers,
            });
            if rng.chance(30) {
                m["subject"] = descriptor(rng, k, INDEX_TYPE);
            }
            if rng.chance(30) {
                m["artifactType"] = json!(rng.pick(&[
                    "application/vnd.sealvol.tree.v1",
                    "application/vnd.sealvol.chunks.v1",
                    "\u{0}"
                ]).to_string());
            }
            serde_json::to_vec(&m).unwrap()
        }
        5 => {
            let children: Vec<Value> = (0..*rng.pick(&[0, 1, 4, 30_000]))
                .map(|_| descriptor(rng, k, MANIFEST_TYPE))
                .collect();
            let mut m = json!({
                "schemaVersion": 2,
                "mediaType": INDEX_TYPE,
                "manifests": children,
            });
            if rng.chance(60) {
                let v = match rng.below(3) {
                    0 => rng.pick(&k.versions).clone(),
                    1 => format!("b3:{}", hex64(rng)),
                    _ => rng.junk(),
                };
                m["annotations"] = json!({"dev.sealvol.version": v});
            }
            if rng.chance(50) {
                m["artifactType"] = json!("application/vnd.sealvol.version.v1");
            }
            serde_json::to_vec(&m).unwrap()
        }
        6..=9 => {
            // The volume's own index, changed one way.
            let mut v: Value = serde_json::from_slice(index).unwrap();
            let entries = v["manifests"].as_array_mut().unwrap();
            let n = entries.len();
            match rng.below(9) {
                0 => {
                    // The copy: tree and chunks roles swapped.
                    for e in entries.iter_mut() {
                        let role = &mut e["annotations"]["dev.sealvol.role"];
                        *role = match role.as_str() {
                            Some("tree") => json!("chunks"),
                            Some("chunks") => json!("tree"),
                            _ => role.clone(),
                        };
                    }
                }
                1 => {
                    entries.remove(rng.below(n));
                }
                2 => {
                    let i = rng.below(n);
                    let d = entries[i]["digest"].as_str().unwrap().to_string();
                    let flipped = format!("{}{}", &d[..d.len() - 1], if d.ends_with('0') { '1' } else { '0' });
                    entries[i]["digest"] = json!(flipped);
                }
                3 => {
                    let i = rng.below(n);
                    entries[i]["size"] = json!(rng.below(100));
                }
                4 => {
                    let i = rng.below(n);
                    let copy = entries[i].clone();
                    entries.push(copy);
                }
                5 => {
                    v["annotations"]["dev.sealvol.version"] =
                        json!(rng.pick(&k.versions).clone());
                }
                6 => {
                    v["annotations"]["dev.sealvol.version"] = json!(format!("b3:{}", hex64(rng)));
                }
                7 => {
                    v.as_object_mut().unwrap().remove("artifactType");
                }
                _ => {
                    v["annotations"]["dev.sealvol.size"] = json!("-1");
                    v["annotations"]["org.opencontainers.image.created"] = json!("\u{0}");
                }
            }
            serde_json::to_vec(&v).unwrap()
        }
        10 => index.clone(),
        11 => rng.pick(&k.manifests).1.clone(),
        12 => b"{\"schemaVersion\":2,\"mediaType\":\"\xff\xfe\",\"manifests\":[]}".to_vec(),
        13 => {
            // Truncated JSON.
            let cut = rng.below(index.len());
            index[..cut].to_vec()
        }
        14 => {
            let mut b = index.clone();
            let i = rng.below(b.len());
            b[i] = rng.next() as u8;
            b
        }
        15 => {
            // A valid image manifest of what `setup` put in scratch.
            let config = sha256(b"{}");
            serde_json::to_vec(&json!({
                "schemaVersion": 2,
                "mediaType": MANIFEST_TYPE,
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": 2},
                "layers": [],
                "annotations": {"n": rng.below(1000).to_string()},
            }))
            .unwrap()
        }
        _ => serde_json::to_vec(&json!({
            "schemaVersion": 2,
            "mediaType": INDEX_TYPE,
            "manifests": [descriptor(rng, k, MANIFEST_TYPE)],
            "subject": descriptor(rng, k, INDEX_TYPE),
            "annotations": {"\u{0}": "\u{1F4A9}", "dev.sealvol.role": "tree"},
        }))
        .unwrap(),
    }
}

fn api_body(rng: &mut Rng, k: &Known) -> Vec<u8> {
    let time = *rng.pick(&[
        "9999-12-31T23:59:59Z",
        "0000-01-01T00:00:00Z",
        "1969-12-31T23:59:59Z",
        "2026-13-40T99:99:99Z",
        "tomorrow",
        "",
        "99999999999-01-01T00:00:00Z",
    ]);
    let v = match rng.below(12) {
        0 => json!({"digest": digest(rng, k), "expires_at": time}),
        1 => json!({"digest": rng.pick(&k.versions).clone()}),
        2 => json!({"expires_at": time}),
        3 => json!({"holder": "h".repeat(*rng.pick(&[0, 10, 300, 70_000]))}),
        4 => {
            json!({"name": rng.junk(), "actions": ["pull", "\u{0}", 7], "repositories": [rng.junk()]})
        }
        5 => {
            json!({"source": rng.pick(&["hf://x/y", "dir:///etc", "s3://b/k", "oci://127.0.0.1:1/ns/x", "", "\u{0}"]).to_string(), "dest": {"name": repo(rng, true)}})
        }
        6 => json!([1, 2, 3]),
        7 => json!(null),
        8 => json!({"digest": 7, "expires_at": [], "holder": {}}),
        9 => return rng.bytes(50),
        10 => {
            let depth = 10_000;
            return format!("{}{}", "[".repeat(depth), "]".repeat(depth)).into_bytes();
        }
        _ => json!({}),
    };
    serde_json::to_vec(&v).unwrap()
}

// ---- the requests ---------------------------------------------------------

fn method(rng: &mut Rng) -> &'static str {
    const METHODS: [&str; 10] = [
        "GET", "GET", "HEAD", "PUT", "POST", "PATCH", "DELETE", "OPTIONS", "TRACE", "FOO",
    ];
    METHODS[rng.below(METHODS.len())]
}

fn v2_manifest(rng: &mut Rng, k: &Known) -> Req {
    let m = if rng.chance(45) { "PUT" } else { method(rng) };
    let changes = !matches!(m, "GET" | "HEAD" | "PUT");
    let target = format!(
        "/v2/{}/manifests/{}{}",
        repo(rng, changes),
        reference(rng, k),
        query(rng, k)
    );
    let mut req = Req::new(m, target);
    if m == "PUT" || rng.chance(10) {
        let body = manifest_body(rng, k);
        // Mostly the type the body says it is, so that more get past the
        // first check.
        let declared = serde_json::from_slice::<Value>(&body)
            .ok()
            .and_then(|v| v["mediaType"].as_str().map(str::to_string))
            .filter(|t| t.bytes().all(|b| b.is_ascii_graphic()));
        let ct = match declared {
            Some(t) if rng.chance(70) => t,
            _ => content_type(rng),
        };
        req = req.header("Content-Type", ct).body(body);
    }
    if rng.chance(20) {
        req = req.header("Accept", content_type(rng));
    }
    req
}

fn v2_blob(rng: &mut Rng, k: &Known) -> Req {
    let m = method(rng);
    let changes = !matches!(m, "GET" | "HEAD");
    let target = format!("/v2/{}/blobs/{}", repo(rng, changes), digest(rng, k));
    let mut req = Req::new(m, target);
    if rng.chance(60) {
        req = req.header("Range", range(rng));
    }
    req
}

fn v2_upload(rng: &mut Rng, k: &mut Known, addr: &str) -> Req {
    if k.uploads.len() < 3 || rng.chance(15) {
        // Start a session the next requests can break.
        let name = if rng.chance(70) {
            SCRATCH.to_string()
        } else {
            repo(rng, true)
        };
        let req = Req::new("POST", format!("/v2/{name}/blobs/uploads/"));
        if let Ok(Some(r)) = send(addr, &req) {
            if let Some(loc) = r.header("location") {
                if let Some(id) = loc.rsplit('/').next() {
                    k.uploads.push((name.clone(), id.to_string()));
                }
            }
        }
    }
    if k.uploads.is_empty() {
        k.uploads.push((SCRATCH.into(), "no-such-upload".into()));
    }
    let (name, id) = rng.pick(&k.uploads).clone();
    let id = match rng.below(10) {
        0 => rng.junk(),
        1 => "..".to_string(),
        _ => id,
    };
    let name = if rng.chance(10) {
        repo(rng, true)
    } else {
        name
    };
    match rng.below(8) {
        0 => {
            // Start: monolithic, mount, or plain, with junk.
            let q = match rng.below(4) {
                0 => format!("?digest={}", digest(rng, k)),
                1 => format!("?mount={}&from={}", digest(rng, k), repo(rng, false)),
                2 => query(rng, k),
                _ => String::new(),
            };
            let n = rng.below(3000);
            Req::new("POST", format!("/v2/{}/blobs/uploads/{q}", repo(rng, true)))
                .body(rng.bytes(n))
        }
        1 | 2 => {
            // A chunk, in order or not.
            let n = rng.below(3000);
            let mut req =
                Req::new("PATCH", format!("/v2/{name}/blobs/uploads/{id}")).body(rng.bytes(n));
            if rng.chance(70) {
                req = req.header("Content-Range", content_range(rng));
            }
            req.header("Content-Type", "application/octet-stream")
        }
        3 => {
            let n = rng.below(100);
            let mut req = Req::new(
                "PUT",
                format!("/v2/{name}/blobs/uploads/{id}?digest={}", digest(rng, k)),
            )
            .body(rng.bytes(n));
            if rng.chance(50) {
                req = req.header("Content-Range", content_range(rng));
            }
            req
        }
        4 => Req::new(
            "PUT",
            format!("/v2/{name}/blobs/uploads/{id}{}", query(rng, k)),
        ),
        5 => Req::new("GET", format!("/v2/{name}/blobs/uploads/{id}")),
        6 => Req::new("DELETE", format!("/v2/{name}/blobs/uploads/{id}")),
        _ => Req::new(
            method(rng),
            format!("/v2/{name}/blobs/uploads/{id}/{}", rng.junk()),
        ),
    }
}

fn v2_lists(rng: &mut Rng, k: &Known) -> Req {
    let target = match rng.below(4) {
        0 => format!("/v2/_catalog{}", query(rng, k)),
        1 => format!("/v2/{}/tags/list{}", repo(rng, false), query(rng, k)),
        2 => format!(
            "/v2/{}/referrers/{}{}",
            repo(rng, false),
            digest(rng, k),
            query(rng, k)
        ),
        _ => format!("/v2/{}{}", rng.junk(), query(rng, k)),
    };
    Req::new(if rng.chance(80) { "GET" } else { method(rng) }, target)
}

fn api(rng: &mut Rng, k: &Known) -> Req {
    let m = method(rng);
    let changes = !matches!(m, "GET" | "HEAD");
    let name = repo(rng, changes);
    let d = match rng.below(10) {
        0..=3 => rng.pick(&k.versions).clone(),
        4..=6 => k.scratch.clone(),
        _ => digest(rng, k),
    };
    let d2 = digest(rng, k);
    let subs = [
        String::new(),
        "/-/versions".into(),
        format!("/-/versions/{d}"),
        format!("/-/versions/{d}/entries"),
        format!("/-/versions/{d}/diff/{d2}"),
        format!("/-/versions/{d}/restore"),
        "/-/stats".into(),
        format!("/-/tags/{}", reference(rng, k)),
        "/-/claim".into(),
        format!("/-/claim/{}", rng.junk()),
        format!("/-/{}", rng.junk()),
    ];
    let target = match rng.below(12) {
        0 => format!(
            "/api/v1{}",
            rng.pick(&[
                "",
                "/",
                "/namespaces",
                "/volumes",
                "/whoami",
                "/keys",
                "/syncs",
                "/secrets",
                "/gc?dry_run=true",
                "/gc",
            ])
        ),
        1 => format!("/api/v1/keys/{}", rng.junk()),
        2 => format!(
            "/api/v1/syncs/{}{}",
            rng.junk(),
            rng.pick(&["", "/cancel", "/x"])
        ),
        3 => format!("/api/v1/secrets/{}{}", rng.junk(), query(rng, k)),
        4 => format!("/api/v1/{}", rng.junk()),
        _ => format!("/api/v1/volumes/{name}{}{}", rng.pick(&subs), query(rng, k)),
    };
    let mut req = Req::new(m, target);
    if changes || rng.chance(10) {
        let ct = rng.pick(&[
            "application/json",
            "application/json",
            "application/octet-stream",
            "text/plain",
        ]);
        req = req.header("Content-Type", *ct).body(api_body(rng, k));
    }
    if rng.chance(5) {
        req = req.header("Origin", "http://evil.example");
    }
    req
}

fn ui(rng: &mut Rng, k: &Known, addr: &str) -> Req {
    let m = if rng.chance(75) { "GET" } else { method(rng) };
    let changes = m != "GET";
    let d = if rng.chance(60) {
        rng.pick(&k.versions).clone()
    } else {
        digest(rng, k)
    };
    let junk = rng.junk();
    let target = match rng.below(8) {
        0 => format!(
            "/ui{}",
            rng.pick(&[
                "",
                "/",
                "/login",
                "/logout",
                "/syncs",
                "/static/app.css",
                "/static/../x"
            ])
        ),
        1 => format!("/ui/syncs/{}{}", rng.junk(), rng.pick(&["", "/cancel"])),
        2 => format!("/ui/{}{}", rng.junk(), query(rng, k)),
        _ => format!(
            "/ui/volumes/{}{}{}",
            repo(rng, changes),
            rng.pick(&[
                String::new(),
                format!("/-/versions/{d}"),
                format!("/-/versions/{d}/delete"),
                format!("/-/versions/{d}/restore"),
                "/-/diff".into(),
                "/-/tags".into(),
                format!("/-/{junk}"),
            ]),
            query(rng, k)
        ),
    };
    let mut req = Req::new(m, target);
    if changes {
        let form = format!(
            "tag={}&digest={}&source={}&dest={}",
            rng.junk(),
            d,
            rng.junk(),
            rng.junk()
        );
        req = req
            .header("Content-Type", "application/x-www-form-urlencoded")
            .header("Origin", format!("http://{addr}"))
            .body(form.into_bytes());
    }
    req
}

fn elsewhere(rng: &mut Rng, k: &Known) -> Req {
    let target = match rng.below(6) {
        0 => (*rng.pick(&[
            "/",
            "/metrics",
            "/token",
            "/v2",
            "/v2/",
            "//v2/",
            "/v2/../api/v1",
            "/api",
            "/uix",
            "*",
        ]))
        .to_string(),
        1 => format!("/token{}", query(rng, k)),
        _ => format!("/{}{}", rng.junk(), query(rng, k)),
    };
    let m = method(rng);
    let mut req = Req::new(m, target);
    if m == "POST" {
        req = req
            .header("Content-Type", "application/x-www-form-urlencoded")
            .body(
                format!(
                    "grant_type={}&username={}&password={}",
                    rng.junk(),
                    rng.junk(),
                    rng.junk()
                )
                .into_bytes(),
            );
    }
    req
}

/// HTTP that is broken at the framing level: hyper answers or closes, and
/// the registry must survive it.
fn broken(rng: &mut Rng, k: &Known, addr: &str) -> Req {
    let mut req = match rng.below(3) {
        0 => v2_manifest(rng, k),
        1 => api(rng, k),
        _ => v2_blob(rng, k),
    };
    match rng.below(9) {
        0 => {
            // A body shorter than it says, then the end of the stream.
            req.declared = Some((req.body.len() + 1 + rng.below(1000)).to_string());
        }
        1 => req.declared = Some((*rng.pick(&["-1", "abc", "18446744073709551616", "1, 2", ""])).to_string()),
        2 => {
            let n = rng.below(500);
            req.raw = Some(rng.bytes(n));
        }
        3 => {
            req.raw = Some(
                format!("GET /v2/{} HTTP/1.1\r\nHost: {addr}\r\nX-Big: {}\r\n\r\n", VOL, "x".repeat(200_000))
                    .into_bytes(),
            )
        }
        4 => req.raw = Some(b"GET /v2/ns/vol\x00/tags/list HTTP/1.1\r\n\r\n".to_vec()),
        5 => req.raw = Some(format!("GET /v2/{VOL}/tags/list HTTP/0.9\r\n\r\n").into_bytes()),
        6 => {
            req.raw = Some(
                format!("POST /v2/{SCRATCH}/blobs/uploads/ HTTP/1.1\r\nHost: {addr}\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nxx\r\n")
                    .into_bytes(),
            )
        }
        7 => req.raw = Some(format!("GET /v2/é HTTP/1.1\r\nHost: {addr}\r\nBad Header\r\n\r\n").into_bytes()),
        _ => {
            req.raw = Some(
                format!("PUT /v2/{SCRATCH}/manifests/x HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 5\r\nContent-Length: 7\r\n\r\nhello")
                    .into_bytes(),
            )
        }
    }
    req
}

fn request(rng: &mut Rng, k: &mut Known, addr: &str) -> Req {
    match rng.below(100) {
        0..=24 => v2_manifest(rng, k),
        25..=37 => v2_blob(rng, k),
        38..=52 => v2_upload(rng, k, addr),
        53..=59 => v2_lists(rng, k),
        60..=77 => api(rng, k),
        78..=88 => ui(rng, k, addr),
        89..=94 => elsewhere(rng, k),
        _ => broken(rng, k, addr),
    }
}

// ---- the test --------------------------------------------------------------

/// Two versions of `VOL`, the second tagged `prod`; what they hold.
fn setup(reg: &Mirror, dir: &Path) -> Known {
    let mut versions = Vec::new();
    let mut indexes = Vec::new();
    let mut manifests = Vec::new();
    let mut blobs = Vec::new();
    for (i, extra) in [b"first".as_slice(), b"second, and longer".as_slice()]
        .iter()
        .enumerate()
    {
        let src = dir.join(format!("v{i}"));
        std::fs::create_dir_all(src.join("sub")).unwrap();
        std::fs::write(src.join("a.txt"), extra).unwrap();
        std::fs::write(src.join("sub/big.bin"), noise(300_000, i as u64)).unwrap();
        let sealed = reg.publish_dir(VOL, &src, ChunkingParams::default());
        let b3 = sealed.digest.to_string();
        let (bytes, index) = reg
            .manifest(VOL, &format!("b3-{}", sealed.digest.hex()))
            .expect("the version is tagged");
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        for m in v["manifests"].as_array().unwrap() {
            let d = m["digest"].as_str().unwrap();
            let (mb, _) = reg.manifest(VOL, d).expect("a child manifest");
            let mv: Value = serde_json::from_slice(&mb).unwrap();
            blobs.push(mv["config"]["digest"].as_str().unwrap().to_string());
            for l in mv["layers"].as_array().unwrap() {
                blobs.push(l["digest"].as_str().unwrap().to_string());
            }
            manifests.push((d.to_string(), mb));
        }
        versions.push(b3);
        indexes.push((index, bytes));
    }
    reg.put_manifest(VOL, "prod", &indexes[1].1, INDEX_TYPE);
    blobs.sort();
    blobs.dedup();
    // Scratch is a volume too, for deletes, restores and tags to act on,
    // with a blob for plain manifests to name.
    let src = dir.join("scratch");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("s.txt"), b"scratch").unwrap();
    let scratch = reg.publish_dir(SCRATCH, &src, ChunkingParams::default());
    reg.put_blob(SCRATCH, b"{}");
    Known {
        versions,
        indexes,
        manifests,
        blobs,
        uploads: Vec::new(),
        scratch: scratch.digest.to_string(),
    }
}

/// The volume's versions as the API lists them: digest, sequence and
/// lifecycle, which nothing the fuzzer sends may change. (Its current
/// index may change: another index of the same version, re-serialized,
/// may take its place (SPEC.md §7.1), if it reads as that version.)
fn versions(addr: &str) -> Vec<(String, u64, String)> {
    let req = Req::new("GET", format!("/api/v1/volumes/{VOL}/-/versions"));
    let reply = send(addr, &req).unwrap().expect("an answer");
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let v: Value = serde_json::from_slice(&reply.body).unwrap();
    v["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["digest"].as_str().unwrap().to_string(),
                r["sequence"].as_u64().unwrap(),
                r["lifecycle"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// Whether `reference` of the volume reads, as a reader reads it, as the
/// version `b3`: its index, each manifest it names as its descriptor
/// says, the tree decoding to that digest.
fn reads_as(mirror: &Mirror, reference: &str, b3: &str) {
    let f = mirror.fetch_ref(VOL, reference);
    assert_eq!(f.tree.version_digest().to_string(), b3, "{reference}");
    assert_eq!(f.index.digest.to_string(), b3, "{reference}");
    let index: Value = serde_json::from_slice(&f.index_bytes).unwrap();
    for m in index["manifests"].as_array().unwrap() {
        let d = m["digest"].as_str().unwrap();
        let (bytes, _) = (mirror.manifest(VOL, d))
            .unwrap_or_else(|| panic!("{reference} names {d}, which is not there"));
        assert_eq!(
            m["size"].as_u64(),
            Some(bytes.len() as u64),
            "{reference}: {d}"
        );
    }
}

/// Sends `count` requests of the sequence `seed` gives; what was wrong,
/// and how many answers of each status came back.
fn fuzz(
    addr: &str,
    seed: u64,
    count: usize,
    mut known: Known,
    who: &str,
) -> (Vec<String>, std::collections::BTreeMap<u16, usize>) {
    let mut rng = Rng(seed.max(1));
    let mut failures = Vec::new();
    let mut statuses = std::collections::BTreeMap::<u16, usize>::new();
    for i in 0..count {
        let req = request(&mut rng, &mut known, addr);
        let verdict = match send(addr, &req) {
            Ok(reply) => {
                if let Some(r) = &reply {
                    *statuses.entry(r.status).or_default() += 1;
                }
                judge(&req, reply.as_ref())
            }
            Err(e) => Some(e),
        };
        if let Some(why) = verdict {
            failures.push(format!("{who}#{i} {}\n    -> {why}", req.describe()));
        }
    }
    (failures, statuses)
}

#[test]
fn malformed_requests_get_4xx_with_an_error_body_and_move_no_version() {
    let seed = std::env::var("SEALVOL_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(SEED);
    let count = std::env::var("SEALVOL_FUZZ_REQUESTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(REQUESTS);
    let root = tempfile::tempdir().unwrap();
    let serve = Server::start(&root.path().join("serve"));
    let addr = host(&serve);
    let known = setup(&Mirror::new(&addr), root.path());
    let before = versions(&addr);
    assert_eq!(before.len(), 2);

    // One client in order (the sequence the seed gives), then several at
    // once, whose requests interleave as the scheduler has it.
    let started = Instant::now();
    let (mut failures, mut statuses) = fuzz(&addr, seed, count, known.clone(), "");
    let workers: Vec<_> = (1..=CONCURRENT as u64)
        .map(|w| {
            let (addr, known) = (addr.clone(), known.clone());
            let n = count / CONCURRENT / 2;
            std::thread::spawn(move || fuzz(&addr, seed ^ (w << 32), n, known, &format!("w{w}")))
        })
        .collect();
    for w in workers {
        let (f, s) = w.join().expect("a fuzzing thread");
        failures.extend(f);
        for (status, n) in s {
            *statuses.entry(status).or_default() += n;
        }
    }
    eprintln!(
        "{} requests (seed {seed:#x}) in {:?}; statuses {statuses:?}",
        count + count / 2,
        started.elapsed()
    );

    for f in &failures {
        eprintln!("{f}");
    }
    // Alive, and every version as it was.
    let alive = send(&addr, &Req::new("GET", "/v2/".into())).unwrap();
    assert_eq!(alive.map(|r| r.status), Some(200), "the registry is alive");
    assert_eq!(versions(&addr), before, "no version moved");
    let mirror = Mirror::new(&addr);
    for b3 in &known.versions {
        reads_as(&mirror, &format!("b3-{}", b3.trim_start_matches("b3:")), b3);
        let req = Req::new(
            "GET",
            format!("/api/v1/volumes/{VOL}/-/versions/{b3}/entries"),
        );
        let reply = send(&addr, &req).unwrap().expect("an answer");
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
    }
    assert!(
        failures.is_empty(),
        "{} requests were answered wrongly (seed {seed:#x}):\n{}",
        failures.len(),
        failures
            .iter()
            .take(40)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    );
    drop(serve);
}
