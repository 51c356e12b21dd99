//! A real node: a kubelet (standalone, built by `scripts/deps.sh` from
//! k8s.io/kubernetes) on containerd 2.x with the sealvol snapshotter runs
//! static pods: sealvol's own registry from the image `deploy/image/build.sh`
//! makes, rendered by the Helm chart (`registry.mode=StaticPod`), and the
//! example pod of `deploy/examples/` with image volumes of two versions
//! pushed to that registry.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use sealvol_tests::kubelet::Kubelet;
use sealvol_tests::node::{
    import_busybox, plain_http_host, version_mounts_under, NodeSetup, Snapshotter, BUSYBOX,
};
use sealvol_tests::{noise, s, Containerd, FlipProxy, Sandbox};
use sha2::{Digest, Sha256};

const REPO: &str = "weights/toy";

fn repo_root() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/.."))
}

/// Builds sealvol's image from the binary under test with
/// `deploy/image/build.sh` and pushes it to `image`; answers its digest.
fn build_image(image: &str) -> String {
    let out = Command::new("bash")
        .arg(repo_root().join("deploy/image/build.sh"))
        .arg(image)
        .arg(sealvol_tests::sealvol_bin())
        .output()
        .expect("run deploy/image/build.sh");
    assert!(
        out.status.success(),
        "deploy/image/build.sh failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The registry's static pod, as the chart renders it.
fn registry_manifest(image: &str, addr: &str, data: &Path) -> String {
    let out = Command::new(sealvol_tests::go_tool("helm"))
        .args(["template", "sealvol"])
        .arg(repo_root().join("deploy/helm/sealvol"))
        .args([
            "--set",
            "registry.mode=StaticPod",
            "--set",
            "node.enabled=false",
        ])
        .args(["--set", &format!("registry.image={image}")])
        .args(["--set", &format!("registry.staticPod.addr={addr}")])
        .args(["--set", &format!("registry.staticPod.dataDir={}", s(data))])
        .output()
        .expect("run helm");
    assert!(
        out.status.success(),
        "helm template: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `deploy/examples/weights-reader.yaml` as pod `name` mounting `reference`,
/// its container on the busybox image the tests build.
fn reader_manifest(name: &str, reference: &str) -> String {
    let example = std::fs::read_to_string(repo_root().join("deploy/examples/weights-reader.yaml"))
        .expect("deploy/examples/weights-reader.yaml");
    let placeholder = format!("registry.example.com/{REPO}@sha256:{}", "0".repeat(64));
    let runtime_class = "  runtimeClassName: sealvol\n";
    for needle in [
        "name: weights-reader",
        "image: busybox:1.37",
        placeholder.as_str(),
        runtime_class,
    ] {
        assert!(
            example.contains(needle),
            "the example no longer says {needle:?}"
        );
    }
    // A standalone kubelet resolves no RuntimeClass (it has no API
    // server) and v1.37.2 crashes on a pod naming one; this node makes
    // sealvol the default snapshotter instead.
    example
        .replace(runtime_class, "")
        .replace("name: weights-reader", &format!("name: {name}"))
        .replace("image: busybox:1.37", &format!("image: {BUSYBOX}"))
        .replace(&placeholder, reference)
}

/// What the reader prints for `files`, sorted (find's order is the
/// directory's).
fn sums(files: &BTreeMap<String, Vec<u8>>) -> Vec<String> {
    let mut v: Vec<String> = files
        .iter()
        .map(|(path, bytes)| format!("{}  ./{path}", hex::encode(Sha256::digest(bytes))))
        .collect();
    v.sort();
    v
}

fn write_files(dir: &Path, files: &BTreeMap<String, Vec<u8>>) {
    for (path, bytes) in files {
        sealvol_tests::write(&dir.join(path), bytes, 0o644);
    }
}

/// Waits for `GET http://addr/readyz` to answer 200; false if it does not
/// within `timeout`.
fn wait_ready(addr: &str, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if let Ok(r) = reqwest::blocking::get(format!("http://{addr}/readyz")) {
            if r.status().is_success() {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    false
}

/// Active snapshots of the sealvol snapshotter (`ctr snapshots ls`).
fn active_snapshots(ctd: &Containerd) -> usize {
    let out = ctd.ctr(&["snapshots", "--snapshotter", "sealvol", "ls"]);
    assert!(out.status.success(), "ctr snapshots ls: {out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.split_whitespace().nth(2) == Some("Active"))
        .count()
}

/// The node end to end under a kubelet: sealvol's image runs the registry
/// as a static pod rendered by the chart; the client pushes two versions
/// of one volume to it; two pods of the example, each pinning one
/// version by digest, mount their image volumes through the sealvol
/// snapshotter and print every file's sha256, which match the source; the
/// second version's pod fetches none of the chunks the first one already
/// brought (one chunk cache serves both); deleting a pod's manifest stops
/// the pod and releases its container's snapshot.
#[test]
fn a_kubelet_runs_the_registry_and_image_volume_pods_as_static_pods() {
    let sb = Sandbox::new();
    // A registry to bootstrap from: it holds sealvol's image.
    let boot = sealvol_tests::Server::start(&sb.path().join("boot"));
    let boot_addr = sealvol_tests::host(&boot);
    let digest = build_image(&format!("{boot_addr}/sealvol/sealvol:test"));
    assert!(digest.starts_with("sha256:"), "{digest}");
    // The same binary gives the same image.
    assert_eq!(
        build_image(&format!("{boot_addr}/sealvol/sealvol:again")),
        digest
    );

    let registry_addr = sealvol_tests::closed_addr();
    let proxy = FlipProxy::start_counting(&registry_addr);

    let dir = tempfile::tempdir().unwrap();
    let hosts = dir.path().join("certs.d");
    for host in [&boot_addr, &registry_addr, &proxy.addr()] {
        plain_http_host(&hosts, host);
    }
    let socket = dir.path().join("snapshotter.sock");
    let setup = NodeSetup {
        sealvol_handler: true,
        ..NodeSetup::SEALVOL_DEFAULT
    };
    let ctd = Containerd::start_v2(&setup.config(&socket, &hosts)).in_namespace("k8s.io");
    let snap = Snapshotter::start_with(
        dir.path(),
        &format!("containerd_address = {:?}\n", s(&ctd.address())),
    );
    import_busybox(&ctd, "sealvol", &[]);
    let mut kubelet = Kubelet::start(&ctd);

    // sealvol's registry, from its own image, as the chart renders it.
    let data = sb.path().join("registry-data");
    kubelet.add_pod(
        "sealvol-registry",
        &registry_manifest(
            &format!("{boot_addr}/sealvol/sealvol@{digest}"),
            &registry_addr,
            &data,
        ),
    );
    let ready = wait_ready(&registry_addr, Duration::from_secs(30));
    assert!(
        ready,
        "the registry's static pod did not become ready within 30 s: {}\nthe kubelet's log:\n{}",
        kubelet.container_log("sealvol-registry", "registry"),
        kubelet.log()
    );
    assert!(
        data.join("meta.redb").exists()
            || std::fs::read_dir(&data)
                .map(|d| d.count() > 0)
                .unwrap_or(false),
        "the registry wrote nothing to its host-path data folder"
    );

    // Two versions of one volume, sharing their big file.
    let v1: BTreeMap<String, Vec<u8>> = [
        (
            "config.json",
            b"{\"model_type\": \"toy\", \"version\": 1}\n".to_vec(),
        ),
        ("weights/model.safetensors", noise(6 << 20, 51)),
        ("tokenizer/vocab.txt", b"hello\nworld\n".to_vec()),
    ]
    .into_iter()
    .map(|(p, b)| (p.to_string(), b))
    .collect();
    let mut v2 = v1.clone();
    v2.insert(
        "config.json".into(),
        b"{\"model_type\": \"toy\", \"version\": 2}\n".to_vec(),
    );
    v2.insert("weights/adapter.safetensors".into(), noise(1 << 20, 52));
    let mut refs = Vec::new();
    for (tag, files) in [("v1", &v1), ("v2", &v2)] {
        let src = sb.path().join(tag);
        write_files(&src, files);
        sealvol_tests::ok(
            sb.sealvol(
                &registry_addr,
                &["push", s(&src), &format!("bdn:{REPO}:{tag}")],
            ),
            "push to the registry's static pod",
        );
        let oci_ref = sealvol_tests::ok(
            sb.sealvol(
                &proxy.addr(),
                &["stat", &format!("bdn:{REPO}:{tag}"), "--oci-ref"],
            ),
            "stat --oci-ref",
        );
        refs.push(oci_ref.trim().to_string());
    }
    let chunks = |tag: &str| -> Vec<String> {
        sealvol_tests::chunk_blobs(&registry_addr, REPO, tag)
            .into_iter()
            .map(|(d, _)| d)
            .collect()
    };
    let chunk_gets = |digests: &[String]| {
        proxy
            .requests()
            .iter()
            .filter(|r| r.starts_with("GET ") && digests.iter().any(|c| r.contains(c.as_str())))
            .count()
    };
    let (chunks1, chunks2) = (chunks("v1"), chunks("v2"));
    let shared: Vec<String> = chunks2
        .iter()
        .filter(|c| chunks1.contains(c))
        .cloned()
        .collect();
    assert!(!shared.is_empty(), "the two versions share no chunk");

    kubelet.add_pod("toy-v1", &reader_manifest("toy-v1", &refs[0]));
    let mut out = kubelet.stdout("toy-v1", "reader", v1.len(), Duration::from_secs(120));
    out.sort();
    assert_eq!(out, sums(&v1));
    assert!(
        chunk_gets(&chunks1) > 0,
        "the reader's reads fetched no chunk"
    );
    assert!(
        !version_mounts_under(&snap.root).is_empty(),
        "the image volume is not a sealvol mount"
    );
    let shared_before = chunk_gets(&shared);

    kubelet.add_pod("toy-v2", &reader_manifest("toy-v2", &refs[1]));
    let mut out = kubelet.stdout("toy-v2", "reader", v2.len(), Duration::from_secs(120));
    out.sort();
    assert_eq!(out, sums(&v2));
    assert_eq!(
        chunk_gets(&shared),
        shared_before,
        "the second version's pod fetched chunks the first one had brought: {:?}",
        proxy.requests()
    );
    // Both run side by side, each on its own version.
    assert_eq!(kubelet.containers("toy-v1", "reader").len(), 1);
    assert_eq!(kubelet.containers("toy-v2", "reader").len(), 1);

    // Deleting a manifest stops its pod and releases its snapshot.
    let before = active_snapshots(&ctd);
    kubelet.remove_pod("toy-v1");
    kubelet.wait_gone("toy-v1", Duration::from_secs(60));
    assert!(kubelet.containers("toy-v1", "reader").is_empty());
    let after = active_snapshots(&ctd);
    assert!(
        after < before,
        "the stopped pod's snapshots remain: {before} active before, {after} after"
    );
    // The other pod is untouched and its volume still reads.
    assert_eq!(kubelet.containers("toy-v2", "reader").len(), 1);
    drop(kubelet);
    drop(snap);
}
