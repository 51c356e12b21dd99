//! `sealvol record` and recorded prefetch lists (SPEC.md §5.8), end to end:
//! a real `sealvol record` mounts a multi-file version, runs a workload that
//! reads a few scattered ranges, and pushes the order of its first reads as
//! a referrer of the version: to `sealvol serve` (the referrers API) and to
//! CNCF distribution 2.8 (no referrers API: the `sha256-<hex>` tag schema).
//! The list is then found again, checked against the tree and turned into
//! the chunks a `--prefetch recorded` mount fetches, in order; hostile lists
//! (too many runs, an unknown path, a piece out of range) are refused with
//! a clear error and yield no chunks. A `--prefetch recorded` mount fetches
//! exactly those chunks before anything is read, and nothing for a hostile
//! list.

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant, UNIX_EPOCH};

use sealvol_client::prefetch::{find_list, push_list};
use sealvol_client::resolve::{load_tree, resolve, Resolved};
use sealvol_client::Remote;
use sealvol_snapshotter::inodes::{Inodes, Owner};
use sealvol_snapshotter::record::find_plan;
use sealvol_spec::oci::{MT_PREFETCH, MT_PREFETCH_LIST};
use sealvol_spec::prefetch::{PrefetchList, MAX_RUNS};
use sealvol_spec::tree::{EntryData, TreeIndex};
use sealvol_tests::fuse::{mountpoint, pread, within, Mounted};
use sealvol_tests::{
    cached_chunks, host, noise, ok, s, write, DockerRegistry, Gate, Sandbox, Server,
};
use serde_json::Value;

const MIB: usize = 1 << 20;
/// Where the workload's first read lands in big.bin: in its piece 4.
const FIRST: u64 = 1200 * 4096;

/// A version of several files: two of several pieces, small ones.
fn sample(root: &Path) {
    write(&root.join("big.bin"), &noise(6 * MIB, 1), 0o644);
    write(&root.join("config.json"), b"{\"hidden_size\": 64}\n", 0o644);
    write(&root.join("tokenizer.json"), &noise(300_000, 2), 0o644);
    write(&root.join("nested/w.bin"), &noise(3 * MIB, 3), 0o644);
}

/// A cold start that reads a few scattered ranges: the middle of big.bin,
/// config.json, the start of nested/w.bin, then the start of big.bin.
const WORKLOAD: &str = "dd if={}/big.bin bs=4096 skip=1200 count=2 of=/dev/null 2>/dev/null \
    && cat {}/config.json >/dev/null \
    && dd if=\"$SEALVOL_MOUNT/nested/w.bin\" bs=4096 count=1 of=/dev/null 2>/dev/null \
    && dd if={}/big.bin bs=4096 count=1 of=/dev/null 2>/dev/null";

fn http() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap()
}

fn get_json(url: &str, accept: &str) -> (u16, Value) {
    let r = http().get(url).header("Accept", accept).send().unwrap();
    let status = r.status().as_u16();
    let body = r.bytes().unwrap();
    (status, serde_json::from_slice(&body).unwrap_or(Value::Null))
}

const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// Pushes the sample, records the workload on it, and checks what was
/// pushed: the referrer manifest, its subject and annotation, and the list.
/// Returns the version found again and the referrer's digest.
fn record_on(sb: &Sandbox, registry: &str, api: bool) -> (Resolved, TreeIndex, String) {
    let src = sb.path().join("src");
    sample(&src);
    ok(
        sb.sealvol(registry, &["push", s(&src), "bdn:ns/vol"]),
        "push",
    );
    let out = ok(
        sb.sealvol(
            registry,
            &[
                "record",
                "bdn:ns/vol",
                "--output",
                "json",
                "--",
                "sh",
                "-c",
                WORKLOAD,
            ],
        ),
        "record",
    );
    let pushed: Value = serde_json::from_str(out.trim().lines().last().unwrap()).unwrap();
    let manifest = pushed["manifest"].as_str().unwrap().to_string();
    assert_eq!(pushed["referrers_api"], api, "{pushed}");
    assert_eq!(pushed["files"], 3, "{pushed}");

    let rt = tokio::runtime::Runtime::new().unwrap();
    let remote = Remote::connect(registry, false).unwrap();
    let vref = format!("{registry}/ns/vol").parse().unwrap();
    let version = rt.block_on(resolve(&remote, &vref)).unwrap();
    let tree = rt.block_on(load_tree(&remote, &version)).unwrap();
    let subject = version.index_digest.to_string();
    assert_eq!(pushed["subject"], subject.as_str());
    assert_eq!(pushed["version"], version.index.digest.to_string().as_str());

    // The referrer is listed: by the referrers API, or under the tag schema.
    let base = format!("http://{registry}/v2/ns/vol");
    let listed = if api {
        let (status, v) = get_json(&format!("{base}/referrers/{subject}"), INDEX);
        assert_eq!(status, 200, "{v}");
        v
    } else {
        let (status, _) = get_json(&format!("{base}/referrers/{subject}"), INDEX);
        assert_eq!(status, 404, "distribution 2.8 has no referrers API");
        let tag = subject.replace(':', "-");
        let (status, v) = get_json(&format!("{base}/manifests/{tag}"), INDEX);
        assert_eq!(status, 200, "the tag schema index {tag}: {v}");
        v
    };
    let entries = listed["manifests"].as_array().unwrap();
    let entry = entries
        .iter()
        .find(|d| d["digest"] == manifest.as_str())
        .unwrap_or_else(|| panic!("{manifest} not listed: {listed}"));
    assert_eq!(entry["artifactType"], MT_PREFETCH);
    assert_eq!(
        entry["annotations"]["dev.sealvol.version"],
        version.index.digest.to_string().as_str()
    );

    // The manifest: subject, annotation, one layer of the list's type.
    let (status, m) = get_json(&format!("{base}/manifests/{manifest}"), MANIFEST);
    assert_eq!(status, 200);
    assert_eq!(m["artifactType"], MT_PREFETCH);
    assert_eq!(m["subject"]["digest"], subject.as_str());
    assert_eq!(m["subject"]["mediaType"], INDEX);
    assert_eq!(
        m["annotations"]["dev.sealvol.version"],
        version.index.digest.to_string().as_str()
    );
    let layers = m["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(layers[0]["mediaType"], MT_PREFETCH_LIST);

    // The list: the workload's first reads, in order.
    let blob = http()
        .get(format!(
            "{base}/blobs/{}",
            layers[0]["digest"].as_str().unwrap()
        ))
        .send()
        .unwrap()
        .bytes()
        .unwrap();
    let list = PrefetchList::decode(&blob).unwrap();
    let reads = list.check(&version.index.digest, &tree).unwrap();
    let pieces: Vec<(&str, u64)> = reads
        .iter()
        .flat_map(|r| r.pieces.clone().map(move |p| (r.path, p)))
        .collect();
    let at = |path: &str, piece: u64| {
        pieces
            .iter()
            .position(|&x| x == (path, piece))
            .unwrap_or_else(|| panic!("({path}, {piece}) not recorded: {pieces:?}"))
    };
    assert_eq!(pieces[0], ("big.bin", FIRST >> 20), "{pieces:?}");
    assert!(at("big.bin", 4) < at("config.json", 0), "{pieces:?}");
    assert!(at("config.json", 0) < at("nested/w.bin", 0), "{pieces:?}");
    assert!(at("nested/w.bin", 0) < at("big.bin", 0), "{pieces:?}");
    assert!(
        !pieces.iter().any(|(p, _)| *p == "tokenizer.json"),
        "a file never read is not in the list: {pieces:?}"
    );

    // Found again as the newest referrer, and mapped to chunks in order.
    let found = rt
        .block_on(find_list(&remote, &version, &tree))
        .unwrap()
        .expect("the recorded list");
    assert_eq!(found.manifest.to_string(), manifest);
    assert_eq!(found.list, list);
    let inodes = Inodes::new(tree.clone(), None, Owner::current(UNIX_EPOCH)).unwrap();
    let plan = rt
        .block_on(find_plan(&remote, &version, &tree, &inodes))
        .unwrap()
        .expect("a plan");
    let EntryData::File { chunks: big, .. } = &tree.get("big.bin").unwrap().data else {
        panic!("big.bin is a file");
    };
    let first = plan.chunks[0];
    assert!(
        big.contains(&first)
            && first.offset <= FIRST
            && FIRST < first.offset + u64::from(first.length),
        "the first chunk fetched holds the first byte read: {first:?}"
    );
    (version, tree, manifest)
}

/// Pushes hostile lists, each newer than the last, and checks that the
/// newest is refused with a clear error and yields no chunks.
fn hostile_lists_are_refused(registry: &str, version: &Resolved, tree: &TreeIndex) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let remote = Remote::connect(registry, false).unwrap();
    let v = version.index.digest;
    let inodes = Inodes::new(tree.clone(), None, Owner::current(UNIX_EPOCH)).unwrap();
    let mut too_many = PrefetchList::from_reads(v, [("big.bin", 0)]);
    too_many.runs = vec![too_many.runs[0]; MAX_RUNS + 1];
    let mut out_of_range = PrefetchList::from_reads(v, [("big.bin", 0)]);
    out_of_range.runs[0].first = 5;
    out_of_range.runs[0].count = 2;
    let cases = [
        (too_many, "131073 runs, over the limit of 131072"),
        (
            PrefetchList::from_reads(v, [("../etc/passwd", 0)]),
            "names \"../etc/passwd\", which is not a file of the version",
        ),
        (
            PrefetchList::from_reads(v, [("nested", 0)]),
            "names \"nested\", which is not a file of the version",
        ),
        (
            out_of_range,
            "asks for pieces 5..5+2 of \"big.bin\", which has 6",
        ),
    ];
    for (i, (list, says)) in cases.into_iter().enumerate() {
        let created = format!("2100-01-01T00:00:0{i}.000Z");
        rt.block_on(push_list(&remote, version, &list, &created))
            .unwrap();
        let e = rt
            .block_on(find_list(&remote, version, tree))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("the recorded prefetch list is refused") && e.contains(says),
            "{e}"
        );
        let e = rt
            .block_on(find_plan(&remote, version, tree, &inodes))
            .unwrap_err();
        assert!(e.to_string().contains(says), "{e}");
    }
}

#[test]
fn record_pushes_a_referrer_to_sealvol_serve() {
    let sb = Sandbox::new();
    let server = Server::start(&sb.path().join("data"));
    let registry = host(&server);
    let (version, tree, _) = record_on(&sb, &registry, true);
    hostile_lists_are_refused(&registry, &version, &tree);
}

#[test]
fn record_pushes_a_referrer_to_distribution_under_the_tag_schema() {
    let sb = Sandbox::new();
    let registry = DockerRegistry::start();
    let (version, tree, first) = record_on(&sb, &registry.addr(), false);
    // A second recording joins the first in the tag schema index, and is
    // the one found.
    let out = ok(
        sb.sealvol(
            &registry.addr(),
            &[
                "record",
                "bdn:ns/vol",
                "--output",
                "json",
                "--",
                "cat",
                "{}/config.json",
            ],
        ),
        "second record",
    );
    let second: Value = serde_json::from_str(out.trim().lines().last().unwrap()).unwrap();
    let tag = version.index_digest.to_string().replace(':', "-");
    let (_, index) = get_json(
        &format!("http://{}/v2/ns/vol/manifests/{tag}", registry.addr()),
        INDEX,
    );
    let digests: Vec<&str> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["digest"].as_str().unwrap())
        .collect();
    assert!(digests.contains(&first.as_str()), "{index}");
    assert!(
        digests.contains(&second["manifest"].as_str().unwrap()),
        "{index}"
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    let remote = Remote::connect(&registry.addr(), false).unwrap();
    let found = rt
        .block_on(find_list(&remote, &version, &tree))
        .unwrap()
        .unwrap();
    assert_eq!(
        found.manifest.to_string(),
        second["manifest"].as_str().unwrap()
    );
    assert_eq!(found.list.files, vec!["config.json"]);
    hostile_lists_are_refused(&registry.addr(), &version, &tree);
}

#[test]
fn a_failed_command_pushes_nothing() {
    let sb = Sandbox::new();
    let server = Server::start(&sb.path().join("data"));
    let registry = host(&server);
    let src = sb.path().join("src");
    sample(&src);
    // A version of its own: other tests record the sample at the same time.
    write(&src.join("only-here"), b"failed command\n", 0o644);
    ok(
        sb.sealvol(&registry, &["push", s(&src), "bdn:ns/vol"]),
        "push",
    );
    let out = sb.sealvol(
        &registry,
        &[
            "record",
            "bdn:ns/vol",
            "--",
            "sh",
            "-c",
            "cat {}/config.json && exit 3",
        ],
    );
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no prefetch list was pushed"), "{err}");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let remote = Remote::connect(&registry, false).unwrap();
    let vref = format!("{registry}/ns/vol").parse().unwrap();
    let version = rt.block_on(resolve(&remote, &vref)).unwrap();
    let tree = rt.block_on(load_tree(&remote, &version)).unwrap();
    assert!(rt
        .block_on(find_list(&remote, &version, &tree))
        .unwrap()
        .is_none());
    assert!(
        !sealvol_snapshotter::mounts()
            .unwrap()
            .iter()
            .any(|m| m.source.contains(&version.index.digest.to_string())),
        "the recording's mount is gone"
    );
}

#[test]
fn a_recorded_mount_fetches_what_the_recording_read_before_it_is_read() {
    let sb = Sandbox::new();
    let server = Server::start(&sb.path().join("data"));
    let registry = host(&server);
    let (version, tree, _) = record_on(&sb, &registry, true);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let remote = Remote::connect(&registry, false).unwrap();
    let inodes = Inodes::new(tree.clone(), None, Owner::current(UNIX_EPOCH)).unwrap();
    let plan = rt
        .block_on(find_plan(&remote, &version, &tree, &inodes))
        .unwrap()
        .unwrap();
    let planned: BTreeSet<String> = plan.chunks.iter().map(|c| c.sha256.to_string()).collect();
    let EntryData::File { chunks: tok, .. } = &tree.get("tokenizer.json").unwrap().data else {
        panic!("tokenizer.json is a file");
    };
    let never_read = tok[0].sha256.to_string();
    assert!(!planned.contains(&never_read));

    // What mounts download, seen on the wire (an engine may keep the bytes
    // elsewhere than the chunk cache), among the version's chunks.
    let gate = Gate::start(&registry);
    let chunks: BTreeSet<String> = sealvol_tests::chunk_blobs(
        &registry,
        "ns/vol",
        &format!("b3-{}", version.index.digest.hex()),
    )
    .into_iter()
    .map(|(d, _)| d)
    .collect();
    let fetched =
        || -> BTreeSet<String> { gate.blobs_got().intersection(&chunks).cloned().collect() };

    // Nothing is read: the mount fetches the plan on its own, and no more.
    let cache = sb.path().join("cold");
    let mnt = mountpoint(&sb, "replay");
    let m = Mounted::start(
        &sb,
        &gate.addr(),
        &[
            "mount",
            "bdn:ns/vol",
            s(&mnt),
            "--cache-dir",
            s(&cache),
            "--prefetch",
            "recorded",
        ],
        &[&mnt],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !planned.is_subset(&fetched()) {
        assert!(
            Instant::now() < deadline,
            "the recorded chunks were not prefetched: {planned:?}; stderr: {}",
            m.stderr()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(fetched(), planned, "only the plan is fetched");
    // And what the workload reads is served from there.
    let bytes = within("reading the recorded range", {
        let p = mnt.join("big.bin");
        move || pread(&p, FIRST, 8192).unwrap()
    });
    assert_eq!(
        bytes,
        noise(6 * MIB, 1)[FIRST as usize..FIRST as usize + 8192]
    );
    drop(m);

    // A hostile list, newest: refused, and nothing is fetched.
    let mut hostile = PrefetchList::from_reads(version.index.digest, [("big.bin", 0)]);
    hostile.runs[0].count = 99;
    rt.block_on(push_list(
        &remote,
        &version,
        &hostile,
        "2100-01-01T00:00:00.000Z",
    ))
    .unwrap();
    let cache = sb.path().join("cold2");
    let gate = Gate::start(&registry);
    let m = Mounted::start(
        &sb,
        &gate.addr(),
        &[
            "mount",
            "bdn:ns/vol",
            s(&mnt),
            "--cache-dir",
            s(&cache),
            "--prefetch",
            "recorded",
        ],
        &[&mnt],
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while !m.stderr().contains("prefetching nothing") {
        assert!(Instant::now() < deadline, "no warning: {}", m.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        m.stderr().contains("the recorded prefetch list is refused")
            && m.stderr()
                .contains("asks for pieces 0..0+99 of \"big.bin\", which has 6"),
        "{}",
        m.stderr()
    );
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        gate.blobs_got().intersection(&chunks).count(),
        0,
        "nothing is fetched"
    );
    assert_eq!(cached_chunks(&cache), BTreeSet::new(), "nothing is fetched");
}
