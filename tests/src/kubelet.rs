//! A kubelet in standalone mode, as `scripts/deps.sh` builds it from
//! k8s.io/kubernetes: no API server, pods from the manifest files in one
//! folder (static pods), on a containerd 2.x node's CRI. What a node runs,
//! minus the cluster: the kubelet pulls, mounts image volumes, starts,
//! logs and stops pods exactly as it does for pods an API server assigns.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::time::{Duration, Instant};

use crate::node::Cri;
use crate::{s, Containerd};

/// The node name the kubelet goes by; a static pod `NAME` runs as
/// `NAME-sealvol-test-node`.
pub const NODE: &str = "sealvol-test-node";

/// A running kubelet; dropping it removes its manifests, waits for their
/// pods to go, stops it, and removes any pod it left.
pub struct Kubelet {
    child: Child,
    dir: tempfile::TempDir,
    cri: Cri,
}

impl Kubelet {
    /// Starts a kubelet on `ctd`'s CRI socket and waits for its health
    /// endpoint. The configuration is what a node of this machine needs:
    /// the cgroupfs driver on cgroup v1 (`failCgroupV1: false`; the
    /// kubelet refuses cgroup v1 by default since 1.35), no per-QoS
    /// cgroups or node-allocatable enforcement (nothing here to reserve),
    /// swap allowed, no server beyond a loopback health port, image GC
    /// and eviction out of the way of a test's images.
    pub fn start(ctd: &Containerd) -> Kubelet {
        let dir = tempfile::tempdir().expect("the kubelet's folder");
        let d = dir.path();
        std::fs::create_dir_all(d.join("manifests")).expect("manifest folder");
        let healthz = crate::free_port();
        let config = format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\n\
             kind: KubeletConfiguration\n\
             enableServer: false\n\
             staticPodPath: {manifests:?}\n\
             fileCheckFrequency: 1s\n\
             syncFrequency: 10s\n\
             podLogsDir: {logs:?}\n\
             address: 127.0.0.1\n\
             readOnlyPort: 0\n\
             healthzBindAddress: 127.0.0.1\n\
             healthzPort: {healthz}\n\
             authentication:\n  anonymous: {{enabled: false}}\n  webhook: {{enabled: false}}\n\
             authorization: {{mode: AlwaysAllow}}\n\
             containerRuntimeEndpoint: unix://{socket}\n\
             cgroupDriver: cgroupfs\n\
             failCgroupV1: false\n\
             cgroupsPerQOS: false\n\
             enforceNodeAllocatable: []\n\
             failSwapOn: false\n\
             oomScoreAdj: 0\n\
             resolvConf: \"\"\n\
             localStorageCapacityIsolation: false\n\
             imageGCHighThresholdPercent: 100\n\
             imageGCLowThresholdPercent: 99\n\
             evictionHard: {{memory.available: \"1%\", nodefs.available: \"1%\", imagefs.available: \"1%\"}}\n\
             registerNode: false\n\
             serializeImagePulls: false\n",
            manifests = s(&d.join("manifests")),
            logs = s(&d.join("pod-logs")),
            socket = s(&ctd.address()),
        );
        std::fs::write(d.join("config.yaml"), config).expect("the kubelet's config");
        let log = std::fs::File::create(d.join("log")).expect("the kubelet's log");
        let child = Command::new(crate::go_tool("kubelet"))
            .arg("--config")
            .arg(d.join("config.yaml"))
            .arg("--root-dir")
            .arg(d.join("root"))
            .arg("--cert-dir")
            .arg(d.join("pki"))
            .args(["--hostname-override", NODE, "--v=2"])
            .stdout(log.try_clone().expect("log"))
            .stderr(log)
            .spawn()
            .expect("run the kubelet (built by scripts/deps.sh)");
        let mut k = Kubelet {
            child,
            dir,
            cri: Cri::connect(ctd),
        };
        let url = format!("http://127.0.0.1:{healthz}/healthz");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(r) = reqwest::blocking::get(&url) {
                if r.status().is_success() {
                    break;
                }
            }
            if let Ok(Some(status)) = k.child.try_wait() {
                panic!("the kubelet exited ({status}); its log:\n{}", k.log());
            }
            assert!(
                Instant::now() < deadline,
                "the kubelet's /healthz did not answer 200 within 60 s; its log:\n{}",
                k.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        k
    }

    /// The folder whose manifests are the node's static pods.
    pub fn manifests(&self) -> PathBuf {
        self.dir.path().join("manifests")
    }

    /// Writes the static pod `name.yaml` in one step (a dot file, which the
    /// kubelet ignores, renamed into place), so the kubelet never reads
    /// half a manifest.
    pub fn add_pod(&self, name: &str, manifest: &str) {
        let tmp = self.manifests().join(format!(".{name}.yaml.tmp"));
        std::fs::write(&tmp, manifest).expect("write a manifest");
        std::fs::rename(&tmp, self.manifests().join(format!("{name}.yaml")))
            .expect("move a manifest into place");
    }

    /// Removes the static pod `name.yaml`: the kubelet stops its pod.
    pub fn remove_pod(&self, name: &str) {
        std::fs::remove_file(self.manifests().join(format!("{name}.yaml")))
            .expect("remove a manifest");
    }

    /// The folder of the pods' container logs (`podLogsDir`):
    /// `NAMESPACE_POD-NODE_UID/CONTAINER/N.log`.
    pub fn pod_logs(&self) -> PathBuf {
        self.dir.path().join("pod-logs")
    }

    /// The CRI client the kubelet's runtime answers on.
    pub fn cri(&mut self) -> &mut Cri {
        &mut self.cri
    }

    /// The kubelet's log (its last 300 lines), for failure messages.
    pub fn log(&self) -> String {
        let log = std::fs::read_to_string(self.dir.path().join("log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(300)..].join("\n")
    }

    /// The CRI ids of the containers named `container` of the static pod
    /// `pod` (the manifest's `metadata.name`), newest first.
    pub fn containers(&mut self, pod: &str, container: &str) -> Vec<crate::cri::Container> {
        let pod = format!("{pod}-{NODE}");
        let mut found: Vec<_> = self
            .cri
            .containers()
            .into_iter()
            .filter(|c| {
                c.labels.get("io.kubernetes.pod.name") == Some(&pod)
                    && c.labels
                        .get("io.kubernetes.container.name")
                        .map(String::as_str)
                        == Some(container)
            })
            .collect();
        found.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        found
    }

    /// The CRI log of the newest container `container` of static pod `pod`
    /// (both streams, as the runtime wrote them), for failure messages.
    pub fn container_log(&mut self, pod: &str, container: &str) -> String {
        let Some(c) = self.containers(pod, container).into_iter().next() else {
            return format!("(no container {container} of pod {pod})");
        };
        let status = self.cri.container_status(&c.id);
        format!(
            "container {container} of pod {pod}: {:?}, exit {} ({} {}); its log:\n{}",
            crate::cri::ContainerState::try_from(status.state),
            status.exit_code,
            status.reason,
            status.message,
            std::fs::read_to_string(&status.log_path).unwrap_or_default()
        )
    }

    /// Waits (up to `timeout`) until the newest container `container` of
    /// static pod `pod` has written at least `lines` lines to stdout;
    /// answers them. Panics with the kubelet's log if it does not.
    pub fn stdout(
        &mut self,
        pod: &str,
        container: &str,
        lines: usize,
        timeout: Duration,
    ) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(c) = self.containers(pod, container).first() {
                let status = self.cri.container_status(&c.id);
                let log = Path::new(&status.log_path);
                if log.exists() {
                    let out = crate::node::container_stdout(log);
                    if out.len() >= lines {
                        return out;
                    }
                }
            }
            assert!(
                Instant::now() < deadline,
                "pod {pod}: container {container} wrote no {lines} lines within {timeout:?}; the kubelet's log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Waits (up to `timeout`) until no pod sandbox of static pod `pod` is
    /// left in the runtime.
    pub fn wait_gone(&mut self, pod: &str, timeout: Duration) {
        let name = format!("{pod}-{NODE}");
        let deadline = Instant::now() + timeout;
        while self
            .cri
            .pods()
            .iter()
            .any(|p| p.metadata.as_ref().is_some_and(|m| m.name == name))
        {
            assert!(
                Instant::now() < deadline,
                "pod {pod} still in the runtime {timeout:?} after its manifest went; the kubelet's log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Kubelet {
    fn drop(&mut self) {
        // Let the kubelet end its pods as it does for deleted manifests,
        // then stop it, then remove whatever it did not get to.
        if let Ok(entries) = std::fs::read_dir(self.manifests()) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !self.cri.pods().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        for pod in self.cri.pods() {
            self.cri.remove_pod(&pod.id);
        }
        for m in crate::node::mounts_under(self.dir.path()).iter().rev() {
            let _ = Command::new("umount").args(["-l", m]).status();
        }
    }
}
