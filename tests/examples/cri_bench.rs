//! containerd 2.x part of `bench/snapshotter`: one private containerd 2.x
//! node (the one `scripts/deps.sh` built, or `SEALVOL_CONTAINERD2_BIN`)
//! set up with a RuntimeClass of its own (`docs/kubernetes.md`): the
//! default runtime keeps overlayfs, the runtime handler `sealvol` uses the
//! sealvol snapshotter. Driven over CRI as a kubelet drives an image
//! volume, it times, for each case and run, `PullImage` of the volume →
//! `CreateContainer` with it mounted at /mnt/weights → `StartContainer` →
//! the container's exit, the container running
//! `head -c 1 /mnt/weights/PROBE`.
//!
//! ```text
//! cri_bench HOST WORK_DIR RUNS PROBE CASE...
//! ```
//!
//! `HOST` is the registry (`127.0.0.1:PORT`, plain HTTP); each `CASE` is
//! `MODE=REPO:TAG` with `MODE` one of
//! - `sealvol`: a pod of runtime handler `sealvol` (PullImage's runtime
//!   handler and RunPodSandbox's), the sealvol snapshotter;
//! - `sealvol-userns`: the same in a user-namespaced pod (`hostUsers:
//!   false`: host ids 1 000 000 + 65 536 mapped to 0);
//! - `overlayfs`: a pod of the default handler, containerd's overlayfs;
//! - `overlayfs-userns`: the same in a user-namespaced pod (what user
//!   namespaces cost containerd and runc with any snapshotter).
//!
//! Each run: the pod sandbox is started first (not timed: a kubelet runs
//! it before it pulls the pod's volumes), then the snapshotter's chunk
//! cache is emptied and the page cache dropped, so every run is cold; the
//! timed part follows; the container, the pod and the image are removed
//! again (`RemoveImage` collects the snapshots). Runs go round the cases
//! in turn (case 1, case 2, …, case 1, …).
//!
//! Prints one JSON object on stdout: containerd's version and, per case,
//! every run's phases in seconds (`pull`, `create`, `start`, `exit`: from
//! StartContainer's answer to the exit containerd recorded, `total`) and
//! their medians. Progress goes to stderr; containerd's log is left in
//! `WORK_DIR/containerd.log` (at debug level with `CRI_BENCH_DEBUG` set),
//! the fuse manager's in `WORK_DIR/snap/root/fuse-manager.log`. Needs
//! root.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use sealvol_tests::bench::{cold, median};
use sealvol_tests::cri;
use sealvol_tests::node::{
    import_busybox, plain_http_host, pod_config, version_mounts_under, volume_container, Cri,
    NodeSetup, Snapshotter,
};
use sealvol_tests::{s, Containerd};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// The user-namespaced pods' mapping: host uid and gid, length.
const USERNS: (u32, u32, u32) = (1_000_000, 1_000_000, 65536);

const PHASES: [&str; 5] = ["pull", "create", "start", "exit", "total"];

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    Sealvol,
    SealvolUserns,
    Overlayfs,
    OverlayfsUserns,
}

impl Mode {
    fn parse(s: &str) -> Option<Mode> {
        match s {
            "sealvol" => Some(Mode::Sealvol),
            "sealvol-userns" => Some(Mode::SealvolUserns),
            "overlayfs" => Some(Mode::Overlayfs),
            "overlayfs-userns" => Some(Mode::OverlayfsUserns),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Sealvol => "sealvol",
            Mode::SealvolUserns => "sealvol-userns",
            Mode::Overlayfs => "overlayfs",
            Mode::OverlayfsUserns => "overlayfs-userns",
        }
    }

    /// The pod's runtime handler (RuntimeClass).
    fn handler(self) -> &'static str {
        match self {
            Mode::Sealvol | Mode::SealvolUserns => "sealvol",
            Mode::Overlayfs | Mode::OverlayfsUserns => "",
        }
    }

    fn userns(self) -> Option<(u32, u32, u32)> {
        matches!(self, Mode::SealvolUserns | Mode::OverlayfsUserns).then_some(USERNS)
    }
}

struct Case {
    mode: Mode,
    /// `REPO:TAG` on the registry.
    image: String,
    runs: Vec<[f64; 5]>,
}

/// The node, dropped in this order: the CRI client, the snapshotter (it
/// unmounts first), containerd.
struct Node {
    cri: Cri,
    snap: Snapshotter,
    ctd: Containerd,
    logs: PathBuf,
}

fn usage() -> ! {
    eprintln!(
        "usage: cri_bench HOST WORK_DIR RUNS PROBE (sealvol|sealvol-userns|overlayfs|overlayfs-userns)=REPO:TAG..."
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 5 {
        usage();
    }
    let (host, work, probe) = (&args[0], PathBuf::from(&args[1]), &args[3]);
    let runs: usize = args[2].parse().unwrap_or_else(|_| usage());
    let mut cases: Vec<Case> = args[4..]
        .iter()
        .map(|c| {
            let (mode, image) = c.split_once('=').unwrap_or_else(|| usage());
            Case {
                mode: Mode::parse(mode).unwrap_or_else(|| usage()),
                image: image.to_string(),
                runs: Vec::new(),
            }
        })
        .collect();
    if let Err(e) = bench(host, &work, runs, probe, &mut cases) {
        eprintln!("cri_bench: {e}");
        std::process::exit(1);
    }
}

fn bench(host: &str, work: &Path, runs: usize, probe: &str, cases: &mut [Case]) -> Res<()> {
    // containerd's own folder (a temporary one) goes under WORK_DIR too.
    let tmp = work.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    std::env::set_var("TMPDIR", &tmp);
    let version = Command::new(sealvol_tests::containerd2_bin().join("containerd"))
        .arg("--version")
        .output()?;
    let version = String::from_utf8_lossy(&version.stdout)
        .split_whitespace()
        .nth(2)
        .unwrap_or("?")
        .to_string();
    eprintln!("cri_bench: containerd {version}, sealvol snapshotter as runtime handler `sealvol`");
    let mut node = start(host, work)?;
    // The sandbox (and workload) image unpacked for each pod kind the
    // cases run, as on a node that has run such pods: each run then
    // leaves the snapshots as it found them.
    for case in cases.iter() {
        let name = format!("warm-{}", case.mode.name());
        let config = pod_config(&name, &node.logs.join(&name), case.mode.userns());
        let pod = node.cri.run_pod(config, case.mode.handler())?;
        node.cri.remove_pod(&pod);
    }
    let done = cases_runs(&mut node, host, runs, probe, cases);
    // containerd's folder goes with it: its log is kept.
    std::fs::write(work.join("containerd.log"), node.ctd.log())?;
    done?;
    let cases: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            let median: serde_json::Map<String, serde_json::Value> = PHASES
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let v: Vec<f64> = c.runs.iter().map(|r| r[i]).collect();
                    (p.to_string(), json!(median(v)))
                })
                .collect();
            let runs: Vec<serde_json::Value> = c
                .runs
                .iter()
                .map(|r| {
                    PHASES
                        .iter()
                        .zip(r)
                        .map(|(p, v)| (p.to_string(), json!(v)))
                        .collect::<serde_json::Map<_, _>>()
                        .into()
                })
                .collect();
            json!({
                "mode": c.mode.name(),
                "image": c.image,
                "handler": c.mode.handler(),
                "userns": c.mode.userns().map(|(u, g, n)| json!({"uid": u, "gid": g, "length": n})),
                "runs": runs,
                "median": median,
            })
        })
        .collect();
    println!(
        "{}",
        json!({"containerd": version, "probe": probe, "cases": cases})
    );
    Ok(())
}

/// Every run of every case, round-robin.
fn cases_runs(
    node: &mut Node,
    host: &str,
    runs: usize,
    probe: &str,
    cases: &mut [Case],
) -> Res<()> {
    for run in 1..=runs {
        for case in cases.iter_mut() {
            eprintln!(
                "cri_bench: {}, run {run}: {} {}",
                case.image,
                case.mode.name(),
                match case.mode.handler() {
                    "" => "(containerd's overlayfs)",
                    _ => "(handler sealvol)",
                }
            );
            let name = format!("bench-{}-{run}", case.mode.name());
            let t = once(node, host, case, &name, probe)
                .map_err(|e| format!("{name}: {e}\ncontainerd's log:\n{}", tail(node)))?;
            eprintln!(
                "cri_bench:   pull {:.2} s, create {:.2} s, start {:.2} s, exit {:.2} s: {:.2} s",
                t[0], t[1], t[2], t[3], t[4]
            );
            case.runs.push(t);
        }
    }
    Ok(())
}

/// containerd 2.x with CRI, overlayfs by default and the handler
/// `sealvol`; the snapshotter; busybox imported (sandbox and workload).
fn start(host: &str, work: &Path) -> Res<Node> {
    let hosts = work.join("certs.d");
    plain_http_host(&hosts, host);
    let dir = work.join("snap");
    std::fs::create_dir_all(&dir)?;
    let setup = NodeSetup {
        default_snapshotter: "overlayfs",
        sealvol_handler: true,
        local_pull: false,
    };
    let mut config = setup.config(&dir.join("snapshotter.sock"), &hosts);
    if std::env::var_os("CRI_BENCH_DEBUG").is_some() {
        config.push_str("[debug]\n  level = \"debug\"\n");
    }
    let ctd = Containerd::start_v2(&config).in_namespace("k8s.io");
    let snap = Snapshotter::start_with(
        &dir,
        &format!("containerd_address = {:?}\n", s(&ctd.address())),
    );
    import_busybox(&ctd, setup.default_snapshotter, &[]);
    let cri = Cri::connect(&ctd);
    Ok(Node {
        cri,
        snap,
        ctd,
        logs: work.join("logs"),
    })
}

/// One run of `case`: the phases' seconds (as [`PHASES`]).
fn once(node: &mut Node, host: &str, case: &Case, name: &str, probe: &str) -> Res<[f64; 5]> {
    let mode = case.mode;
    let logs = node.logs.join(name);
    let config = pod_config(name, &logs, mode.userns());
    let before = snapshots(node);
    let pod = node.cri.run_pod(config.clone(), mode.handler())?;
    let timed = timed(node, host, case, name, probe, &pod, config);
    if timed.is_err() {
        // Its containers go with it: no shim left running.
        node.cri.remove_pod(&pod);
    }
    let (t, image_ref) = timed?;
    node.cri.remove_pod(&pod);
    node.cri.remove_image(&image_ref);
    // RemoveImage collects the snapshots; the version is unmounted after.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !version_mounts_under(&node.snap.root).is_empty() {
        if Instant::now() > deadline {
            return Err(format!(
                "still mounted 30 s after RemoveImage: {:?}",
                version_mounts_under(&node.snap.root)
            )
            .into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // The snapshotters' own clean-up (containerd schedules it after
    // collecting) is over before the next run: none of the run's
    // snapshots is left.
    let deadline = Instant::now() + Duration::from_secs(60);
    let left = |now: Vec<BTreeSet<OsString>>| now.iter().zip(&before).any(|(n, b)| !n.is_subset(b));
    while left(snapshots(node)) {
        if Instant::now() > deadline {
            eprintln!("cri_bench:   snapshots left 60 s after RemoveImage; going on");
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(t)
}

/// The snapshot folders of both snapshotters, overlayfs's and sealvol's.
fn snapshots(node: &Node) -> Vec<BTreeSet<OsString>> {
    [
        node.ctd
            .dir()
            .join("root/io.containerd.snapshotter.v1.overlayfs/snapshots"),
        node.snap.root.join("snapshots"),
    ]
    .iter()
    .map(|d| {
        std::fs::read_dir(d)
            .map(|es| es.filter_map(|e| Some(e.ok()?.file_name())).collect())
            .unwrap_or_default()
    })
    .collect()
}

/// The timed part of [`once`] in the running pod `pod`, the container
/// removed again; the phases and the image ref.
fn timed(
    node: &mut Node,
    host: &str,
    case: &Case,
    name: &str,
    probe: &str,
    pod: &str,
    config: cri::PodSandboxConfig,
) -> Res<([f64; 5], String)> {
    let mode = case.mode;
    cold(&node.snap.root)?;
    let image = format!("{host}/{}", case.image);
    let t0 = Instant::now();
    let epoch0 = SystemTime::now().duration_since(UNIX_EPOCH)?;
    let image_ref = node
        .cri
        .pull(&image, mode.handler(), Some(config.clone()))
        .map_err(|e| format!("PullImage {image}: {e:?}"))?;
    let pulled = t0.elapsed();
    let id = node
        .cri
        .create_container(pod, container(name, &image_ref, mode, probe), config)
        .map_err(|e| format!("CreateContainer: {e:?}"))?;
    let created = t0.elapsed();
    node.cri
        .start_container(&id)
        .map_err(|e| format!("StartContainer: {e:?}"))?;
    let started = t0.elapsed();
    // containerd records when the container exited: no polling interval
    // in the measure.
    let deadline = Instant::now() + Duration::from_secs(300);
    let status = loop {
        let st = node.cri.container_status(&id);
        if st.state == cri::ContainerState::ContainerExited as i32 {
            break st;
        }
        if Instant::now() > deadline {
            return Err(format!("the container still runs after 300 s: {st:?}").into());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let exited = Duration::from_nanos(u64::try_from(status.finished_at)?).saturating_sub(epoch0);
    if status.exit_code != 0 {
        let log = std::fs::read_to_string(node.logs.join(name).join(format!("{name}.log")))
            .unwrap_or_default();
        return Err(format!("the container exited {}: {log}", status.exit_code).into());
    }
    node.cri.remove_container(&id);
    let secs = |d: Duration| d.as_secs_f64();
    Ok((
        [
            secs(pulled),
            secs(created - pulled),
            secs(started - created),
            secs(exited.saturating_sub(started)),
            secs(exited),
        ],
        image_ref,
    ))
}

/// The workload: busybox reading the first byte of `probe` in the image
/// volume.
fn container(name: &str, image_ref: &str, mode: Mode, probe: &str) -> cri::ContainerConfig {
    let script = format!("head -c 1 /mnt/weights/{probe} >/dev/null");
    volume_container(name, &script, image_ref, "", mode.userns())
}

/// The last lines of containerd's log, for an error.
fn tail(node: &Node) -> String {
    let log = node.ctd.log();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
