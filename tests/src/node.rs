//! A Kubernetes node's parts, as the containerd tests run them: the
//! sealvol snapshotter with its fuse manager, gRPC over unix sockets, and
//! the FUSE mounts left under a folder.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::{s, Containerd};

/// `sealvol snapshotter` on a socket in `dir`, with its fuse manager;
/// both stopped when dropped.
pub struct Snapshotter {
    pub child: Child,
    /// `DOCKER_CONFIG` for the daemon and the fuse manager it starts: the
    /// node's registry credentials.
    pub docker_config: PathBuf,
    pub dir: PathBuf,
    pub socket: PathBuf,
    pub root: PathBuf,
}

impl Snapshotter {
    pub fn start(dir: &Path) -> Snapshotter {
        Snapshotter::start_with(dir, "")
    }

    /// With `config` as its `snapshotter.toml`, and no registry
    /// credentials.
    pub fn start_with(dir: &Path, config: &str) -> Snapshotter {
        let none = dir.join("no-docker-config");
        std::fs::create_dir_all(&none).unwrap();
        Snapshotter::start_with_credentials(dir, config, &none)
    }

    /// With `config`, and the credentials in `docker_config/config.json`.
    pub fn start_with_credentials(dir: &Path, config: &str, docker_config: &Path) -> Snapshotter {
        // The engine under test (`SEALVOL_TEST_ENGINE`), unless the test
        // names one.
        let config = match config.lines().any(|l| l.trim_start().starts_with("engine")) {
            true => config.to_string(),
            false => format!("engine = \"{}\"\n{config}", crate::test_engine()),
        };
        std::fs::write(dir.join("snapshotter.toml"), config).unwrap();
        Snapshotter {
            child: Snapshotter::spawn(dir, docker_config),
            docker_config: docker_config.to_path_buf(),
            dir: dir.to_path_buf(),
            socket: dir.join("snapshotter.sock"),
            root: dir.join("root"),
        }
    }

    fn spawn(dir: &Path, docker_config: &Path) -> Child {
        let mut child = Command::new(crate::sealvol_bin())
            .env("DOCKER_CONFIG", docker_config)
            .args(["snapshotter", "--config", s(&dir.join("snapshotter.toml"))])
            .args(["--root", s(&dir.join("root"))])
            .args(["--address", s(&dir.join("snapshotter.sock"))])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run sealvol snapshotter");
        let mut line = String::new();
        let _ = BufReader::new(child.stdout.take().unwrap()).read_line(&mut line);
        assert!(
            line.starts_with("sealvol: serving containerd snapshots on"),
            "the snapshotter did not start: {line:?}"
        );
        child
    }

    /// The fuse manager the daemon started, which outlives it.
    pub fn manager_pid(&self) -> Option<i32> {
        std::fs::read_to_string(self.root.join("fuse-manager.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// SIGKILLs the gRPC daemon, leaving the fuse manager.
    pub fn kill_daemon(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts the daemon again with the same configuration, and waits
    /// until containerd, which redials with a backoff of its own, reaches
    /// it.
    pub fn restart(&mut self, ctd: &Containerd) {
        self.kill_daemon();
        self.child = Snapshotter::spawn(&self.dir, &self.docker_config);
        reached(ctd);
    }
}

/// Waits until containerd, which redials a proxy plugin with a backoff of
/// its own, reaches a (re)started snapshotter: a snapshot prepared and
/// removed again (containerd answers `ls` from its own metadata).
pub fn reached(ctd: &Containerd) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let probe = |args: &[&str]| {
        let mut all = vec!["snapshots", "--snapshotter", "sealvol"];
        all.extend_from_slice(args);
        ctd.ctr(&all).status.success()
    };
    while !(probe(&["prepare", "reach-probe"]) && probe(&["rm", "reach-probe"])) {
        assert!(
            std::time::Instant::now() < deadline,
            "containerd did not reach the restarted snapshotter"
        );
        std::thread::sleep(std::time::Duration::from_millis(250));
    }
}

impl Drop for Snapshotter {
    /// Stops the daemon and its fuse manager, which unmounts what it
    /// serves; a mount a killed manager left behind is detached.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if let Some(pid) = self.manager_pid() {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            let proc = PathBuf::from(format!("/proc/{pid}"));
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while proc.exists() && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
        }
        for m in version_mounts_under(&self.root) {
            let _ = Command::new("umount").args(["-l", &m]).status();
        }
    }
}

/// A gRPC channel over the unix socket `socket`.
pub async fn channel(socket: &Path) -> tonic::transport::Channel {
    sealvol_snapshotter::containerd::dial(socket)
        .await
        .expect("connect to the socket")
}

/// The mounts of versions under `dir`, by either engine: FUSE mounts, and
/// the fanotify engine's bind mounts of a layout (`…/fanotify/KEY/tree`).
pub fn version_mounts_under(dir: &Path) -> Vec<String> {
    let fanotify = |l: &str| {
        l.split(' ')
            .nth(3)
            .is_some_and(|root| root.contains("/fanotify/") && root.ends_with("/tree"))
    };
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter(|l| l.contains(" - fuse") || fanotify(l))
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(s(dir)))
        .map(str::to_string)
        .collect()
}

/// The one image the containerd 2.x tests run, built here (nothing can be
/// pulled from the internet): Debian's static busybox with the applets the
/// tests use as links, waiting forever by default, so the same image is
/// the pods' sandbox ("pause") image and, with a command, their workload.
pub const BUSYBOX: &str = "localhost/sealvol-test/busybox:1";

/// An OCI image layout archive (`ctr images import`) of [`BUSYBOX`], plus
/// `extra` files (`path`, bytes, mode; owned by root) in its one layer.
pub fn busybox_archive(extra: &[(&str, &[u8], u32)]) -> Vec<u8> {
    use sha2::Digest as _;
    let busybox = std::fs::read("/bin/busybox")
        .expect("/bin/busybox (Debian's busybox-static, installed by scripts/deps.sh)");
    let mut layer = tar::Builder::new(Vec::new());
    let dir = |path: &str| {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        h.set_cksum();
        (h, path.to_string())
    };
    let (mut h, p) = dir("bin/");
    layer.append_data(&mut h, p, std::io::empty()).unwrap();
    let file = |path: &str, bytes: &[u8], mode: u32| {
        let mut h = tar::Header::new_ustar();
        h.set_mode(mode);
        h.set_size(bytes.len() as u64);
        h.set_cksum();
        (h, path.to_string())
    };
    let (mut h, p) = file("bin/busybox", &busybox, 0o755);
    layer.append_data(&mut h, p, busybox.as_slice()).unwrap();
    for applet in [
        "sh",
        "sleep",
        "sha256sum",
        "cat",
        "ls",
        "stat",
        "id",
        "find",
        "head",
    ] {
        let mut h = tar::Header::new_ustar();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        layer
            .append_link(&mut h, format!("bin/{applet}"), "busybox")
            .unwrap();
    }
    for (path, bytes, mode) in extra {
        let (mut h, p) = file(path, bytes, *mode);
        layer.append_data(&mut h, p, *bytes).unwrap();
    }
    let layer = layer.into_inner().unwrap();
    let sha = |b: &[u8]| format!("sha256:{}", hex::encode(sha2::Sha256::digest(b)));
    let config = serde_json::to_vec(&serde_json::json!({
        "architecture": "amd64",
        "os": "linux",
        "config": {
            "Entrypoint": ["/bin/busybox", "sleep", "2147483647"],
            "Env": ["PATH=/bin"],
        },
        "rootfs": {"type": "layers", "diff_ids": [sha(&layer)]},
    }))
    .unwrap();
    let descriptor = |media: &str, b: &[u8]| serde_json::json!({"mediaType": media, "digest": sha(b), "size": b.len()});
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": descriptor("application/vnd.oci.image.config.v1+json", &config),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar", &layer)],
    }))
    .unwrap();
    let mut top = descriptor("application/vnd.oci.image.manifest.v1+json", &manifest);
    top["annotations"] = serde_json::json!({
        "io.containerd.image.name": BUSYBOX,
        "org.opencontainers.image.ref.name": "1",
    });
    top["platform"] = serde_json::json!({"architecture": "amd64", "os": "linux"});
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "manifests": [top],
    }))
    .unwrap();
    let mut archive = tar::Builder::new(Vec::new());
    let mut add = |path: String, bytes: &[u8]| {
        let mut h = tar::Header::new_ustar();
        h.set_mode(0o644);
        h.set_size(bytes.len() as u64);
        h.set_cksum();
        archive.append_data(&mut h, path, bytes).unwrap();
    };
    add("oci-layout".into(), br#"{"imageLayoutVersion":"1.0.0"}"#);
    add("index.json".into(), &index);
    for blob in [&layer, &config, &manifest] {
        let path = format!("blobs/sha256/{}", &sha(blob)["sha256:".len()..]);
        add(path, blob);
    }
    archive.into_inner().unwrap()
}

/// Imports [`busybox_archive`] into containerd's `k8s.io` namespace (where
/// CRI finds images), unpacked for `snapshotter`.
pub fn import_busybox(ctd: &Containerd, snapshotter: &str, extra: &[(&str, &[u8], u32)]) {
    let file = ctd.dir().join("busybox.tar");
    std::fs::write(&file, busybox_archive(extra)).expect("write the image archive");
    let out = ctd.ctr(&[
        "--namespace",
        "k8s.io",
        "images",
        "import",
        "--local",
        "--snapshotter",
        snapshotter,
        "--platform",
        "linux/amd64",
        s(&file),
    ]);
    assert!(
        out.status.success(),
        "ctr images import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// How a containerd 2.x node is set up (`docs/kubernetes.md`, section 2).
#[derive(Clone, Debug)]
pub struct NodeSetup {
    /// CRI's snapshotter for the default runtime (`sealvol` on a node
    /// that makes sealvol the default, `overlayfs` otherwise).
    pub default_snapshotter: &'static str,
    /// A runtime handler `sealvol` (RuntimeClass `sealvol`) whose
    /// snapshotter is sealvol's.
    pub sealvol_handler: bool,
    /// CRI's local pull (`client.Pull` with unpack, chosen by
    /// `disable_snapshot_annotations = false`) instead of the transfer
    /// service.
    pub local_pull: bool,
}

impl NodeSetup {
    /// sealvol as every pod's snapshotter, pulls through the transfer
    /// service.
    pub const SEALVOL_DEFAULT: NodeSetup = NodeSetup {
        default_snapshotter: "sealvol",
        sealvol_handler: false,
        local_pull: false,
    };

    /// containerd's version 3 config: CRI (with `restrict_oom_score_adj`:
    /// the machines the tests run on deny even root `CAP_SYS_RESOURCE`,
    /// which lowering a sandbox's OOM score takes), the transfer service's
    /// unpack platforms, the registries in `hosts_dir` (containerd's `certs.d`
    /// layout), and the sealvol proxy plugin at `socket`, passed layer
    /// annotations and declaring `remap-ids`.
    ///
    /// Pods that are not on the host network (user-namespaced ones:
    /// Kubernetes refuses `hostUsers: false` with `hostNetwork`, and
    /// containerd 2.2 cannot pin such a pod's user namespace) get a
    /// network of their own from CNI's `ptp` plugin (Debian's
    /// containernetworking-plugins): a veth pair and an address from a
    /// /24 of 10.0.0.0/8 picked for this node; its config goes into `cni/`
    /// beside `socket`.
    pub fn config(&self, socket: &Path, hosts_dir: &Path) -> String {
        let cni = socket.parent().expect("the node's folder").join("cni");
        pod_network(&cni);
        let runc = crate::go_tool("runc");
        let runtime = |name: &str, snapshotter: Option<&str>| {
            let table =
                format!("plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.{name}");
            let snapshotter =
                snapshotter.map_or(String::new(), |s| format!("  snapshotter = \"{s}\"\n"));
            format!(
                "[{table}]\n  runtime_type = \"io.containerd.runc.v2\"\n{snapshotter}\
                 [{table}.options]\n  BinaryName = {:?}\n",
                s(&runc)
            )
        };
        let mut c = format!(
            "[plugins.\"io.containerd.cri.v1.images\"]\n  snapshotter = \"{default}\"\n\
             {pull}\
             [plugins.\"io.containerd.cri.v1.images\".pinned_images]\n  sandbox = \"{BUSYBOX}\"\n\
             [plugins.\"io.containerd.cri.v1.images\".registry]\n  config_path = {hosts:?}\n\
             [plugins.\"io.containerd.cri.v1.runtime\"]\n  restrict_oom_score_adj = true\n\
             [plugins.\"io.containerd.cri.v1.runtime\".cni]\n  bin_dirs = [\"/usr/lib/cni\"]\n  conf_dir = {cni:?}\n\
             [plugins.\"io.containerd.cri.v1.runtime\".containerd]\n  default_runtime_name = \"runc\"\n\
             {runc}\
             [plugins.\"io.containerd.transfer.v1.local\"]\n  config_path = {hosts:?}\n\
             [[plugins.\"io.containerd.transfer.v1.local\".unpack_config]]\n  platform = \"linux/amd64\"\n  snapshotter = \"sealvol\"\n\
             [[plugins.\"io.containerd.transfer.v1.local\".unpack_config]]\n  platform = \"linux/amd64\"\n  snapshotter = \"overlayfs\"\n\
             [proxy_plugins.sealvol]\n  type = \"snapshot\"\n  address = {socket:?}\n  capabilities = [\"remap-ids\"]\n\
             [proxy_plugins.sealvol.exports]\n  enable_remote_snapshot_annotations = \"true\"\n",
            default = self.default_snapshotter,
            pull = if self.local_pull {
                "  disable_snapshot_annotations = false\n"
            } else {
                ""
            },
            hosts = s(hosts_dir),
            cni = s(&cni),
            runc = runtime("runc", None),
            socket = s(socket),
        );
        if self.sealvol_handler {
            c.push_str(&runtime("sealvol", Some("sealvol")));
        }
        c
    }
}

/// Writes `dir/10-sealvol-test.conflist`: a `ptp` network on a /24 no
/// other node of this machine's tests uses (by process and count), its
/// address leases in `dir/ipam`.
fn pod_network(dir: &Path) {
    static NODES: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NODES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let net = (std::process::id() % 200) * 256 + n % 256;
    let subnet = format!("10.{}.{}.0/24", 20 + net / 256, net % 256);
    std::fs::create_dir_all(dir).expect("cni folder");
    let conf = serde_json::json!({
        "cniVersion": "1.0.0",
        "name": format!("sealvol-test-{}-{n}", std::process::id()),
        "plugins": [{
            "type": "ptp",
            "ipMasq": false,
            "ipam": {"type": "host-local", "subnet": subnet, "dataDir": dir.join("ipam")},
        }],
    });
    std::fs::write(
        dir.join("10-sealvol-test.conflist"),
        serde_json::to_vec_pretty(&conf).unwrap(),
    )
    .expect("cni config");
}

/// `hosts_dir/HOST/hosts.toml` saying `host` (`127.0.0.1:PORT`) is served
/// over plain HTTP.
pub fn plain_http_host(hosts_dir: &Path, host: &str) {
    let dir = hosts_dir.join(host);
    std::fs::create_dir_all(&dir).expect("hosts dir");
    std::fs::write(
        dir.join("hosts.toml"),
        format!(
            "server = \"http://{host}\"\n[host.\"http://{host}\"]\n  capabilities = [\"pull\", \"resolve\"]\n"
        ),
    )
    .expect("hosts.toml");
}

/// A CRI client on containerd's socket, as a kubelet talks to it; each
/// call blocks on its own runtime.
pub struct Cri {
    rt: tokio::runtime::Runtime,
    runtime: crate::cri::runtime_service_client::RuntimeServiceClient<tonic::transport::Channel>,
    images: crate::cri::image_service_client::ImageServiceClient<tonic::transport::Channel>,
}

impl Cri {
    pub fn connect(ctd: &Containerd) -> Cri {
        let rt = tokio::runtime::Runtime::new().expect("a runtime");
        let ch = rt.block_on(channel(&ctd.address()));
        Cri {
            rt,
            runtime: crate::cri::runtime_service_client::RuntimeServiceClient::new(ch.clone()),
            images: crate::cri::image_service_client::ImageServiceClient::new(ch),
        }
    }

    /// `PullImage` of `image` for a pod of `handler` (RuntimeClass; empty
    /// for the default), as a kubelet sends it: the runtime handler in the
    /// image spec and the sandbox config. Answers `image_ref`.
    pub fn pull(
        &mut self,
        image: &str,
        handler: &str,
        pod: Option<crate::cri::PodSandboxConfig>,
    ) -> Result<String, tonic::Status> {
        let req = crate::cri::PullImageRequest {
            image: Some(crate::cri::ImageSpec {
                image: image.to_string(),
                runtime_handler: handler.to_string(),
                ..Default::default()
            }),
            sandbox_config: pod,
            ..Default::default()
        };
        let images = &mut self.images;
        self.rt
            .block_on(images.pull_image(req))
            .map(|r| r.into_inner().image_ref)
    }

    pub fn image_status(&mut self, image: &str) -> Option<crate::cri::Image> {
        let req = crate::cri::ImageStatusRequest {
            image: Some(image_spec(image)),
            verbose: false,
        };
        let images = &mut self.images;
        self.rt
            .block_on(images.image_status(req))
            .expect("CRI ImageStatus")
            .into_inner()
            .image
    }

    pub fn remove_image(&mut self, image: &str) {
        let req = crate::cri::RemoveImageRequest {
            image: Some(image_spec(image)),
        };
        let images = &mut self.images;
        self.rt
            .block_on(images.remove_image(req))
            .expect("CRI RemoveImage");
    }

    pub fn run_pod(
        &mut self,
        config: crate::cri::PodSandboxConfig,
        handler: &str,
    ) -> Result<String, tonic::Status> {
        let req = crate::cri::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: handler.to_string(),
        };
        let runtime = &mut self.runtime;
        self.rt
            .block_on(runtime.run_pod_sandbox(req))
            .map(|r| r.into_inner().pod_sandbox_id)
    }

    pub fn create_container(
        &mut self,
        pod: &str,
        config: crate::cri::ContainerConfig,
        pod_config: crate::cri::PodSandboxConfig,
    ) -> Result<String, tonic::Status> {
        let req = crate::cri::CreateContainerRequest {
            pod_sandbox_id: pod.to_string(),
            config: Some(config),
            sandbox_config: Some(pod_config),
        };
        let runtime = &mut self.runtime;
        self.rt
            .block_on(runtime.create_container(req))
            .map(|r| r.into_inner().container_id)
    }

    pub fn start_container(&mut self, id: &str) -> Result<(), tonic::Status> {
        let req = crate::cri::StartContainerRequest {
            container_id: id.to_string(),
        };
        let runtime = &mut self.runtime;
        self.rt.block_on(runtime.start_container(req)).map(|_| ())
    }

    pub fn container_status(&mut self, id: &str) -> crate::cri::ContainerStatus {
        let req = crate::cri::ContainerStatusRequest {
            container_id: id.to_string(),
            verbose: false,
        };
        let runtime = &mut self.runtime;
        self.rt
            .block_on(runtime.container_status(req))
            .expect("CRI ContainerStatus")
            .into_inner()
            .status
            .expect("a status")
    }

    /// Waits (up to `timeout`) for container `id` to exit; its status.
    pub fn wait_exited(
        &mut self,
        id: &str,
        timeout: std::time::Duration,
    ) -> crate::cri::ContainerStatus {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let st = self.container_status(id);
            if st.state == crate::cri::ContainerState::ContainerExited as i32 {
                return st;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "container {id} still runs after {timeout:?}: {st:?}"
            );
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    }

    pub fn remove_container(&mut self, id: &str) {
        let req = crate::cri::RemoveContainerRequest {
            container_id: id.to_string(),
        };
        let runtime = &mut self.runtime;
        self.rt
            .block_on(runtime.remove_container(req))
            .expect("CRI RemoveContainer");
    }

    /// Every pod sandbox, ready or not.
    pub fn pods(&mut self) -> Vec<crate::cri::PodSandbox> {
        let runtime = &mut self.runtime;
        self.rt
            .block_on(runtime.list_pod_sandbox(crate::cri::ListPodSandboxRequest::default()))
            .expect("CRI ListPodSandbox")
            .into_inner()
            .items
    }

    /// Every container, running or not.
    pub fn containers(&mut self) -> Vec<crate::cri::Container> {
        let runtime = &mut self.runtime;
        self.rt
            .block_on(runtime.list_containers(crate::cri::ListContainersRequest::default()))
            .expect("CRI ListContainers")
            .into_inner()
            .containers
    }

    /// `StopPodSandbox` then `RemovePodSandbox`, as a kubelet ends a pod.
    pub fn remove_pod(&mut self, id: &str) {
        let runtime = &mut self.runtime;
        self.rt
            .block_on(runtime.stop_pod_sandbox(crate::cri::StopPodSandboxRequest {
                pod_sandbox_id: id.to_string(),
            }))
            .expect("CRI StopPodSandbox");
        self.rt
            .block_on(
                runtime.remove_pod_sandbox(crate::cri::RemovePodSandboxRequest {
                    pod_sandbox_id: id.to_string(),
                }),
            )
            .expect("CRI RemovePodSandbox");
    }
}

/// An image spec naming `image`, nothing else.
fn image_spec(image: &str) -> crate::cri::ImageSpec {
    crate::cri::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    }
}

/// A pod's sandbox config: host network, its logs under `logs`, and with
/// `userns` (`(host uid, host gid, length)`) a user namespace of its own
/// (mode POD) on a pod network, as a kubelet asks for `hostUsers: false`.
pub fn pod_config(
    name: &str,
    logs: &Path,
    userns: Option<(u32, u32, u32)>,
) -> crate::cri::PodSandboxConfig {
    use crate::cri;
    std::fs::create_dir_all(logs).expect("log folder");
    cri::PodSandboxConfig {
        metadata: Some(cri::PodSandboxMetadata {
            name: name.to_string(),
            uid: format!("uid-{name}"),
            namespace: "default".to_string(),
            attempt: 0,
        }),
        log_directory: s(logs).to_string(),
        linux: Some(cri::LinuxPodSandboxConfig {
            security_context: Some(cri::LinuxSandboxSecurityContext {
                namespace_options: Some(namespaces(userns)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A container of [`BUSYBOX`] running `script` (with `sh -c`), its log
/// `NAME.log` in the pod's log folder, with the image volume `image_ref`
/// (what `PullImage` answered) at /mnt/weights, from the volume's folder
/// `sub_path` when not empty: mounted as a kubelet mounts `volumes[].image`,
/// read-only, and in a user-namespaced pod (`userns`, as in
/// [`pod_config`]) with the pod's mappings on the mount.
pub fn volume_container(
    name: &str,
    script: &str,
    image_ref: &str,
    sub_path: &str,
    userns: Option<(u32, u32, u32)>,
) -> crate::cri::ContainerConfig {
    use crate::cri;
    let mapping = |host: fn((u32, u32, u32)) -> u32| {
        userns
            .map(|m| {
                vec![cri::IdMapping {
                    host_id: host(m),
                    container_id: 0,
                    length: m.2,
                }]
            })
            .unwrap_or_default()
    };
    cri::ContainerConfig {
        metadata: Some(cri::ContainerMetadata {
            name: name.to_string(),
            attempt: 0,
        }),
        image: Some(image_spec(BUSYBOX)),
        command: vec!["/bin/sh".into(), "-c".into(), script.to_string()],
        log_path: format!("{name}.log"),
        mounts: vec![cri::Mount {
            container_path: "/mnt/weights".into(),
            readonly: true,
            image: Some(image_spec(image_ref)),
            image_sub_path: sub_path.to_string(),
            uid_mappings: mapping(|m| m.0),
            gid_mappings: mapping(|m| m.1),
            ..Default::default()
        }],
        linux: Some(cri::LinuxContainerConfig {
            security_context: Some(cri::LinuxContainerSecurityContext {
                namespace_options: Some(namespaces(userns)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Host network; with `userns`, a pod user namespace and a pod network
/// (Kubernetes allows no user namespace on the host network).
pub fn namespaces(userns: Option<(u32, u32, u32)>) -> crate::cri::NamespaceOption {
    use crate::cri;
    cri::NamespaceOption {
        network: if userns.is_some() {
            cri::NamespaceMode::Pod
        } else {
            cri::NamespaceMode::Node
        } as i32,
        userns_options: userns.map(|(uid, gid, length)| cri::UserNamespace {
            mode: cri::NamespaceMode::Pod as i32,
            uids: vec![cri::IdMapping {
                host_id: uid,
                container_id: 0,
                length,
            }],
            gids: vec![cri::IdMapping {
                host_id: gid,
                container_id: 0,
                length,
            }],
        }),
        ..Default::default()
    }
}

/// The lines a container wrote to stdout, from its CRI log file
/// (`TIMESTAMP STREAM TAG CONTENT`).
pub fn container_stdout(log: &Path) -> Vec<String> {
    std::fs::read_to_string(log)
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()))
        .lines()
        .filter_map(|l| {
            let mut f = l.splitn(4, ' ');
            let (_, stream, _, content) = (f.next()?, f.next()?, f.next()?, f.next()?);
            (stream == "stdout").then(|| content.to_string())
        })
        .collect()
}

/// Mounts (their mount points) under `dir`, of any type.
pub fn mounts_under(dir: &Path) -> Vec<String> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with(s(dir)))
        .map(str::to_string)
        .collect()
}
