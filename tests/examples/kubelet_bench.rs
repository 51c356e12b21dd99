//! The kubelet part of `bench/node`: a standalone kubelet (the one
//! `scripts/deps.sh` built) on a private containerd 2.x node with the
//! sealvol snapshotter, timing for each case and run the time from writing
//! a static pod's manifest to its container's first line of output. The
//! pod mounts the case's image at /mnt/weights as an image volume; its one
//! container reads the first byte of `/mnt/weights/PROBE`, then prints a
//! line.
//!
//! ```text
//! kubelet_bench HOST WORK_DIR RUNS PROBE CASE...
//! ```
//!
//! `HOST` is the registry (`127.0.0.1:PORT`, plain HTTP); each `CASE` is
//! `MODE=REPO:TAG`, `MODE` being the node's default snapshotter:
//! - `sealvol`: the sealvol snapshotter (a kubelet without an API server
//!   resolves no RuntimeClass, so the node's default is what a static pod
//!   gets);
//! - `overlayfs`: containerd's own.
//!
//! One node (containerd, snapshotter, kubelet) per mode, its cases' runs
//! round-robin. Before each run the snapshotter's chunk cache is emptied
//! and the page cache dropped; after it the manifest is removed, the pod
//! waited out and the image removed (`RemoveImage`), so every pull is cold.
//! The busybox image (sandbox and container) is imported and a pod run
//! once beforehand, as on a node that has run pods before.
//!
//! Prints one JSON object on stdout: the kubelet's and containerd's
//! versions and, per case, every run's seconds and their median. Progress
//! goes to stderr. Needs root.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use sealvol_tests::bench::{cold, median};
use sealvol_tests::kubelet::{Kubelet, NODE};
use sealvol_tests::node::{
    import_busybox, plain_http_host, version_mounts_under, NodeSetup, Snapshotter, BUSYBOX,
};
use sealvol_tests::{s, Containerd};
use serde_json::json;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

struct Case {
    mode: String,
    image: String,
    runs: Vec<f64>,
}

fn usage() -> ! {
    eprintln!("usage: kubelet_bench HOST WORK_DIR RUNS PROBE (sealvol|overlayfs)=REPO:TAG...");
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
            if mode != "sealvol" && mode != "overlayfs" {
                usage();
            }
            Case {
                mode: mode.to_string(),
                image: image.to_string(),
                runs: Vec::new(),
            }
        })
        .collect();
    if let Err(e) = bench(host, &work, runs, probe, &mut cases) {
        eprintln!("kubelet_bench: {e}");
        std::process::exit(1);
    }
}

fn version(program: &Path, field: usize) -> String {
    Command::new(program)
        .arg("--version")
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .split_whitespace()
                .nth(field)
                .unwrap_or("?")
                .to_string()
        })
        .unwrap_or_else(|_| "?".into())
}

fn bench(host: &str, work: &Path, runs: usize, probe: &str, cases: &mut [Case]) -> Res<()> {
    // The node's temporary folders go under WORK_DIR.
    let tmp = work.join("tmp");
    std::fs::create_dir_all(&tmp)?;
    std::env::set_var("TMPDIR", &tmp);
    let kubelet = version(&sealvol_tests::go_tool("kubelet"), 1);
    let containerd = version(&sealvol_tests::containerd2_bin().join("containerd"), 2);
    eprintln!("kubelet_bench: kubelet {kubelet}, containerd {containerd}");
    for mode in ["sealvol", "overlayfs"] {
        let mut mine: Vec<&mut Case> = cases.iter_mut().filter(|c| c.mode == mode).collect();
        if mine.is_empty() {
            continue;
        }
        node_runs(host, &work.join(mode), mode, runs, probe, &mut mine)?;
    }
    let cases: Vec<serde_json::Value> = cases
        .iter()
        .map(|c| {
            json!({
                "mode": c.mode,
                "image": c.image,
                "runs": c.runs,
                "median": median(c.runs.clone()),
            })
        })
        .collect();
    println!(
        "{}",
        json!({"kubelet": kubelet, "containerd": containerd, "probe": probe, "cases": cases})
    );
    Ok(())
}

/// A node whose default snapshotter is `mode`, and every run of `cases`
/// on it.
fn node_runs(
    host: &str,
    dir: &Path,
    mode: &str,
    runs: usize,
    probe: &str,
    cases: &mut [&mut Case],
) -> Res<()> {
    std::fs::create_dir_all(dir)?;
    let hosts = dir.join("certs.d");
    plain_http_host(&hosts, host);
    let setup = NodeSetup {
        default_snapshotter: if mode == "sealvol" {
            "sealvol"
        } else {
            "overlayfs"
        },
        ..NodeSetup::SEALVOL_DEFAULT
    };
    let ctd = Containerd::start_v2(&setup.config(&dir.join("snapshotter.sock"), &hosts))
        .in_namespace("k8s.io");
    let snap = Snapshotter::start_with(
        dir,
        &format!("containerd_address = {:?}\n", s(&ctd.address())),
    );
    import_busybox(&ctd, setup.default_snapshotter, &[]);
    let mut kubelet = Kubelet::start(&ctd);
    let warm = manifest("warm", None, probe);
    first_line(&mut kubelet, "warm", &warm)?;
    stop(&mut kubelet, "warm", None, &snap)?;
    for run in 1..=runs {
        for case in cases.iter_mut() {
            let name = format!("bench-{run}");
            let image = format!("{host}/{}", case.image);
            eprintln!("kubelet_bench: {image}, run {run}: {mode}");
            cold(&snap.root)?;
            let t = first_line(&mut kubelet, &name, &manifest(&name, Some(&image), probe))
                .map_err(|e| {
                    format!(
                        "{name}: {e}\nthe kubelet's log:\n{}\ncontainerd's log:\n{}",
                        kubelet.log(),
                        tail(&ctd.log())
                    )
                })?;
            eprintln!("kubelet_bench:   {t:.2} s");
            case.runs.push(t);
            stop(&mut kubelet, &name, Some(&image), &snap)?;
        }
    }
    Ok(())
}

/// Waits until told to stop: the shell (the container's PID 1, which
/// ignores a signal it has no handler for) exits on SIGTERM at once, so a
/// pod goes without waiting out its grace period.
const WAIT: &str = "trap 'exit 0' TERM; sleep 2147483647 & wait";

/// A static pod `name` whose container reads a byte of `/mnt/weights/PROBE`
/// (the image volume `image`), prints `ready` and waits; without an image,
/// it just prints and waits.
fn manifest(name: &str, image: Option<&str>, probe: &str) -> String {
    let (script, mounts, volumes) = match image {
        Some(image) => (
            format!("head -c 1 /mnt/weights/{probe} >/dev/null && echo ready; {WAIT}"),
            "      volumeMounts:\n        - {name: weights, mountPath: /mnt/weights, readOnly: true}\n".to_string(),
            format!("  volumes:\n    - name: weights\n      image: {{reference: \"{image}\", pullPolicy: IfNotPresent}}\n"),
        ),
        None => (format!("echo ready; {WAIT}"), String::new(), String::new()),
    };
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n  hostNetwork: true\n  \
         containers:\n    - name: reader\n      image: {BUSYBOX}\n      imagePullPolicy: Never\n      \
         command: [\"/bin/sh\", \"-c\", \"{script}\"]\n{mounts}{volumes}"
    )
}

/// Writes the manifest of static pod `name` and answers the seconds until
/// its container has written a line to stdout (polled every 5 ms in the
/// kubelet's pod log folder; up to 10 minutes).
fn first_line(kubelet: &mut Kubelet, name: &str, manifest: &str) -> Res<f64> {
    let logs = kubelet.pod_logs();
    let prefix = format!("default_{name}-{NODE}_");
    let t0 = Instant::now();
    kubelet.add_pod(name, manifest);
    let deadline = t0 + Duration::from_secs(600);
    loop {
        if let Ok(entries) = std::fs::read_dir(&logs) {
            for e in entries.flatten() {
                if !e.file_name().to_string_lossy().starts_with(&prefix) {
                    continue;
                }
                let log = e.path().join("reader/0.log");
                if let Ok(text) = std::fs::read_to_string(&log) {
                    if text.lines().any(|l| l.split(' ').nth(1) == Some("stdout")) {
                        return Ok(t0.elapsed().as_secs_f64());
                    }
                }
            }
        }
        if Instant::now() > deadline {
            return Err("no output within 10 minutes".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Removes static pod `name`, waits for it to go, then removes `image` and
/// waits for the snapshotter to unmount it.
fn stop(kubelet: &mut Kubelet, name: &str, image: Option<&str>, snap: &Snapshotter) -> Res<()> {
    kubelet.remove_pod(name);
    kubelet.wait_gone(name, Duration::from_secs(120));
    if let Some(image) = image {
        if let Some(status) = kubelet.cri().image_status(image) {
            kubelet.cri().remove_image(&status.id);
        }
        let deadline = Instant::now() + Duration::from_secs(30);
        while !version_mounts_under(&snap.root).is_empty() {
            if Instant::now() > deadline {
                return Err(format!(
                    "still mounted 30 s after RemoveImage: {:?}",
                    version_mounts_under(&snap.root)
                )
                .into());
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}

/// The last 40 lines of `log`.
fn tail(log: &str) -> String {
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(40)..].join("\n")
}
