//! Current Kubernetes nodes: containerd 2.x (built by `scripts/deps.sh`;
//! `SEALVOL_CONTAINERD2_BIN` names another release) with its CRI plugin,
//! runc 1.5 and the sealvol snapshotter as a proxy plugin, driven over
//! CRI's gRPC API as a kubelet drives it: pods (host network, the busybox
//! image the tests build as their sandbox image), image-volume mounts of
//! sealed versions, runtime classes, user namespaces; and `ctr`'s two pull
//! paths. Each registry sits behind a proxy counting requests, so a test
//! sees that no chunk is fetched before a container reads.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sealvol_tests::node::{
    container_stdout, import_busybox, mounts_under, plain_http_host, pod_config,
    version_mounts_under, volume_container, Cri, NodeSetup, Snapshotter,
};
use sealvol_tests::{noise, s, Containerd, FlipProxy};
use sha2::{Digest, Sha256};

/// The files of the test volume, by path, and their bytes.
fn model(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let files: BTreeMap<String, Vec<u8>> = [
        (
            "config.json",
            b"{\"model_type\": \"sealvol-test\"}\n".to_vec(),
        ),
        ("weights/model-00001.safetensors", noise(5 << 20, 41)),
        ("weights/model-00002.safetensors", noise(3 << 20, 42)),
        ("tokenizer/vocab.txt", b"hello\nworld\n".to_vec()),
    ]
    .into_iter()
    .map(|(p, b)| (p.to_string(), b))
    .collect();
    for (path, bytes) in &files {
        sealvol_tests::write(&dir.join(path), bytes, 0o644);
    }
    files
}

/// What busybox `sha256sum` prints for `files` under `prefix`.
fn sums(files: &BTreeMap<String, Vec<u8>>, prefix: &str) -> Vec<String> {
    files
        .iter()
        .filter_map(|(path, bytes)| {
            let rel = path.strip_prefix(prefix)?;
            Some(format!("{}  {rel}", hex::encode(Sha256::digest(bytes))))
        })
        .collect()
}

/// A registry holding one pushed version, behind a counting proxy.
struct Published {
    _sb: sealvol_tests::Sandbox,
    _server: Option<sealvol_tests::Server>,
    _docker: Option<sealvol_tests::DockerRegistry>,
    proxy: FlipProxy,
    files: BTreeMap<String, Vec<u8>>,
    /// `sealvol stat --oci-ref` through the proxy: `HOST/REPO@sha256:…`.
    oci_ref: String,
    /// The version's `b3:` digest.
    version: String,
    chunks: Vec<String>,
}

const REPO: &str = "weights/vol";

impl Published {
    /// On `sealvol serve` (`docker` false) or docker-registry 2.8.
    fn new(docker: bool) -> Published {
        let sb = sealvol_tests::Sandbox::new();
        let (server, registry, upstream) = if docker {
            let d = sealvol_tests::DockerRegistry::start();
            let addr = d.addr();
            (None, Some(d), addr)
        } else {
            let srv = sealvol_tests::Server::start(&sb.path().join("registry"));
            let addr = sealvol_tests::host(&srv);
            (Some(srv), None, addr)
        };
        let dir = sb.path().join("model");
        let files = model(&dir);
        let out = sealvol_tests::ok(
            sb.sealvol(
                &upstream,
                &[
                    "push",
                    s(&dir),
                    &format!("bdn:{REPO}:prod"),
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
        let chunks = sealvol_tests::chunk_blobs(&upstream, REPO, "prod")
            .into_iter()
            .map(|(d, _)| d)
            .collect();
        let proxy = FlipProxy::start_counting(&upstream);
        let oci_ref = sealvol_tests::ok(
            sb.sealvol(
                &proxy.addr(),
                &["stat", &format!("bdn:{REPO}:prod"), "--oci-ref"],
            ),
            "stat --oci-ref",
        )
        .trim()
        .to_string();
        Published {
            _sb: sb,
            _server: server,
            _docker: registry,
            proxy,
            files,
            oci_ref,
            version,
            chunks,
        }
    }

    /// The image reference a pod names: `PROXY/REPO:prod`.
    fn image(&self) -> String {
        format!("{}/{REPO}:prod", self.proxy.addr())
    }

    /// GETs of chunk blobs through the proxy so far.
    fn chunk_gets(&self) -> usize {
        self.proxy
            .requests()
            .iter()
            .filter(|r| r.starts_with("GET ") && self.chunks.iter().any(|c| r.contains(c)))
            .count()
    }
}

/// A node: containerd 2.x set up as `setup` says, the sealvol snapshotter,
/// the busybox image imported, and a CRI client.
struct Node {
    cri: Cri,
    /// Dropped before containerd: the snapshotter first unmounts.
    snap: Snapshotter,
    ctd: Containerd,
    dir: tempfile::TempDir,
}

impl Node {
    fn start(setup: &NodeSetup, registry: &str) -> Node {
        Node::start_with(setup, registry, "")
    }

    /// With `snapshotter_toml` added to the snapshotter's config.
    fn start_with(setup: &NodeSetup, registry: &str, snapshotter_toml: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let hosts = dir.path().join("certs.d");
        plain_http_host(&hosts, registry);
        let socket = dir.path().join("snapshotter.sock");
        let ctd = Containerd::start_v2(&setup.config(&socket, &hosts)).in_namespace("k8s.io");
        let snap = Snapshotter::start_with(
            dir.path(),
            &format!(
                "containerd_address = {:?}\n{snapshotter_toml}",
                s(&ctd.address())
            ),
        );
        import_busybox(&ctd, setup.default_snapshotter, &[]);
        let cri = Cri::connect(&ctd);
        Node {
            cri,
            snap,
            ctd,
            dir,
        }
    }

    fn logs(&self, pod: &str) -> PathBuf {
        self.dir.path().join("logs").join(pod)
    }

    /// The containerd log, for failure messages.
    fn log(&self) -> String {
        self.ctd.log()
    }

    /// Runs a pod (handler `handler`, `userns` as in [`pod_config`]) whose
    /// one container runs `script` with the image volume `image_ref` at
    /// /mnt/weights (from `sub_path` of it), waits for it to exit, and
    /// answers its stdout and exit code; the pod is removed again.
    fn run_with_volume(
        &mut self,
        name: &str,
        handler: &str,
        userns: Option<(u32, u32, u32)>,
        image_ref: &str,
        sub_path: &str,
        script: &str,
    ) -> (Vec<String>, i32) {
        let logs = self.logs(name);
        let config = pod_config(name, &logs, userns);
        let pod = self
            .cri
            .run_pod(config.clone(), handler)
            .unwrap_or_else(|e| panic!("RunPodSandbox: {e:?}\ncontainerd's log:\n{}", self.log()));
        // As a kubelet mounts `volumes[].image`: the reference is what
        // PullImage answered, and a user-namespaced pod's mappings come
        // with every mount.
        let container = volume_container(name, script, image_ref, sub_path, userns);
        let id = self
            .cri
            .create_container(&pod, container, config)
            .unwrap_or_else(|e| {
                panic!("CreateContainer: {e:?}\ncontainerd's log:\n{}", self.log())
            });
        self.cri
            .start_container(&id)
            .unwrap_or_else(|e| panic!("StartContainer: {e:?}\ncontainerd's log:\n{}", self.log()));
        let status = self.cri.wait_exited(&id, Duration::from_secs(60));
        let out = container_stdout(&logs.join(format!("{name}.log")));
        self.cri.remove_container(&id);
        self.cri.remove_pod(&pod);
        (out, status.exit_code)
    }

    /// The version mounts the snapshotter serves (either engine).
    fn version_mounts(&self) -> Vec<String> {
        version_mounts_under(&self.snap.root)
    }
}

/// Pulls `p`'s version as a kubelet does for an image volume, checks what
/// CRI answers (KEP-5365: the digest a kubelet reports) and that the pull
/// fetched no chunk; answers the image ref.
fn pull_volume(node: &mut Node, p: &Published, handler: &str) -> String {
    let image = p.image();
    let image_ref = node.cri.pull(&image, handler, None).unwrap_or_else(|e| {
        panic!(
            "PullImage {image}: {e:?}\ncontainerd's log:\n{}",
            node.log()
        )
    });
    assert_eq!(
        p.chunk_gets(),
        0,
        "the pull fetched chunks: {:?}",
        p.proxy.requests()
    );
    // image_ref is the image ID (CRI 1.36: the same as Image.id); the
    // version's OCI name by digest is among its repo digests, exactly as
    // `sealvol stat --oci-ref` prints it.
    let status = node
        .cri
        .image_status(&image_ref)
        .unwrap_or_else(|| panic!("ImageStatus {image_ref}: no such image"));
    assert_eq!(status.id, image_ref, "{status:?}");
    assert!(image_ref.starts_with("sha256:"), "{image_ref}");
    assert_eq!(
        status.repo_digests,
        std::slice::from_ref(&p.oci_ref),
        "{status:?}"
    );
    assert_eq!(status.repo_tags, [image], "{status:?}");
    image_ref
}

/// The files under `prefix` as the container sees them from
/// /mnt/weights: `sha256sum` of each.
fn sum_script(files: &BTreeMap<String, Vec<u8>>, prefix: &str) -> String {
    let names: Vec<&str> = files
        .keys()
        .filter_map(|p| p.strip_prefix(prefix))
        .collect();
    format!("cd /mnt/weights && sha256sum {}", names.join(" "))
}

/// The image volume end to end on a node that makes sealvol every pod's
/// snapshotter, pulling through the transfer service (containerd 2.x's
/// default) with `enable_remote_snapshot_annotations`: `PullImage` mounts
/// the version from the view layer's labels without fetching a chunk; a
/// container mounting it (and one mounting its `weights` folder as
/// `image_sub_path`) reads every file with the source's sha256; reading
/// fetched chunks; removing the pods leaves no mount, and removing the
/// image unmounts the version.
#[test]
fn an_image_volume_reads_the_version_lazily_through_the_transfer_service() {
    let p = Published::new(false);
    let mut node = Node::start(&NodeSetup::SEALVOL_DEFAULT, &p.proxy.addr());
    let image_ref = pull_volume(&mut node, &p, "");
    assert_eq!(
        node.version_mounts().len(),
        1,
        "{:?}",
        node.version_mounts()
    );

    let (out, code) =
        node.run_with_volume("whole", "", None, &image_ref, "", &sum_script(&p.files, ""));
    assert_eq!((out, code), (sums(&p.files, ""), 0));
    assert!(p.chunk_gets() > 0, "the container's reads fetched no chunk");

    let (out, code) = node.run_with_volume(
        "sub",
        "",
        None,
        &image_ref,
        "weights",
        &sum_script(&p.files, "weights/"),
    );
    assert_eq!((out, code), (sums(&p.files, "weights/"), 0));

    let left = mounts_under(node.ctd.dir());
    assert!(left.is_empty(), "the pods left mounts: {left:?}");
    node.cri.remove_image(&image_ref);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !node.version_mounts().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        node.version_mounts().is_empty(),
        "the version is still mounted after RemoveImage: {:?}",
        node.version_mounts()
    );
}

/// CRI's local pull (`client.Pull` with unpack, which containerd 2.x takes
/// when `disable_snapshot_annotations = false`) from docker-registry 2.8:
/// the same image volume, the same bytes, no chunk fetched by the pull.
#[test]
fn an_image_volume_from_docker_registry_through_the_local_pull() {
    let p = Published::new(true);
    let setup = NodeSetup {
        local_pull: true,
        ..NodeSetup::SEALVOL_DEFAULT
    };
    let mut node = Node::start(&setup, &p.proxy.addr());
    let image_ref = pull_volume(&mut node, &p, "");
    assert!(
        node.log().contains("Falling back to local image pull"),
        "containerd did not take the local pull"
    );
    let (out, code) =
        node.run_with_volume("local", "", None, &image_ref, "", &sum_script(&p.files, ""));
    assert_eq!((out, code), (sums(&p.files, ""), 0));
    assert!(p.chunk_gets() > 0, "the container's reads fetched no chunk");
}

/// A RuntimeClass of its own: the node keeps overlayfs for ordinary pods
/// and gives the runtime handler `sealvol` the sealvol snapshotter. An
/// ordinary pod's container runs from overlayfs (sealvol holds none of its
/// snapshots), and an image volume there is the view layer unpacked (the
/// pointer file); the version, pulled as a kubelet without
/// RuntimeClassInImageCriAPI pulls it (into the default snapshotter), is
/// unpacked into sealvol's when the `sealvol` pod mounts it, recognized by
/// its view layer and mounted lazily; the container reads the source's
/// bytes.
#[test]
fn a_runtime_class_of_its_own_mounts_image_volumes_with_sealvol() {
    let p = Published::new(false);
    let setup = NodeSetup {
        default_snapshotter: "overlayfs",
        sealvol_handler: true,
        local_pull: false,
    };
    let mut node = Node::start(&setup, &p.proxy.addr());
    let image_ref = pull_volume(&mut node, &p, "");
    assert!(
        node.version_mounts().is_empty(),
        "{:?}",
        node.version_mounts()
    );

    // An ordinary pod: overlayfs, which unpacks the view layer as it is,
    // so the volume holds only the pointer to the version (SPEC.md §5.1).
    let (out, code) = node.run_with_volume(
        "ordinary",
        "",
        None,
        &image_ref,
        "",
        "ls -A /mnt/weights && cat /mnt/weights/.sealvol/version.json",
    );
    assert_eq!(code, 0, "{out:?}");
    assert_eq!(out[0], ".sealvol", "{out:?}");
    assert!(out[1].contains(&p.version), "{out:?}");
    let sealvol_snapshots = node
        .ctd
        .ctr(&["snapshots", "--snapshotter", "sealvol", "ls"]);
    let listed = String::from_utf8_lossy(&sealvol_snapshots.stdout).to_string();
    assert_eq!(
        listed.lines().count(),
        1,
        "sealvol holds snapshots of an ordinary pod: {listed}"
    );
    assert!(
        node.version_mounts().is_empty(),
        "{:?}",
        node.version_mounts()
    );

    let before = p.chunk_gets();
    let (out, code) = node.run_with_volume(
        "sealvol",
        "sealvol",
        None,
        &image_ref,
        "",
        &sum_script(&p.files, ""),
    );
    assert_eq!((out, code), (sums(&p.files, ""), 0));
    assert_eq!(
        node.version_mounts().len(),
        1,
        "{:?}",
        node.version_mounts()
    );
    // The overlayfs pod read its unpacked copy of the view layer only;
    // every chunk came through the sealvol pod's lazy mount.
    assert_eq!(before, 0);
    assert!(p.chunk_gets() > 0);
}

/// User namespaces (`hostUsers: false`): the proxy plugin declares
/// `remap-ids`, so containerd hands the id mapping to the snapshotter
/// instead of copying and chowning. In a pod whose root is host uid/gid
/// 1 000 000, the version's files are owned by the pod's root (0 inside,
/// 1 000 000 on the host: the FUSE mount for the pod presents them so),
/// and the container reads the source's bytes; the ordinary busybox
/// image's files are owned by the pod's root too.
#[test]
fn a_user_namespaced_pod_reads_the_version_owned_by_its_root() {
    let p = Published::new(false);
    let mut node = Node::start(&NodeSetup::SEALVOL_DEFAULT, &p.proxy.addr());
    let image_ref = pull_volume(&mut node, &p, "");
    const HOST: u32 = 1_000_000;
    let script = format!(
        "stat -c '%u:%g %n' /mnt/weights/config.json /bin/busybox / && {}",
        sum_script(&p.files, "")
    );
    let (out, code) = node.run_with_volume(
        "userns",
        "",
        Some((HOST, HOST, 65536)),
        &image_ref,
        "",
        &script,
    );
    let mut want = vec![
        "0:0 /mnt/weights/config.json".to_string(),
        "0:0 /bin/busybox".to_string(),
        "0:0 /".to_string(),
    ];
    want.extend(sums(&p.files, ""));
    assert_eq!((out, code), (want, 0), "containerd's log:\n{}", node.log());
    assert!(p.chunk_gets() > 0);
}

/// `ctr image pull` on containerd 2.x: through the transfer service (its
/// default), which passes the view layer's annotations to the proxy
/// plugin, the version is mounted from the labels; with `--local`
/// (`client.Pull`, no annotations) the layer is unpacked and recognized
/// when committed, as on containerd 1.6. Neither fetches a chunk.
#[test]
fn ctr_pulls_both_paths_of_containerd_2() {
    let p = Published::new(false);
    // CRI's default stays overlayfs, so sealvol holds the version alone.
    let setup = NodeSetup {
        default_snapshotter: "overlayfs",
        ..NodeSetup::SEALVOL_DEFAULT
    };
    for local in [false, true] {
        let node = Node::start(&setup, &p.proxy.addr());
        let hosts = node.dir.path().join("certs.d");
        let mut args = vec![
            "images",
            "pull",
            "--snapshotter",
            "sealvol",
            "--hosts-dir",
            s(&hosts),
        ];
        if local {
            args.push("--local");
        }
        let image = p.image();
        args.push(&image);
        let out = node.ctd.ctr(&args);
        assert!(
            out.status.success(),
            "ctr {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stderr),
            node.log()
        );
        assert_eq!(p.chunk_gets(), 0, "local={local}: {:?}", p.proxy.requests());
        assert_eq!(
            node.version_mounts().len(),
            1,
            "local={local}: {:?}",
            node.version_mounts()
        );
        let listed = node
            .ctd
            .ctr(&["snapshots", "--snapshotter", "sealvol", "ls"]);
        let listed = String::from_utf8_lossy(&listed.stdout).to_string();
        let rows: Vec<&str> = listed.lines().skip(1).collect();
        assert_eq!(rows.len(), 1, "{listed}");
        let key = rows[0].split_whitespace().next().unwrap().to_string();
        let info = node
            .ctd
            .ctr(&["snapshots", "--snapshotter", "sealvol", "info", &key]);
        let info: serde_json::Value = serde_json::from_slice(&info.stdout).unwrap();
        let labelled = info["Labels"]["containerd.io/snapshot/sealvol.version"] == p.version;
        // The transfer service passes the labels; the local pull does not.
        assert_eq!(labelled, !local, "local={local}: {info}");
    }
}

/// `[signatures]` on a node requiring signatures, with a key trusted for
/// `weights/**`: the version signed with `sealvol sign` is pulled and read
/// as an image volume; an unsigned version of the same repository fails
/// `PullImage` at the snapshotter's Prepare, before anything is mounted,
/// with the one line that says why; so does a version signed with that
/// key of a repository no entry names (`required = true`).
#[test]
fn signatures_required_mount_the_signed_version_and_refuse_an_unsigned_one() {
    let p = Published::new(false);
    let keys = p._sb.path().join("keys");
    std::fs::create_dir_all(&keys).unwrap();
    let (key, public) = sealvol_tests::ec_key(&keys, "ec");
    let registry = p.proxy.addr();
    sealvol_tests::ok(
        p._sb.sealvol(
            &registry,
            &["sign", &format!("bdn:{REPO}:prod"), "--key", s(&key)],
        ),
        "sign",
    );
    // Another version of the same repository, never signed.
    let other = p._sb.path().join("unsigned");
    sealvol_tests::write(&other.join("config.json"), b"{\"unsigned\": true}\n", 0o644);
    sealvol_tests::ok(
        p._sb.sealvol(
            &registry,
            &["push", s(&other), &format!("bdn:{REPO}:unsigned")],
        ),
        "push",
    );
    // A signed version of a repository no trust entry matches.
    sealvol_tests::ok(
        p._sb
            .sealvol(&registry, &["push", s(&other), "bdn:other/vol:prod"]),
        "push",
    );
    sealvol_tests::ok(
        p._sb
            .sealvol(&registry, &["sign", "bdn:other/vol:prod", "--key", s(&key)]),
        "sign",
    );

    let policy = format!(
        "[signatures]\nrequired = true\n[[signatures.trust]]\n\
         repositories = [\"weights/**\"]\nkeys = [{:?}]\n",
        s(&public)
    );
    let mut node = Node::start_with(&NodeSetup::SEALVOL_DEFAULT, &registry, &policy);

    let image_ref = pull_volume(&mut node, &p, "");
    assert_eq!(
        node.version_mounts().len(),
        1,
        "{:?}",
        node.version_mounts()
    );

    let unsigned = format!("{registry}/{REPO}:unsigned");
    let e = node
        .cri
        .pull(&unsigned, "", None)
        .expect_err("PullImage of an unsigned version succeeded");
    eprintln!("PullImage {unsigned}: {:?}: {}", e.code(), e.message());
    let why = format!("{registry}/{REPO}@b3:",);
    assert!(
        e.message().contains(&why)
            && e.message()
                .contains(" is not signed (no signature referrers); sign it with `sealvol sign`")
            && !e.message().contains('\n'),
        "PullImage {unsigned}: {e:?}\ncontainerd's log:\n{}",
        node.log()
    );
    assert!(node.cri.image_status(&unsigned).is_none());

    let unmatched = format!("{registry}/other/vol:prod");
    let e = node
        .cri
        .pull(&unmatched, "", None)
        .expect_err("PullImage of a version no key is trusted for succeeded");
    eprintln!("PullImage {unmatched}: {:?}: {}", e.code(), e.message());
    assert!(
        e.message().contains(&format!("{registry}/other/vol@b3:"))
            && e.message().contains(
                " is refused: no trusted key for repository other/vol in snapshotter.toml \
                 [signatures] (required = true)"
            )
            && !e.message().contains('\n'),
        "PullImage {unmatched}: {e:?}\ncontainerd's log:\n{}",
        node.log()
    );
    assert_eq!(
        node.version_mounts().len(),
        1,
        "{:?}",
        node.version_mounts()
    );

    let (out, code) = node.run_with_volume(
        "signed",
        "",
        None,
        &image_ref,
        "",
        &sum_script(&p.files, ""),
    );
    assert_eq!((out, code), (sums(&p.files, ""), 0));
}
