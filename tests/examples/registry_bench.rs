//! Load client for `bench/registry`: drives one OCI distribution registry
//! (sealvol or CNCF distribution) with blocking reqwest clients and prints
//! one JSON object per command on stdout (progress goes to stderr).
//!
//! ```text
//! registry_bench push-blob URL REPO SIZE_MIB SEED
//! registry_bench get       URL REPO DIGEST SIZE STREAMS RUNS
//! registry_bench get-url   URL SIZE STREAMS RUNS
//! registry_bench upload    URL REPO SIZE_MIB SEED RUNS
//! registry_bench manifests URL REPO COUNT RUNS SALT
//! ```
//!
//! With `REGISTRY_BENCH_TOKEN` set, every request carries it as a bearer
//! token (a registry with auth on); with `REGISTRY_BENCH_AUTHORIZATION`,
//! that whole `Authorization` value (an object store's own GET). Redirects
//! are followed.
//!
//! Blobs are pushed as POST (empty) then one PUT `?digest=` carrying the
//! whole body: distribution 2.8 ignores the body of a single
//! `POST ...?digest=` and answers 202, so that form is not comparable.

use std::io::Read;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use serde_json::json;
use sha2::{Digest as _, Sha256};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

const MIB: f64 = 1024.0 * 1024.0;
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

fn client() -> Res<reqwest::blocking::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Ok(token) = std::env::var("REGISTRY_BENCH_TOKEN") {
        headers.insert(
            reqwest::header::AUTHORIZATION,
            format!("Bearer {token}").parse()?,
        );
    }
    if let Ok(value) = std::env::var("REGISTRY_BENCH_AUTHORIZATION") {
        headers.insert(reqwest::header::AUTHORIZATION, value.parse()?);
    }
    Ok(reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(600))
        .pool_max_idle_per_host(1)
        .default_headers(headers)
        .build()?)
}

/// Deterministic incompressible bytes (xorshift64*).
fn gen_data(size: usize, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(size);
    while v.len() + 8 <= size {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        v.extend_from_slice(&s.wrapping_mul(0x2545_F491_4F6C_DD1D).to_le_bytes());
    }
    v.resize(size, 0x5a);
    v
}

fn digest_of(data: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(data)))
}

fn absolute(base: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        location.to_string()
    } else {
        format!("{base}{location}")
    }
}

fn expect(
    resp: reqwest::blocking::Response,
    status: u16,
    what: &str,
) -> Res<reqwest::blocking::Response> {
    if resp.status().as_u16() != status {
        let got = resp.status();
        let body = resp.text().unwrap_or_default();
        return Err(format!("{what}: expected {status}, got {got}: {body}").into());
    }
    Ok(resp)
}

/// POST then PUT `?digest=` with the whole blob; returns when the 201 is in.
fn push(
    c: &reqwest::blocking::Client,
    base: &str,
    repo: &str,
    digest: &str,
    body: Vec<u8>,
) -> Res<()> {
    let resp = c
        .post(format!("{base}/v2/{repo}/blobs/uploads/"))
        .header("content-length", "0")
        .send()?;
    let resp = expect(resp, 202, "starting an upload")?;
    let loc = resp
        .headers()
        .get("location")
        .ok_or("upload start without Location")?
        .to_str()?
        .to_string();
    drop(resp);
    let mut url = absolute(base, &loc);
    url.push(if url.contains('?') { '&' } else { '?' });
    url.push_str("digest=");
    url.push_str(digest);
    let len = body.len();
    let resp = c
        .put(url)
        .header("content-type", "application/octet-stream")
        .header("content-length", len.to_string())
        .body(body)
        .send()?;
    expect(resp, 201, "completing an upload")?;
    Ok(())
}

fn arg<T: std::str::FromStr>(args: &[String], i: usize, what: &str) -> Res<T> {
    args.get(i)
        .ok_or_else(|| format!("missing argument {what}"))?
        .parse()
        .map_err(|_| format!("bad {what}: {:?}", args[i]).into())
}

fn cmd_push_blob(args: &[String]) -> Res<serde_json::Value> {
    let base: String = arg(args, 0, "URL")?;
    let repo: String = arg(args, 1, "REPO")?;
    let mib: usize = arg(args, 2, "SIZE_MIB")?;
    let seed: u64 = arg(args, 3, "SEED")?;
    let data = gen_data(mib << 20, seed);
    let digest = digest_of(&data);
    let size = data.len();
    let t = Instant::now();
    push(&client()?, &base, &repo, &digest, data)?;
    let secs = t.elapsed().as_secs_f64();
    Ok(json!({ "digest": digest, "size": size, "secs": secs }))
}

/// Reads one full blob GET to the end, discarding it; returns its length.
fn get_once(c: &reqwest::blocking::Client, url: &str, buf: &mut [u8]) -> Res<u64> {
    let mut resp = expect(c.get(url).send()?, 200, "blob GET")?;
    let mut n = 0u64;
    loop {
        let k = resp.read(buf)?;
        if k == 0 {
            break;
        }
        n += k as u64;
    }
    Ok(n)
}

fn cmd_get(args: &[String]) -> Res<serde_json::Value> {
    let base: String = arg(args, 0, "URL")?;
    let repo: String = arg(args, 1, "REPO")?;
    let digest: String = arg(args, 2, "DIGEST")?;
    let size: u64 = arg(args, 3, "SIZE")?;
    let streams: usize = arg(args, 4, "STREAMS")?;
    let runs: usize = arg(args, 5, "RUNS")?;
    let url = format!("{base}/v2/{repo}/blobs/{digest}");
    get_streams(&url, size, streams, runs)
}

/// `get-url URL SIZE STREAMS RUNS`: [`cmd_get`] of any URL.
fn cmd_get_url(args: &[String]) -> Res<serde_json::Value> {
    let url: String = arg(args, 0, "URL")?;
    let size: u64 = arg(args, 1, "SIZE")?;
    let streams: usize = arg(args, 2, "STREAMS")?;
    let runs: usize = arg(args, 3, "RUNS")?;
    get_streams(&url, size, streams, runs)
}

/// `streams` concurrent GETs of `url`, `runs` times; the best rate.
fn get_streams(url: &str, size: u64, streams: usize, runs: usize) -> Res<serde_json::Value> {
    let url = url.to_string();
    let mut rates = Vec::new();
    for run in 0..runs {
        // One client (connection, runtime thread) per stream, made before
        // the clock starts.
        let barrier = Arc::new(Barrier::new(streams + 1));
        let handles: Vec<_> = (0..streams)
            .map(|_| {
                let (barrier, url) = (Arc::clone(&barrier), url.clone());
                let c = client();
                std::thread::spawn(move || -> Res<u64> {
                    let c = c?;
                    let mut buf = vec![0u8; 256 << 10];
                    barrier.wait();
                    get_once(&c, &url, &mut buf)
                })
            })
            .collect();
        barrier.wait();
        let t = Instant::now();
        let mut total = 0u64;
        for h in handles {
            let n = h.join().map_err(|_| "stream thread panicked")??;
            if n != size {
                return Err(format!("GET returned {n} bytes, expected {size}").into());
            }
            total += n;
        }
        let secs = t.elapsed().as_secs_f64();
        let rate = total as f64 / MIB / secs;
        eprintln!(
            "registry_bench: get x{streams} run {}: {secs:.3} s, {rate:.0} MiB/s",
            run + 1
        );
        rates.push(rate);
    }
    let best = rates.iter().cloned().fold(0.0, f64::max);
    Ok(json!({ "best_mib_s": best, "runs_mib_s": rates, "streams": streams }))
}

fn cmd_upload(args: &[String]) -> Res<serde_json::Value> {
    let base: String = arg(args, 0, "URL")?;
    let repo: String = arg(args, 1, "REPO")?;
    let mib: usize = arg(args, 2, "SIZE_MIB")?;
    let seed: u64 = arg(args, 3, "SEED")?;
    let runs: usize = arg(args, 4, "RUNS")?;
    let c = client()?;
    let mut data = gen_data(mib << 20, seed);
    let mut times = Vec::new();
    for run in 0..runs {
        // A fresh blob each run: vary one byte so nothing dedupes.
        data[0] = data[0].wrapping_add(1 + run as u8);
        let digest = digest_of(&data);
        let body = data.clone();
        let t = Instant::now();
        push(&c, &base, &repo, &digest, body)?;
        let secs = t.elapsed().as_secs_f64();
        eprintln!(
            "registry_bench: upload {mib} MiB run {}: {secs:.3} s, {:.0} MiB/s",
            run + 1,
            mib as f64 / secs
        );
        times.push(secs);
    }
    let best = times.iter().cloned().fold(f64::INFINITY, f64::min);
    Ok(json!({ "best_s": best, "best_mib_s": mib as f64 / best, "runs_s": times }))
}

fn cmd_manifests(args: &[String]) -> Res<serde_json::Value> {
    let base: String = arg(args, 0, "URL")?;
    let repo: String = arg(args, 1, "REPO")?;
    let count: usize = arg(args, 2, "COUNT")?;
    let runs: usize = arg(args, 3, "RUNS")?;
    // Makes this invocation's manifests and tags differ from earlier ones.
    let salt: String = arg(args, 4, "SALT")?;
    let c = client()?;
    let config =
        br#"{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}"#
            .to_vec();
    let config_digest = digest_of(&config);
    let config_len = config.len();
    push(&c, &base, &repo, &config_digest, config)?;
    let mut rates = Vec::new();
    for run in 0..runs {
        // Build every manifest first so the timed loop is only HTTP.
        let manifests: Vec<(String, String, Vec<u8>)> = (0..count)
            .map(|i| {
                let m = json!({
                    "schemaVersion": 2,
                    "mediaType": OCI_MANIFEST,
                    "config": { "mediaType": OCI_CONFIG, "digest": config_digest, "size": config_len },
                    "layers": [],
                    "annotations": { "org.sealvol.bench": format!("{salt} run {run} iteration {i}") },
                });
                let bytes = serde_json::to_vec(&m).expect("manifest JSON");
                (format!("{salt}-r{run}-{i}"), digest_of(&bytes), bytes)
            })
            .collect();
        let t = Instant::now();
        for (tag, digest, bytes) in manifests {
            let len = bytes.len();
            let resp = c
                .put(format!("{base}/v2/{repo}/manifests/{tag}"))
                .header("content-type", OCI_MANIFEST)
                .body(bytes)
                .send()?;
            let got = expect(resp, 201, "manifest PUT")?
                .headers()
                .get("docker-content-digest")
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            if got.as_deref() != Some(digest.as_str()) {
                return Err(format!("manifest PUT digest {got:?}, expected {digest}").into());
            }
            let resp = c
                .get(format!("{base}/v2/{repo}/manifests/{digest}"))
                .header("accept", OCI_MANIFEST)
                .send()?;
            let body = expect(resp, 200, "manifest GET")?.bytes()?;
            if body.len() != len {
                return Err(format!("manifest GET {} bytes, expected {len}", body.len()).into());
            }
        }
        let secs = t.elapsed().as_secs_f64();
        let rate = count as f64 / secs;
        eprintln!(
            "registry_bench: manifests run {}: {count} PUT+GET pairs in {secs:.3} s, {rate:.0} pairs/s",
            run + 1
        );
        rates.push(rate);
    }
    let best = rates.iter().cloned().fold(0.0, f64::max);
    Ok(json!({ "best_pairs_s": best, "runs_pairs_s": rates }))
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or(&[]);
    let result = match args.first().map(String::as_str) {
        Some("push-blob") => cmd_push_blob(rest),
        Some("get") => cmd_get(rest),
        Some("get-url") => cmd_get_url(rest),
        Some("upload") => cmd_upload(rest),
        Some("manifests") => cmd_manifests(rest),
        _ => Err("usage: registry_bench push-blob|get|get-url|upload|manifests URL ...".into()),
    };
    match result {
        Ok(v) => println!("{v}"),
        Err(e) => {
            eprintln!("registry_bench: {e}");
            std::process::exit(1);
        }
    }
}
