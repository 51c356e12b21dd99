//! The Hugging Face Hub gateway (`/hf`, SPEC.md §9) end to end, against
//! a real `sealvol serve` and the real client from PyPI (`huggingface_hub`,
//! in the project venv, `scripts/deps.sh`):
//!
//! - `snapshot_download` and `hf_hub_download` by tag, by version digest,
//!   by the commit id the gateway hands out and by `main`, with
//!   `HF_ENDPOINT` and an API key as `HF_TOKEN`: the folder they give is
//!   the pushed one byte for byte, and `tokenizers` and `safetensors` load
//!   it; a second download comes from the client's own cache (no file is
//!   fetched again, counted at a proxy);
//! - a reader's key refused on a namespace it may not pull, no token and
//!   a bad token refused, each as the client's own exception;
//! - ranges (first byte, last byte, across a piece boundary, past the end)
//!   and every error in the Hub's dialect, over plain HTTP;
//! - a chunk damaged in the registry's blob store: an error, never wrong
//!   bytes, for raw ranges and for the client.

use std::collections::BTreeMap;
use std::path::Path;

use sealvol_tests::{
    host, htpasswd_line, json, noise, ok, s, venv_bin, write, FlipProxy, Sandbox, Server,
};
use serde_json::{json, Value};

const PASSWORD: &str = "hub-pa55";
const REPO: &str = "weights/qwen3-8b";
/// The safetensors file: over three pieces of 1 MiB, so a download spans
/// several pieces and chunks.
const TENSOR_BYTES: usize = 3 * (1 << 20) + 4321;

/// Runs operations with the real client and prints one JSON result per
/// operation: `{"path"}` (or `{"ids","shape"}` for `load`), or
/// `{"error": exception class, "message"}`.
const SCRIPT: &str = r#"
import json, os, sys
from huggingface_hub import hf_hub_download, snapshot_download

def run(op):
    try:
        if op["call"] == "snapshot":
            return {"path": snapshot_download(op["repo"], revision=op["revision"], cache_dir=op["cache"])}
        if op["call"] == "file":
            return {"path": hf_hub_download(op["repo"], op["filename"], revision=op["revision"], cache_dir=op["cache"])}
        if op["call"] == "load":
            from safetensors import safe_open
            from tokenizers import Tokenizer
            ids = Tokenizer.from_file(os.path.join(op["dir"], "tokenizer.json")).encode("hello world").ids
            with safe_open(os.path.join(op["dir"], "model.safetensors"), framework="numpy") as f:
                t = f.get_tensor("weight")
                return {"ids": ids, "shape": list(t.shape), "first": int(t[0]), "last": int(t[-1])}
    except Exception as e:
        return {"error": type(e).__name__, "message": str(e)[-1500:]}
    return {"error": "unknown call"}

print(json.dumps([run(op) for op in json.loads(sys.argv[1])]))
"#;

/// A small model folder (config, tokenizer, a safetensors file of one U8
/// tensor, a nested file and an empty one); its files by path.
fn model(dir: &Path, seed: u64) -> BTreeMap<String, Vec<u8>> {
    let tensor = noise(TENSOR_BYTES, seed);
    let mut header = json!({
        "weight": {"dtype": "U8", "shape": [TENSOR_BYTES], "data_offsets": [0, TENSOR_BYTES]},
        "__metadata__": {"format": "np"},
    })
    .to_string();
    while !header.len().is_multiple_of(8) {
        header.push(' ');
    }
    let mut safetensors = (header.len() as u64).to_le_bytes().to_vec();
    safetensors.extend_from_slice(header.as_bytes());
    safetensors.extend_from_slice(&tensor);
    let tokenizer = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, "world": 2}, "unk_token": "[UNK]"},
    });
    let files: BTreeMap<String, Vec<u8>> = [
        (
            "config.json",
            json!({"model_type": "test", "seed": seed})
                .to_string()
                .into_bytes(),
        ),
        ("tokenizer.json", tokenizer.to_string().into_bytes()),
        ("model.safetensors", safetensors),
        ("sub/notes.txt", b"nested file\n".to_vec()),
        ("empty.txt", Vec::new()),
    ]
    .into_iter()
    .map(|(p, b)| (p.to_string(), b))
    .collect();
    for (p, b) in &files {
        write(&dir.join(p), b, 0o644);
    }
    files
}

/// Every file under `root` by path, following symlinks (the client's
/// snapshot folders link into its blob folder).
fn files_in(root: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if std::fs::metadata(&p).unwrap().is_dir() {
                stack.push(p);
            } else {
                let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn assert_same_files(want: &BTreeMap<String, Vec<u8>>, dir: &str, what: &str) {
    let got = files_in(Path::new(dir));
    let names = |m: &BTreeMap<String, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    assert_eq!(names(&got), names(want), "{what}: the files of {dir}");
    for (p, b) in want {
        assert!(got[p] == *b, "{what}: {p} differs from the pushed file");
    }
}

/// Pushes `dir` to `bdn:REPO`; its version digest.
fn push(sb: &Sandbox, reg: &str, dir: &Path, repo: &str) -> String {
    let out = json(
        sb.sealvol(
            reg,
            &["push", s(dir), &format!("bdn:{repo}"), "--output", "json"],
        ),
        "push",
    );
    out["digest"].as_str().expect("a digest").to_string()
}

/// Runs the client's `ops` with `HF_ENDPOINT=endpoint` and `HF_TOKEN`
/// (none when `None`), its home in the sandbox.
fn hub(sb: &Sandbox, endpoint: &str, token: Option<&str>, ops: &Value) -> Vec<Value> {
    let script = sb.path().join("hub.py");
    std::fs::write(&script, SCRIPT).unwrap();
    let mut cmd = sb.command(venv_bin("python"));
    cmd.arg(&script)
        .arg(ops.to_string())
        .env("HF_ENDPOINT", endpoint)
        .env("HF_HOME", sb.path().join("hf-home"))
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        .env_remove("HF_TOKEN")
        .env_remove("HF_HUB_OFFLINE");
    if let Some(t) = token {
        cmd.env("HF_TOKEN", t);
    }
    let out = cmd.output().expect("run the venv's python");
    let text = String::from_utf8_lossy(&out.stdout);
    let last = text.lines().last().unwrap_or_default();
    serde_json::from_str::<Vec<Value>>(last).unwrap_or_else(|e| {
        panic!(
            "huggingface_hub script ({e}); run `bash scripts/deps.sh` for the venv: {text}\n{}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

fn path_of(r: &Value, what: &str) -> String {
    r["path"]
        .as_str()
        .unwrap_or_else(|| panic!("{what}: {r}"))
        .to_string()
}

fn snapshot(repo: &str, revision: &str, cache: &Path) -> Value {
    json!({"call": "snapshot", "repo": repo, "revision": revision, "cache": cache})
}

fn one_file(repo: &str, filename: &str, revision: &str, cache: &Path) -> Value {
    json!({"call": "file", "repo": repo, "filename": filename, "revision": revision, "cache": cache})
}

/// The 40 hex digits of version `b3` that the gateway answers as its
/// commit id.
fn commit_of(b3: &str) -> String {
    b3.trim_start_matches("b3:")[..40].to_string()
}

/// A registry with auth on: `admin` may do everything, anonymous nothing.
fn start_with_auth(sb: &Sandbox) -> Server {
    let htpasswd = sb.path().join("htpasswd");
    std::fs::write(&htpasswd, htpasswd_line("admin", PASSWORD)).unwrap();
    let config = format!(
        "[auth]\nhtpasswd = {:?}\nadmins = [\"admin\"]\n",
        s(&htpasswd)
    );
    Server::start_config_env(&sb.path().join("registry"), &config, &[])
}

#[test]
fn huggingface_hub_downloads_versions_byte_for_byte_with_an_api_key() {
    let sb = Sandbox::new();
    let server = start_with_auth(&sb);
    let reg = host(&server);
    ok(
        sb.sealvol_stdin(
            &reg,
            &["login", &reg, "-u", "admin", "--password-stdin"],
            PASSWORD.as_bytes(),
        ),
        "sealvol login",
    );
    // v1 tagged prod; v2 (another config) the head; a volume elsewhere.
    let src = sb.path().join("model");
    let v1_files = model(&src, 1);
    let v1 = push(&sb, &reg, &src, REPO);
    ok(
        sb.sealvol(&reg, &["tag", "set", &format!("bdn:{REPO}@{v1}"), "prod"]),
        "tag set prod",
    );
    write(&src.join("config.json"), b"{\"model_type\": \"v2\"}", 0o644);
    let mut v2_files = v1_files.clone();
    v2_files.insert("config.json".into(), b"{\"model_type\": \"v2\"}".to_vec());
    let v2 = push(&sb, &reg, &src, REPO);
    assert_ne!(v1, v2);
    push(&sb, &reg, &src, "other/secret");

    // A key that may pull weights/** and nothing else: its line is the token.
    let line = ok(
        sb.sealvol(
            &reg,
            &[
                "admin",
                "key",
                "create",
                "--repositories",
                "weights/**",
                "--actions",
                "pull",
                "--registry",
                &reg,
            ],
        ),
        "admin key create",
    );
    let token = line.trim().to_string();
    assert!(token.starts_with("svk_") && token.contains(':'), "{token}");

    // Through a counting proxy, to see what the client asks for.
    let proxy = FlipProxy::start_counting(&reg);
    let endpoint = format!("http://{}/hf", proxy.addr());
    let cache = sb.path().join("hf-cache");
    let r = hub(
        &sb,
        &endpoint,
        Some(&token),
        &json!([
            snapshot(REPO, "prod", &cache),
            snapshot(REPO, &v1, &cache),
            snapshot(REPO, "main", &cache),
            one_file(
                REPO,
                "model.safetensors",
                "prod",
                &sb.path().join("hf-cache-2")
            ),
            one_file(
                REPO,
                "sub/notes.txt",
                &commit_of(&v2),
                &sb.path().join("hf-cache-3")
            ),
        ]),
    );
    let by_tag = path_of(&r[0], "snapshot_download by tag");
    assert_same_files(&v1_files, &by_tag, "snapshot_download by tag");
    assert!(
        by_tag.ends_with(&format!("snapshots/{}", commit_of(&v1))),
        "the commit id is the version digest's first 40 hex digits: {by_tag}"
    );
    assert_eq!(path_of(&r[1], "snapshot_download by digest"), by_tag);
    let head = path_of(&r[2], "snapshot_download of main");
    assert_same_files(&v2_files, &head, "snapshot_download of main");
    let one = path_of(&r[3], "hf_hub_download by tag");
    assert!(std::fs::read(&one).unwrap() == v1_files["model.safetensors"]);
    let nested = path_of(&r[4], "hf_hub_download by commit id");
    assert_eq!(std::fs::read(&nested).unwrap(), v1_files["sub/notes.txt"]);
    let asked = proxy.requests();
    assert!(
        asked
            .iter()
            .any(|r| r.starts_with("GET /hf/weights/qwen3-8b/resolve/")),
        "{asked:?}"
    );

    // tokenizers and safetensors load what the client got.
    let loaded = hub(
        &sb,
        &endpoint,
        None,
        &json!([{"call": "load", "dir": by_tag}]),
    );
    let tensor =
        &v1_files["model.safetensors"][v1_files["model.safetensors"].len() - TENSOR_BYTES..];
    assert_eq!(
        loaded[0],
        json!({"ids": [1, 2], "shape": [TENSOR_BYTES], "first": tensor[0], "last": tensor[TENSOR_BYTES - 1]}),
        "loading the download"
    );

    // Again, from the client's cache: a tag or a digest costs one call to
    // resolve it, the commit id none, and no file is fetched again.
    let before = proxy.requests().len();
    let r = hub(
        &sb,
        &endpoint,
        Some(&token),
        &json!([
            snapshot(REPO, "prod", &cache),
            snapshot(REPO, &v1, &cache),
            snapshot(REPO, &commit_of(&v1), &cache),
        ]),
    );
    for (i, what) in ["by tag", "by digest", "by commit id"].iter().enumerate() {
        assert_eq!(path_of(&r[i], what), by_tag, "the second download {what}");
    }
    let again: Vec<String> = proxy.requests()[before..].to_vec();
    assert_eq!(
        again.len(),
        2,
        "only the tag and the digest are resolved: {again:?}"
    );
    assert!(
        again
            .iter()
            .all(|r| r.starts_with("GET /hf/api/models/weights/qwen3-8b/revision/")),
        "{again:?}"
    );

    // Refusals, as the client's own exceptions: the key on a volume it may
    // not pull, no token, a bad token; a missing file and revision.
    let other = sb.path().join("hf-cache-4");
    let r = hub(
        &sb,
        &endpoint,
        Some(&token),
        &json!([
            snapshot("other/secret", "main", &other),
            one_file("other/secret", "config.json", "main", &other),
            one_file(REPO, "nope.bin", "prod", &other),
            snapshot(REPO, "nosuchtag", &other),
        ]),
    );
    let errors: Vec<&str> = r
        .iter()
        .map(|e| e["error"].as_str().unwrap_or("none"))
        .collect();
    assert_eq!(
        errors,
        [
            "RepositoryNotFoundError",
            "RepositoryNotFoundError",
            "RemoteEntryNotFoundError",
            "RevisionNotFoundError"
        ],
        "{r:?}"
    );
    let r = hub(
        &sb,
        &endpoint,
        None,
        &json!([snapshot(REPO, "prod", &other)]),
    );
    assert_eq!(r[0]["error"], "RepositoryNotFoundError", "no token: {r:?}");
    let (id, _) = token.split_once(':').unwrap();
    let bad = format!("{id}:{}", "0".repeat(64));
    let r = hub(
        &sb,
        &endpoint,
        Some(&bad),
        &json!([snapshot(REPO, "prod", &other)]),
    );
    assert!(
        r[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("Invalid credentials")),
        "a bad token: {r:?}"
    );
    assert!(
        files_in(&other).keys().all(|p| !p.contains("snapshots")),
        "nothing was downloaded"
    );
}

#[test]
fn ranges_and_errors_over_plain_http() {
    let sb = Sandbox::new();
    let server = Server::start(&sb.path().join("registry"));
    let reg = host(&server);
    let src = sb.path().join("model");
    let files = model(&src, 2);
    let v1 = push(&sb, &reg, &src, REPO);
    let sha = commit_of(&v1);
    let base = format!("{}/hf", server.url);
    let client = reqwest::blocking::Client::new();
    let get = |path: &str, range: Option<&str>| {
        let mut req = client.get(format!("{base}{path}"));
        if let Some(r) = range {
            req = req.header("range", r);
        }
        req.send().unwrap()
    };
    let header = |r: &reqwest::blocking::Response, h: &str| {
        r.headers().get(h).map(|v| v.to_str().unwrap().to_string())
    };

    // The revision's info and listings.
    let info: Value = get("/api/models/weights/qwen3-8b/revision/main", None)
        .json()
        .unwrap();
    assert_eq!(info["sha"], sha.as_str(), "{info}");
    assert_eq!(info["id"], REPO);
    let mut siblings: Vec<&str> = (info["siblings"].as_array().unwrap().iter())
        .map(|s| s["rfilename"].as_str().unwrap())
        .collect();
    siblings.sort();
    assert_eq!(
        siblings,
        files.keys().map(String::as_str).collect::<Vec<_>>()
    );
    let top: Value = get(&format!("/api/models/weights/qwen3-8b/tree/{sha}"), None)
        .json()
        .unwrap();
    let names: Vec<String> = (top.as_array().unwrap().iter())
        .map(|e| {
            format!(
                "{} {}",
                e["type"].as_str().unwrap(),
                e["path"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        names,
        [
            "file config.json",
            "file empty.txt",
            "file model.safetensors",
            "directory sub",
            "file tokenizer.json"
        ],
        "{top}"
    );
    let all: Value = get(
        "/api/models/weights/qwen3-8b/tree/main?recursive=true",
        None,
    )
    .json()
    .unwrap();
    assert_eq!(all.as_array().unwrap().len(), files.len() + 1, "{all}");
    let sub: Value = get("/api/models/weights/qwen3-8b/tree/main/sub", None)
        .json()
        .unwrap();
    assert_eq!(sub[0]["path"], "sub/notes.txt", "{sub}");
    assert_eq!(sub[0]["size"], files["sub/notes.txt"].len());

    // HEAD: what the client reads, and no Xet header.
    let tensor = &files["model.safetensors"];
    let size = tensor.len();
    let url = "/weights/qwen3-8b/resolve/main/model.safetensors";
    let head = client.head(format!("{base}{url}")).send().unwrap();
    assert_eq!(head.status(), 200);
    assert_eq!(
        header(&head, "x-repo-commit").as_deref(),
        Some(sha.as_str())
    );
    assert_eq!(header(&head, "content-length"), Some(size.to_string()));
    assert_eq!(header(&head, "x-sealvol-version"), Some(v1.clone()));
    let etag = header(&head, "etag").unwrap();
    assert_eq!(
        etag,
        format!("\"{}\"", sealvol_spec::B3Digest::of(tensor).hex())
    );
    assert!(
        head.headers()
            .keys()
            .all(|k| !k.as_str().starts_with("x-xet")),
        "{:?}",
        head.headers()
    );

    // Whole files, by every kind of revision.
    for rev in ["main", sha.as_str(), &v1.replace(':', "%3A"), &v1] {
        let r = get(
            &format!("/weights/qwen3-8b/resolve/{rev}/model.safetensors"),
            None,
        );
        assert_eq!(r.status(), 200, "{rev}");
        assert!(r.bytes().unwrap() == tensor[..], "{rev}: wrong bytes");
    }
    let r = get("/weights/qwen3-8b/resolve/main/sub/notes.txt", None);
    assert_eq!(r.bytes().unwrap(), files["sub/notes.txt"]);
    let r = get("/weights/qwen3-8b/resolve/main/empty.txt", None);
    assert_eq!(r.status(), 200);
    assert!(r.bytes().unwrap().is_empty());

    // Ranges: first byte, last byte (both ways), across a piece boundary.
    let mib = 1 << 20;
    for (range, from, to) in [
        ("bytes=0-0".to_string(), 0, 1),
        (format!("bytes={}-", size - 1), size - 1, size),
        ("bytes=-1".to_string(), size - 1, size),
        (format!("bytes={}-{}", mib - 2, mib + 1), mib - 2, mib + 2),
        (format!("bytes=10-{}", size + 100), 10, size),
    ] {
        let r = get(url, Some(&range));
        assert_eq!(r.status(), 206, "{range}");
        assert_eq!(
            header(&r, "content-range"),
            Some(format!("bytes {from}-{}/{size}", to - 1)),
            "{range}"
        );
        assert!(
            r.bytes().unwrap() == tensor[from..to],
            "{range}: wrong bytes"
        );
    }
    // Past the end.
    for range in [
        format!("bytes={size}-"),
        format!("bytes={}-{}", size + 5, size + 9),
    ] {
        let r = get(url, Some(&range));
        assert_eq!(r.status(), 416, "{range}");
        assert_eq!(header(&r, "content-range"), Some(format!("bytes */{size}")));
    }
    let r = get(
        "/weights/qwen3-8b/resolve/main/empty.txt",
        Some("bytes=0-0"),
    );
    assert_eq!(r.status(), 416, "any range of an empty file");

    // Errors in the Hub's dialect.
    for (method, path, status, code) in [
        (
            "GET",
            "/weights/qwen3-8b/resolve/main/nope.bin",
            404,
            Some("EntryNotFound"),
        ),
        (
            "GET",
            "/weights/qwen3-8b/resolve/main/sub",
            404,
            Some("EntryNotFound"),
        ),
        (
            "GET",
            "/weights/qwen3-8b/resolve/nosuchtag/config.json",
            404,
            Some("RevisionNotFound"),
        ),
        (
            "GET",
            "/weights/qwen3-8b/resolve/b3%3A00/config.json",
            404,
            Some("RevisionNotFound"),
        ),
        (
            "GET",
            "/api/models/weights/qwen3-8b/revision/nosuchtag",
            404,
            Some("RevisionNotFound"),
        ),
        (
            "GET",
            "/api/models/weights/none/revision/main",
            404,
            Some("RepoNotFound"),
        ),
        (
            "GET",
            "/weights/none/resolve/main/config.json",
            404,
            Some("RepoNotFound"),
        ),
        (
            "GET",
            "/api/models/weights/qwen3-8b/tree/main/nope",
            404,
            Some("EntryNotFound"),
        ),
        (
            "PUT",
            "/weights/qwen3-8b/resolve/main/config.json",
            405,
            None,
        ),
        ("GET", "/weights/qwen3-8b/blob/main/config.json", 404, None),
    ] {
        let r = client
            .request(method.parse().unwrap(), format!("{base}{path}"))
            .send()
            .unwrap();
        assert_eq!(r.status().as_u16(), status, "{method} {path}");
        assert_eq!(
            header(&r, "x-error-code").as_deref(),
            code,
            "{method} {path}"
        );
        let body: Value = r.json().unwrap();
        assert!(body["error"].is_string(), "{method} {path}: {body}");
    }
    // No such volume, by a digest or a commit id too; a name of three
    // components, which no Hub repository id can be.
    for path in [
        format!("/weights/none/resolve/{sha}/config.json"),
        format!("/weights/none/resolve/{v1}/config.json"),
        "/api/models/w%2Fa/b/revision/main".to_string(),
    ] {
        let r = get(&path, None);
        assert_eq!(r.status(), 404, "{path}");
        assert_eq!(
            header(&r, "x-error-code").as_deref(),
            Some("RepoNotFound"),
            "{path}"
        );
    }
    // A missing file names the commit, so the client remembers it is absent.
    let r = get("/weights/qwen3-8b/resolve/main/nope.bin", None);
    assert_eq!(header(&r, "x-repo-commit"), Some(sha));
}

#[test]
fn a_damaged_chunk_is_an_error_never_wrong_bytes() {
    let sb = Sandbox::new();
    let root = sb.path().join("registry");
    let server = Server::start(&root);
    let reg = host(&server);
    let src = sb.path().join("model");
    let files = model(&src, 3);
    push(&sb, &reg, &src, REPO);
    let tensor = files["model.safetensors"].clone();
    let size = tensor.len();

    // Bitrot in the last byte of the file's last chunk, written as a new
    // file over the blob (as a tampered bucket would serve it).
    let chunks = sealvol_tests::chunk_files(&root, &tensor);
    let last = chunks.last().unwrap();
    let mut bytes = std::fs::read(last).unwrap();
    *bytes.last_mut().unwrap() ^= 0x01;
    let tmp = root.join("damaged");
    std::fs::write(&tmp, &bytes).unwrap();
    std::fs::rename(&tmp, last).unwrap();

    let base = format!("{}/hf/weights/qwen3-8b/resolve/main", server.url);
    let client = reqwest::blocking::Client::new();
    // The damaged piece's bytes: refused before any byte is sent.
    let r = client
        .get(format!("{base}/model.safetensors"))
        .header("range", "bytes=-1")
        .send()
        .unwrap();
    assert_eq!(r.status(), 500);
    let body: Value = r.json().unwrap();
    assert!(
        body["error"].as_str().unwrap().contains("damaged"),
        "{body}"
    );
    // The pieces before it are served.
    let r = client
        .get(format!("{base}/model.safetensors"))
        .header("range", "bytes=0-1048575")
        .send()
        .unwrap();
    assert_eq!(r.status(), 206);
    assert!(r.bytes().unwrap() == tensor[..1 << 20]);
    // The whole file: its good pieces, then the body breaks off.
    let r = client
        .get(format!("{base}/model.safetensors"))
        .send()
        .unwrap();
    assert_eq!(r.status(), 200);
    let mut got = Vec::new();
    let mut reader = r;
    let broke = std::io::copy(&mut reader, &mut got).is_err();
    assert!(
        broke || got.len() < size,
        "a body of {} bytes and no error",
        got.len()
    );
    assert!(
        got.len() < size && got[..] == tensor[..got.len()],
        "wrong bytes served"
    );

    // The client raises, and keeps no file with wrong bytes; the other
    // files still download.
    let cache = sb.path().join("hf-cache");
    let endpoint = format!("{}/hf", server.url);
    let r = hub(
        &sb,
        &endpoint,
        None,
        &json!([
            one_file(REPO, "model.safetensors", "main", &cache),
            one_file(REPO, "config.json", "main", &cache),
        ]),
    );
    assert!(
        r[0]["error"].is_string(),
        "the damaged file downloaded: {r:?}"
    );
    assert_eq!(
        std::fs::read(path_of(&r[1], "config.json")).unwrap(),
        files["config.json"]
    );
    for (p, b) in files_in(&cache) {
        assert!(
            b.len() < size || b == tensor,
            "{p} in the client's cache holds wrong bytes"
        );
    }
}
