//! `sealvol snapshotter` as containerd's proxy snapshotter, end to end with
//! Debian's containerd 1.6 and `ctr`: an ordinary image (an OCI layout of
//! two layers, the second changing, adding and deleting files) imports,
//! unpacks through Prepare/Commit, mounts as an overlay of its layers with
//! the second layer's changes, is listed, and goes with `images rm --sync`;
//! the snapshots survive a restart of the daemon. A sealed version pulled
//! with `ctr images pull` (no labels) or prepared with CRI's labels is
//! mounted lazily in place of its view layer.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use sealvol_tests::node::{channel, reached, version_mounts_under, Snapshotter};
use sealvol_tests::{noise, s, Containerd};
use serde_json::json;
use sha2::{Digest, Sha256};

const IMAGE: &str = "docker.io/library/sealvol-plain:1";

fn sha(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// An uncompressed layer tar of `entries` (path, bytes, mode); a path
/// whose bytes are `None` is an OCI whiteout.
fn layer(entries: &[(&str, Option<&[u8]>, u32)]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    for (path, bytes, mode) in entries {
        let (name, data): (String, &[u8]) = match bytes {
            Some(d) => (path.to_string(), d),
            None => {
                let p = Path::new(path);
                let wh = format!(".wh.{}", p.file_name().unwrap().to_str().unwrap());
                let full = match p.parent().filter(|d| !d.as_os_str().is_empty()) {
                    Some(d) => format!("{}/{wh}", d.display()),
                    None => wh,
                };
                (full, &[])
            }
        };
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(*mode);
        h.set_mtime(1_700_000_000);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, &name, data).unwrap();
    }
    b.into_inner().unwrap()
}

/// An OCI layout archive of one linux/amd64 image named [`IMAGE`].
fn oci_archive(layers: &[Vec<u8>]) -> Vec<u8> {
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    let diff_ids: Vec<String> = layers.iter().map(|l| sha(l)).collect();
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "rootfs": {"type": "layers", "diff_ids": diff_ids},
        "config": {}
    }))
    .unwrap();
    let layer_descs: Vec<_> = layers
        .iter()
        .map(|l| {
            json!({"mediaType": "application/vnd.oci.image.layer.v1.tar",
                   "digest": sha(l), "size": l.len()})
        })
        .collect();
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": sha(&config), "size": config.len()},
        "layers": layer_descs,
    }))
    .unwrap();
    let index = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": sha(&manifest), "size": manifest.len(),
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": IMAGE,
                            "org.opencontainers.image.ref.name": "1"}
        }]
    }))
    .unwrap();
    blobs.push((sha(&config), config));
    blobs.push((sha(&manifest), manifest));
    for l in layers {
        blobs.push((sha(l), l.clone()));
    }
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_entry_type(tar::EntryType::Regular);
        b.append_data(&mut h, name, data).unwrap();
    };
    add("oci-layout", br#"{"imageLayoutVersion":"1.0.0"}"#);
    add("index.json", &index);
    for (d, bytes) in &blobs {
        add(&format!("blobs/sha256/{}", &d["sha256:".len()..]), bytes);
    }
    b.into_inner().unwrap()
}

fn proxy_config(socket: &Path) -> String {
    format!(
        "[proxy_plugins]\n  [proxy_plugins.sealvol]\n    type = \"snapshot\"\n    address = {:?}\n",
        s(socket)
    )
}

fn ctr_ok(c: &Containerd, args: &[&str]) -> String {
    let out = c.ctr(args);
    assert!(
        out.status.success(),
        "ctr {}: {}\ncontainerd's log:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr),
        c.log()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The snapshots `ctr snapshots ls` lists for the sealvol snapshotter.
fn snapshots(c: &Containerd) -> Vec<String> {
    ctr_ok(c, &["snapshots", "--snapshotter", "sealvol", "ls"])
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// The committed snapshot no other is on: an image's top layer.
fn top_snapshot(c: &Containerd) -> String {
    let rows: Vec<Vec<String>> = snapshots(c)
        .iter()
        .map(|l| l.split_whitespace().map(str::to_string).collect())
        .collect();
    let tops: Vec<&String> = rows
        .iter()
        .filter(|r| r.last().map(String::as_str) == Some("Committed"))
        .map(|r| &r[0])
        .filter(|k| !rows.iter().any(|r| r.len() == 3 && &r[1] == *k))
        .collect();
    assert_eq!(tops.len(), 1, "one top snapshot: {rows:?}");
    tops[0].clone()
}

/// A view `key` of the snapshot `parent` mounted at `at`, as `ctr images
/// mount` does. (containerd 1.6's `ctr images mount` reads its
/// `--snapshotter` flag as a global one that does not exist, and so always
/// uses overlayfs: the view is made with `ctr snapshots view` instead.)
fn mount_view(c: &Containerd, key: &str, parent: &str, at: &Path) {
    let out = ctr_ok(
        c,
        &[
            "snapshots",
            "--snapshotter",
            "sealvol",
            "view",
            "--mounts",
            key,
            parent,
        ],
    );
    let mounts: serde_json::Value = serde_json::from_str(&out).unwrap();
    for m in mounts.as_array().unwrap() {
        let options: Vec<&str> = m["Options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o.as_str().unwrap())
            .collect();
        let kind = m["Type"].as_str().unwrap();
        let source = m["Source"].as_str().unwrap();
        let status = Command::new("mount")
            .args(["-t", kind, "-o", &options.join(","), source, s(at)])
            .status()
            .unwrap();
        assert!(status.success(), "mount {m}");
    }
}

/// Undoes [`mount_view`]. The view holds no lease, so containerd's garbage
/// collector may have removed it already.
fn unmount_view(c: &Containerd, key: &str, at: &Path) {
    let status = Command::new("umount").arg(at).status().unwrap();
    assert!(status.success(), "umount {}", at.display());
    let out = c.ctr(&["snapshots", "--snapshotter", "sealvol", "rm", key]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || err.contains("not found"),
        "ctr snapshots rm {key}: {err}"
    );
}

#[test]
fn an_ordinary_image_unpacks_mounts_and_goes() {
    let dir = tempfile::tempdir().unwrap();
    let mut snap = Snapshotter::start(dir.path());
    let ctd = Containerd::start_with(&proxy_config(&snap.socket));

    let data = noise(300_000, 7);
    let first = layer(&[
        ("hello.txt", Some(b"hello from layer 1\n"), 0o644),
        ("bin/run.sh", Some(b"#!/bin/sh\necho hi\n"), 0o755),
        ("nested/data.bin", Some(&data), 0o600),
        ("nested/keep.txt", Some(b"kept"), 0o644),
    ]);
    let second = layer(&[
        ("hello.txt", Some(b"hello from layer 2\n"), 0o644),
        ("extra.txt", Some(b"added"), 0o644),
        ("nested/data.bin", None, 0o644),
    ]);
    let archive = dir.path().join("image.tar");
    std::fs::write(&archive, oci_archive(&[first, second])).unwrap();
    ctr_ok(
        &ctd,
        &["images", "import", "--snapshotter", "sealvol", s(&archive)],
    );
    let listed = snapshots(&ctd);
    assert_eq!(
        listed.len(),
        2,
        "one committed snapshot per layer: {listed:?}"
    );
    assert!(listed.iter().all(|l| l.contains("Committed")), "{listed:?}");

    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    let top = top_snapshot(&ctd);
    mount_view(&ctd, "view-plain", &top, &mnt);
    let read = |p: &str| std::fs::read(mnt.join(p));
    let result = std::panic::catch_unwind(|| {
        assert_eq!(read("hello.txt").unwrap(), b"hello from layer 2\n");
        assert_eq!(read("extra.txt").unwrap(), b"added");
        assert_eq!(read("nested/keep.txt").unwrap(), b"kept");
        assert!(
            !mnt.join("nested/data.bin").exists(),
            "the second layer's whiteout did not hide nested/data.bin"
        );
        let mode = std::fs::metadata(mnt.join("bin/run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);
    });
    unmount_view(&ctd, "view-plain", &mnt);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }

    // A restarted daemon serves the snapshots it had.
    snap.restart(&ctd);
    assert_eq!(
        snapshots(&ctd).len(),
        2,
        "the snapshots did not survive a restart"
    );

    ctr_ok(&ctd, &["images", "rm", "--sync", IMAGE]);
    let left = snapshots(&ctd);
    assert!(
        left.is_empty(),
        "snapshots left after images rm --sync: {left:?}"
    );
    let folders: Vec<_> = std::fs::read_dir(dir.path().join("root/snapshots"))
        .unwrap()
        .collect();
    assert!(folders.is_empty(), "snapshot folders left: {folders:?}");
}

/// A gRPC client of the snapshotter's socket, as containerd's proxy is.
async fn client(
    socket: &Path,
) -> sealvol_snapshotter::containerd::api::containerd::services::snapshots::v1::snapshots_client::SnapshotsClient<
    tonic::transport::Channel,
>{
    sealvol_snapshotter::containerd::api::containerd::services::snapshots::v1::snapshots_client::SnapshotsClient::new(channel(socket).await)
}

/// The view layer's annotations of `repo:tag` on the registry at `addr`.
fn view_layer_annotations(addr: &str, repo: &str, tag: &str) -> serde_json::Value {
    let index = sealvol_tests::manifest_json(addr, repo, tag);
    let view = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["dev.sealvol.role"] == "view")
        .unwrap_or_else(|| panic!("no view manifest: {index}"));
    let m = sealvol_tests::manifest_json(addr, repo, view["digest"].as_str().unwrap());
    m["layers"][0]["annotations"].clone()
}

/// Files under `dir` that are chunks of the cache.
fn cached_chunks(dir: &Path) -> usize {
    let root = dir.join("chunks/sha256");
    std::fs::read_dir(&root)
        .map(|shards| {
            shards
                .flatten()
                .map(|s| std::fs::read_dir(s.path()).map_or(0, |f| f.count()))
                .sum()
        })
        .unwrap_or(0)
}

/// Bytes on disk (allocated blocks) in the fanotify engine's layouts
/// under the cache `dir`: what its mounts filled.
fn filled_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let mut total = 0;
    let mut stack = vec![dir.join("fanotify")];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else if e.path().to_string_lossy().contains("/tree/") {
                total += meta.blocks() * 512;
            }
        }
    }
    total
}

fn mounted(path: &Path) -> bool {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(4) == Some(s(path)))
}

/// The labelled path (CRI, `client.Pull` with unpack): a `Prepare` that
/// carries the view layer's `containerd.io/snapshot/` annotations, the
/// chain ID and CRI's image reference mounts the version lazily, commits
/// it under the chain ID and answers `ALREADY_EXISTS`; nothing but the
/// tree is fetched until a file is read; a view of it reads the version's
/// bytes; removing it unmounts it.
#[test]
fn a_labelled_prepare_mounts_the_version_lazily() {
    use sealvol_snapshotter::containerd::api::containerd::services::snapshots::v1 as pb;
    let sb = sealvol_tests::Sandbox::new();
    let server = sealvol_tests::Server::start(&sb.path().join("registry"));
    let reg = sealvol_tests::host(&server);
    let model = sb.path().join("model");
    let weights = noise(9 << 20, 3);
    sealvol_tests::write(&model.join("config.json"), b"{\"layers\": 2}", 0o644);
    sealvol_tests::write(&model.join("weights/model.bin"), &weights, 0o644);
    let out = sealvol_tests::ok(
        sb.sealvol(
            &reg,
            &[
                "push",
                s(&model),
                "bdn:weights/toy:prod",
                "--output",
                "json",
            ],
        ),
        "push",
    );
    let pushed: serde_json::Value = serde_json::from_str(&out).unwrap();
    let version = pushed["digest"].as_str().unwrap().to_string();

    // What a current writer puts on the view layer (SPEC.md §5.4).
    let ann = view_layer_annotations(&reg, "weights/toy", "prod");
    assert_eq!(
        ann["containerd.io/snapshot/sealvol.version"],
        version.as_str()
    );
    assert_eq!(
        ann["containerd.io/snapshot/sealvol.tree"],
        ann["dev.sealvol.tree"]
    );

    let dir = tempfile::tempdir().unwrap();
    let snap = Snapshotter::start(dir.path());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut c = rt.block_on(client(&snap.socket));
    let mut labels = std::collections::HashMap::new();
    for key in [
        "containerd.io/snapshot/sealvol.version",
        "containerd.io/snapshot/sealvol.tree",
    ] {
        labels.insert(key.to_string(), ann[key].as_str().unwrap().to_string());
    }
    labels.insert("containerd.io/snapshot.ref".into(), "sha256:chain1".into());
    labels.insert(
        "containerd.io/snapshot/cri.image-ref".into(),
        format!("{reg}/weights/toy:prod"),
    );
    let prepared = rt.block_on(c.prepare(pb::PrepareSnapshotRequest {
        snapshotter: "sealvol".into(),
        key: "extract-1 sha256:chain1".into(),
        parent: String::new(),
        labels,
    }));
    let status = prepared.expect_err("a version's layer is not unpacked");
    assert_eq!(status.code(), tonic::Code::AlreadyExists, "{status:?}");
    let cache = dir.path().join("root/cache");
    assert_eq!(
        cached_chunks(&cache),
        0,
        "chunks were fetched before any read"
    );

    let info = rt
        .block_on(c.stat(pb::StatSnapshotRequest {
            snapshotter: "sealvol".into(),
            key: "sha256:chain1".into(),
        }))
        .unwrap()
        .into_inner()
        .info
        .unwrap();
    assert_eq!(info.kind, pb::Kind::Committed as i32);

    let view = rt
        .block_on(c.view(pb::ViewSnapshotRequest {
            snapshotter: "sealvol".into(),
            key: "view-1".into(),
            parent: "sha256:chain1".into(),
            labels: Default::default(),
        }))
        .unwrap()
        .into_inner();
    let source = PathBuf::from(&view.mounts[0].source);
    assert_eq!(view.mounts[0].r#type, "bind", "{view:?}");
    assert!(mounted(&source), "{} is not a mount", source.display());
    assert_eq!(
        std::fs::read(source.join("config.json")).unwrap(),
        b"{\"layers\": 2}"
    );
    assert!(
        std::fs::read(source.join("weights/model.bin")).unwrap() == weights,
        "the mounted version's bytes differ"
    );
    assert!(
        cached_chunks(&cache) > 0 || filled_bytes(&cache) > 0,
        "reading fetched nothing into the cache"
    );

    for key in ["view-1", "sha256:chain1"] {
        rt.block_on(c.remove(pb::RemoveSnapshotRequest {
            snapshotter: "sealvol".into(),
            key: key.into(),
        }))
        .unwrap_or_else(|e| panic!("remove {key}: {e:?}"));
    }
    assert!(
        !mounted(&source),
        "the version is still mounted after Remove"
    );
    assert!(!source.exists());
}

/// The chunk digests of `repo:tag` on the registry at `addr`.
fn chunk_digests(addr: &str, repo: &str, tag: &str) -> Vec<String> {
    sealvol_tests::chunk_blobs(addr, repo, tag)
        .into_iter()
        .map(|(d, _)| d)
        .collect()
}

/// containerd 1.6's other pull path: `ctr images pull` fetches the view
/// image and unpacks its one layer without passing annotations; the
/// snapshotter recognizes the pointer file when the layer is committed,
/// finds the repository in containerd's image record and mounts the
/// version in its place. From `sealvol serve` and from docker-registry 2.8,
/// each behind a proxy counting requests: no chunk is fetched by the pull
/// or the mount, the mounted image holds the pushed files byte for byte,
/// reading fetches chunks, and `images rm --sync` unmounts it.
#[test]
fn ctr_images_pull_mounts_the_version_lazily() {
    let sb = sealvol_tests::Sandbox::new();
    let server = sealvol_tests::Server::start(&sb.path().join("registry"));
    let docker = sealvol_tests::DockerRegistry::start();
    let dir = tempfile::tempdir().unwrap();
    let ctd = Containerd::start_with(&proxy_config(&dir.path().join("snapshotter.sock")));
    let snap = Snapshotter::start_with(
        dir.path(),
        &format!("containerd_address = {:?}\n", s(&ctd.address())),
    );
    let peers = [
        ("sealvol serve", sealvol_tests::host(&server)),
        ("docker-registry 2.8", docker.addr()),
    ];
    for (i, (peer, upstream)) in peers.into_iter().enumerate() {
        // Other bytes for each peer: the node's chunk cache outlives images.
        let model = sb.path().join(format!("model-{i}"));
        sealvol_tests::write(&model.join("config.json"), b"{\"layers\": 2}", 0o644);
        sealvol_tests::write(
            &model.join("weights/model.bin"),
            &noise(9 << 20, 5 + i as u64),
            0o644,
        );
        sealvol_tests::write(&model.join("tokenizer/vocab.txt"), b"a\nb\nc\n", 0o600);
        sealvol_tests::ok(
            sb.sealvol(&upstream, &["push", s(&model), "bdn:weights/toy:prod"]),
            "push",
        );
        let chunks = chunk_digests(&upstream, "weights/toy", "prod");
        assert!(chunks.len() > 1, "{peer}: {chunks:?}");
        let proxy = sealvol_tests::FlipProxy::start_counting(&upstream);
        let chunk_gets = || {
            proxy
                .requests()
                .iter()
                .filter(|r| r.starts_with("GET ") && chunks.iter().any(|c| r.contains(c)))
                .count()
        };
        // The first peer by tag; the second by the index digest `sealvol
        // stat --oci-ref` prints, as a Kubernetes image volume pins it.
        let image = if i == 0 {
            format!("{}/weights/toy:prod", proxy.addr())
        } else {
            let oci = sealvol_tests::ok(
                sb.sealvol(&upstream, &["stat", "bdn:weights/toy:prod", "--oci-ref"]),
                "stat --oci-ref",
            );
            let oci = oci.trim();
            assert!(
                oci.starts_with(&format!("{upstream}/weights/toy@sha256:")),
                "{oci}"
            );
            oci.replacen(&upstream, &proxy.addr(), 1)
        };
        ctr_ok(
            &ctd,
            &[
                "images",
                "pull",
                "--snapshotter",
                "sealvol",
                "--plain-http",
                "--platform",
                "linux/amd64",
                &image,
            ],
        );
        let mnt = dir.path().join("mnt");
        std::fs::create_dir_all(&mnt).unwrap();
        let top = top_snapshot(&ctd);
        mount_view(&ctd, "view-toy", &top, &mnt);
        let fetched_before_reading = chunk_gets();
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            assert_eq!(
                fetched_before_reading,
                0,
                "{peer}: the pull or the mount fetched chunks: {:?}",
                proxy.requests()
            );
            sealvol_tests::assert_same_tree(&model, &mnt);
            assert!(chunk_gets() > 0, "{peer}: reading fetched no chunk");
        }));
        unmount_view(&ctd, "view-toy", &mnt);
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
        ctr_ok(&ctd, &["images", "rm", "--sync", &image]);
        let left = snapshots(&ctd);
        assert!(left.is_empty(), "{peer}: snapshots left: {left:?}");
        let mounts = version_mounts_under(dir.path());
        assert!(mounts.is_empty(), "{peer}: FUSE mounts left: {mounts:?}");
    }
    drop(snap);
}

/// The committed snapshots `ctr snapshots ls` lists.
fn committed(c: &Containerd) -> Vec<String> {
    snapshots(c)
        .iter()
        .filter(|l| l.split_whitespace().last() == Some("Committed"))
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect()
}

fn pull(c: &Containerd, image: &str) {
    ctr_ok(
        c,
        &[
            "images",
            "pull",
            "--snapshotter",
            "sealvol",
            "--plain-http",
            "--platform",
            "linux/amd64",
            image,
        ],
    );
}

/// The bytes of the files under `dir`.
fn bytes_under(dir: &Path) -> u64 {
    let mut total = 0;
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let meta = e.metadata().unwrap();
            if meta.is_dir() {
                stack.push(e.path());
            } else {
                total += meta.len();
            }
        }
    }
    total
}

/// What a node needs of the snapshotter: a reader holding a file of a
/// mounted version open keeps reading the right bytes while the gRPC
/// daemon is SIGKILLed and restarted (the fuse manager holds the FUSE
/// session), and the restarted daemon lists the same snapshots; `/metrics`
/// reports the mount and what it fetched; the one chunk cache stays within
/// `cache_size`; a chunk the registry corrupts gives `EIO`, never wrong
/// bytes.
#[test]
fn mounted_versions_outlive_the_daemon_and_never_serve_wrong_bytes() {
    let sb = sealvol_tests::Sandbox::new();
    let server = sealvol_tests::Server::start(&sb.path().join("registry"));
    let upstream = sealvol_tests::host(&server);
    let want = noise(12 << 20, 11);
    let good = sb.path().join("good");
    sealvol_tests::write(&good.join("weights.bin"), &want, 0o644);
    let bad = sb.path().join("bad");
    sealvol_tests::write(&bad.join("weights.bin"), &noise(6 << 20, 12), 0o644);
    for (dir, reference) in [(&good, "bdn:weights/good:1"), (&bad, "bdn:weights/bad:1")] {
        sealvol_tests::ok(sb.sealvol(&upstream, &["push", s(dir), reference]), "push");
    }
    let bad_chunks = chunk_digests(&upstream, "weights/bad", "1");
    let flipping = sealvol_tests::FlipProxy::start_only(&upstream, &bad_chunks[1..2]);
    let metrics_port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let cache_size: u64 = 8 << 20;

    let dir = tempfile::tempdir().unwrap();
    let ctd = Containerd::start_with(&proxy_config(&dir.path().join("snapshotter.sock")));
    let mut snap = Snapshotter::start_with(
        dir.path(),
        &format!(
            "containerd_address = {:?}\ncache_size = {cache_size}\nmetrics_address = \"127.0.0.1:{metrics_port}\"\n",
            s(&ctd.address())
        ),
    );
    pull(&ctd, &format!("{upstream}/weights/good:1"));
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    mount_view(&ctd, "view-good", &top_snapshot(&ctd), &mnt);
    // The view holds no lease: containerd's collector may take it any
    // time, so the committed snapshots are what is compared.
    let before = committed(&ctd);
    assert_eq!(before.len(), 1, "{before:?}");

    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        use std::io::Read as _;
        let mut f = std::fs::File::open(mnt.join("weights.bin")).unwrap();
        let mut got = vec![0; 1 << 20];
        f.read_exact(&mut got).unwrap();
        snap.kill_daemon();
        // No daemon: the open descriptor still reads, through the manager.
        let mut more = vec![0; 4 << 20];
        f.read_exact(&mut more).unwrap();
        got.extend_from_slice(&more);
        snap.restart(&ctd);
        f.read_to_end(&mut got).unwrap();
        assert!(got == want, "the bytes read across the restart differ");
        assert_eq!(
            committed(&ctd),
            before,
            "the restarted daemon lists other snapshots"
        );

        let metrics = reqwest::blocking::get(format!("http://127.0.0.1:{metrics_port}/metrics"))
            .unwrap()
            .text()
            .unwrap();
        let value = |name: &str| -> f64 {
            metrics
                .lines()
                .find_map(|l| l.strip_prefix(&format!("{name} ")))
                .unwrap_or_else(|| panic!("no {name} in /metrics:\n{metrics}"))
                .parse()
                .unwrap()
        };
        assert_eq!(value("sealvol_snapshotter_mounts"), 1.0);
        assert!(value("sealvol_snapshotter_fetched_bytes") >= want.len() as f64 / 2.0);
        assert!(value("sealvol_snapshotter_cache_misses") > 0.0);
        // The fanotify engine's filled files of a mounted version stay
        // while it is mounted (a mapping of them would read holes were
        // they given back); everything else keeps to the bound.
        let layouts = dir.path().join("root/cache/fanotify");
        let (cached, filled) = (
            bytes_under(&dir.path().join("root/cache")),
            bytes_under(&layouts),
        );
        assert!(
            cached - filled <= cache_size + (1 << 20),
            "the cache holds {cached} bytes ({filled} in filled files), over its bound of {cache_size}"
        );
        assert!(
            filled <= want.len() as u64 + (1 << 20),
            "{filled} bytes of filled files for a {}-byte version",
            want.len()
        );
    }));
    unmount_view(&ctd, "view-good", &mnt);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }

    // A chunk the registry serves corrupted: EIO, never its bytes.
    let had = committed(&ctd);
    pull(&ctd, &format!("{}/weights/bad:1", flipping.addr()));
    let new: Vec<String> = committed(&ctd)
        .into_iter()
        .filter(|k| !had.contains(k))
        .collect();
    assert_eq!(new.len(), 1, "{new:?}");
    mount_view(&ctd, "view-bad", &new[0], &mnt);
    let read = std::fs::read(mnt.join("weights.bin"));
    unmount_view(&ctd, "view-bad", &mnt);
    let err = read.expect_err("a corrupt chunk was served");
    assert_eq!(err.raw_os_error(), Some(libc::EIO), "{err}");
    assert!(flipping.flipped() > 0, "the proxy corrupted nothing");
    drop(snap);
    assert!(
        version_mounts_under(dir.path()).is_empty(),
        "the fuse manager left mounts"
    );
}

/// The labelled path through a real CRI: containerd's CRI plugin, set to
/// the sealvol snapshotter with `disable_snapshot_annotations = false`,
/// pulls an image as a kubelet asks (`ImageService/PullImage`); its
/// unpacker passes the view layer's `containerd.io/snapshot/` annotations
/// and CRI's image reference to `Prepare`, the version is mounted from
/// those, and no chunk is fetched by the pull. Then a view of it in the
/// `k8s.io` namespace holds the pushed files.
#[test]
fn cri_pull_image_mounts_the_version_from_its_labels() {
    use sealvol_tests::cri;
    let sb = sealvol_tests::Sandbox::new();
    let server = sealvol_tests::Server::start(&sb.path().join("registry"));
    let upstream = sealvol_tests::host(&server);
    let model = sb.path().join("model");
    sealvol_tests::write(&model.join("config.json"), b"{\"cri\": true}", 0o644);
    sealvol_tests::write(&model.join("weights/model.bin"), &noise(9 << 20, 21), 0o644);
    let out = sealvol_tests::ok(
        sb.sealvol(
            &upstream,
            &[
                "push",
                s(&model),
                "bdn:weights/cri:prod",
                "--output",
                "json",
            ],
        ),
        "push",
    );
    let version = serde_json::from_str::<serde_json::Value>(&out).unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_string();
    let chunks = chunk_digests(&upstream, "weights/cri", "prod");
    let proxy = sealvol_tests::FlipProxy::start_counting(&upstream);
    let chunk_gets = || {
        proxy
            .requests()
            .iter()
            .filter(|r| r.starts_with("GET ") && chunks.iter().any(|c| r.contains(c)))
            .count()
    };

    let dir = tempfile::tempdir().unwrap();
    let cri_config = format!(
        "[plugins.\"io.containerd.grpc.v1.cri\".containerd]\n  snapshotter = \"sealvol\"\n  \
         disable_snapshot_annotations = false\n\
         [plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"{addr}\"]\n  \
         endpoint = [\"http://{addr}\"]\n",
        addr = proxy.addr()
    );
    let ctd = Containerd::start_with(&format!(
        "{}{cri_config}",
        proxy_config(&dir.path().join("snapshotter.sock"))
    ))
    .in_namespace("k8s.io");
    let _snap = Snapshotter::start_with(
        dir.path(),
        &format!("containerd_address = {:?}\n", s(&ctd.address())),
    );
    let image = format!("{}/weights/cri:prod", proxy.addr());
    let rt = tokio::runtime::Runtime::new().unwrap();
    let pulled = rt.block_on(async {
        cri::image_service_client::ImageServiceClient::new(channel(&ctd.address()).await)
            .pull_image(cri::PullImageRequest {
                image: Some(cri::ImageSpec {
                    image: image.clone(),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .await
    });
    let pulled = pulled
        .unwrap_or_else(|e| panic!("CRI PullImage: {e:?}\ncontainerd's log:\n{}", ctd.log()))
        .into_inner();
    assert!(pulled.image_ref.starts_with("sha256:"), "{pulled:?}");
    assert_eq!(
        chunk_gets(),
        0,
        "the pull fetched chunks: {:?}",
        proxy.requests()
    );

    let committed = committed(&ctd);
    assert_eq!(committed.len(), 1, "{committed:?}");
    // containerd keeps the labels the unpacker prepared the layer with:
    // the version came from them, not from an unpacked pointer file.
    let info: serde_json::Value = serde_json::from_str(&ctr_ok(
        &ctd,
        &[
            "snapshots",
            "--snapshotter",
            "sealvol",
            "info",
            &committed[0],
        ],
    ))
    .unwrap();
    assert_eq!(
        info["Labels"]["containerd.io/snapshot/sealvol.version"], version,
        "{info}"
    );

    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    mount_view(&ctd, "view-cri", &committed[0], &mnt);
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        sealvol_tests::assert_same_tree(&model, &mnt);
        assert!(chunk_gets() > 0, "reading fetched no chunk");
    }));
    unmount_view(&ctd, "view-cri", &mnt);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    // CRI records the image under its tag, its digest and its ID.
    let names = ctr_ok(&ctd, &["images", "ls", "--quiet"]);
    let mut rm = vec!["images", "rm", "--sync"];
    rm.extend(names.lines());
    assert!(rm.len() > 3, "{names}");
    ctr_ok(&ctd, &rm);
    let left = snapshots(&ctd);
    assert!(left.is_empty(), "snapshots left: {left:?}");
    assert!(
        version_mounts_under(dir.path()).is_empty(),
        "the version is still mounted"
    );
}

/// Registry credentials come from the node's docker `config.json`, read as
/// the CLI reads it, by the fuse manager that fetches the tree and the
/// chunks; what containerd was given for the pull (`ctr --user`, kubelet
/// pull secrets) never reaches a snapshotter. Without them a pull from a
/// private registry fails with a line naming the registry; with them the
/// view reads the files.
#[test]
fn a_private_registry_is_read_with_the_nodes_credentials() {
    use base64::Engine as _;
    let (user, password) = ("node", "s3cret: pass");
    let registry = sealvol_tests::DockerRegistry::start_with_htpasswd(user, password);
    let host = registry.addr();
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    let config = serde_json::json!({ "auths": { &host: { "auth": auth } } }).to_string();
    let owner = sealvol_tests::Sandbox::new();
    sealvol_tests::write(
        &owner.docker_config().join("config.json"),
        config.as_bytes(),
        0o600,
    );
    let model = owner.path().join("model");
    sealvol_tests::write(&model.join("weights.bin"), &noise(3 << 20, 31), 0o644);
    sealvol_tests::write(&model.join("config.json"), b"{\"private\": true}", 0o644);
    let image = format!("{host}/weights/private:1");
    sealvol_tests::ok(
        owner.sealvol(&sealvol_tests::closed_addr(), &["push", s(&model), &image]),
        "push",
    );

    let dir = tempfile::tempdir().unwrap();
    let ctd = Containerd::start_with(&proxy_config(&dir.path().join("snapshotter.sock")));
    let toml = format!("containerd_address = {:?}\n", s(&ctd.address()));
    let creds = format!("{user}:{password}");
    let pull = [
        "images",
        "pull",
        "--snapshotter",
        "sealvol",
        "--plain-http",
        "--platform",
        "linux/amd64",
        "--user",
        &creds,
        &image,
    ];
    let snap = Snapshotter::start_with(dir.path(), &toml);
    let out = ctd.ctr(&pull);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "a node without credentials mounted it"
    );
    assert!(
        err.contains(&host) && err.contains("sealvol login"),
        "the failure should name the registry and say sealvol login: {err}"
    );
    assert!(committed(&ctd).is_empty(), "{:?}", snapshots(&ctd));
    // The manager keeps the environment it started with: stop both.
    drop(snap);

    let node = dir.path().join("node-docker");
    sealvol_tests::write(&node.join("config.json"), config.as_bytes(), 0o600);
    let _snap = Snapshotter::start_with_credentials(dir.path(), &toml, &node);
    reached(&ctd);
    ctr_ok(&ctd, &pull);
    let mnt = dir.path().join("mnt");
    std::fs::create_dir_all(&mnt).unwrap();
    mount_view(&ctd, "view-private", &top_snapshot(&ctd), &mnt);
    let result = std::panic::catch_unwind(|| sealvol_tests::assert_same_tree(&model, &mnt));
    unmount_view(&ctd, "view-private", &mnt);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    ctr_ok(&ctd, &["images", "rm", "--sync", &image]);
    assert!(snapshots(&ctd).is_empty());
}
