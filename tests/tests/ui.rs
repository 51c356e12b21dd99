//! The web view (`/ui/`) in a real browser: Debian's chromium driven by
//! playwright-core (`tests/ui/browser.mjs`) against the real `sealvol
//! serve` with authentication on. A writer logs in, opens the volume and
//! a version, copies the mount command (checked against `sealvol stat`),
//! opens the diff of two versions, points a tag, deletes a version and
//! restores it, starts a sync and watches it reach READY; a reader sees no delete button and a delete it crafts is
//! refused. A file named like markup renders as text. axe-core checks
//! every page; screenshots go to `target/tmp/ui-screenshots/`.

use std::path::{Path, PathBuf};
use std::process::Command;

use sealvol_tests::{host, htpasswd_line, json, noise, ok, s, sealvol_bin, write, Sandbox, Server};

const PASSWORD: &str = "pa55 word";

fn browser_deps() -> PathBuf {
    let dir = std::env::var_os("SEALVOL_BROWSER_DEPS")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.deps/browser"));
    assert!(
        dir.join("node_modules/playwright-core").is_dir()
            && dir.join("node_modules/axe-core").is_dir(),
        "playwright-core and axe-core are not in {}: run scripts/deps.sh",
        dir.display()
    );
    dir
}

fn chromium() -> PathBuf {
    let p = PathBuf::from("/usr/bin/chromium");
    assert!(
        p.exists(),
        "/usr/bin/chromium is missing: run scripts/deps.sh"
    );
    p
}

#[test]
fn a_writer_and_a_reader_use_the_web_view_in_a_browser() {
    let (deps, chromium) = (browser_deps(), chromium());
    let sb = Sandbox::new();
    let mut lines = String::new();
    for u in ["writer", "reader"] {
        lines.push_str(&htpasswd_line(u, PASSWORD));
    }
    let htpasswd = sb.path().join("htpasswd");
    std::fs::write(&htpasswd, lines).unwrap();
    let sync_root = sb.path().join("sync-src");
    write(
        &sync_root.join("adapter.safetensors"),
        &noise(200_000, 7),
        0o644,
    );
    write(&sync_root.join("adapter_config.json"), b"{\"r\": 8}", 0o644);
    let config = format!(
        "sync_dir_roots = [{:?}]\n[auth]\nhtpasswd = {:?}\n\
         [[auth.access]]\nrepositories = [\"weights/**\"]\nusers = [\"writer\"]\nactions = [\"pull\", \"push\", \"delete\"]\n\
         [[auth.access]]\nrepositories = [\"weights/**\"]\nusers = [\"reader\"]\nactions = [\"pull\"]\n",
        s(&sync_root),
        s(&htpasswd)
    );
    let server = Server::start_config_env(&sb.path().join("registry"), &config, &[]);
    let reg = host(&server);
    ok(
        sb.sealvol_stdin(
            &reg,
            &["login", &reg, "-u", "writer", "--password-stdin"],
            PASSWORD.as_bytes(),
        ),
        "sealvol login",
    );

    // Two versions: v2 changes model.bin and adds tokenizer.json; both hold
    // a file whose name is markup.
    let v1_dir = sb.path().join("v1");
    write(&v1_dir.join("config.json"), b"{\"layers\": 2}", 0o644);
    write(&v1_dir.join("model.bin"), &noise(3_000_000, 1), 0o644);
    write(&v1_dir.join("<img src=x onerror=alert(1)>"), b"x", 0o644);
    let v2_dir = sb.path().join("v2");
    write(&v2_dir.join("config.json"), b"{\"layers\": 2}", 0o644);
    let mut model = noise(3_000_000, 1);
    model.extend_from_slice(&noise(500_000, 2));
    write(&v2_dir.join("model.bin"), &model, 0o644);
    write(&v2_dir.join("tokenizer.json"), b"{\"vocab\": {}}", 0o644);
    write(&v2_dir.join("<img src=x onerror=alert(1)>"), b"x", 0o644);
    let mut digests = Vec::new();
    for (dir, tag) in [(&v1_dir, "v1"), (&v2_dir, "v2")] {
        let out = ok(
            sb.sealvol(
                &reg,
                &[
                    "push",
                    s(dir),
                    &format!("{reg}/weights/demo:{tag}"),
                    "--no-cache",
                ],
            ),
            "push",
        );
        digests.push(out.trim().rsplit('@').next().unwrap().to_string());
    }
    // What `sealvol stat` says of v2, with the registry named as the page
    // names it (no default registry set).
    let stat = json(
        sb.command(sealvol_bin())
            .args([
                "stat",
                &format!("{reg}/weights/demo@{}", digests[1]),
                "--output",
                "json",
            ])
            .output()
            .unwrap(),
        "stat",
    );

    let out_dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots");
    let _ = std::fs::remove_dir_all(&out_dir);
    std::fs::create_dir_all(&out_dir).unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("ui/browser.mjs");
    let run = Command::new("node")
        .arg(&script)
        .env("URL", &server.url)
        .env("PASSWORD", PASSWORD)
        .env("V1", &digests[0])
        .env("V2", &digests[1])
        .env("STAT_REF", stat["ref"].as_str().unwrap())
        .env("STAT_OCI", stat["oci_ref"].as_str().unwrap())
        .env("SYNC_SOURCE", format!("dir://{}", s(&sync_root)))
        .env("OUT", &out_dir)
        .env("BROWSER_DEPS", &deps)
        .env("CHROMIUM", &chromium)
        .env("HOME", sb.path().join("home"))
        .output()
        .expect("run node");
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(
        run.status.success(),
        "the browser test failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&run.stderr)
    );
    println!("{stdout}");
    for shot in [
        "00-login",
        "01-volumes",
        "02-volume",
        "03-version",
        "04-diff",
        "05-confirm-delete",
        "06-sync",
        "07-syncs",
        "08-version-reader",
    ] {
        let p = out_dir.join(format!("{shot}.png"));
        let len = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        assert!(len > 1000, "no screenshot {}", p.display());
    }
    // The reader's refused delete changed nothing; the writer's sync sealed.
    let versions = json(
        sb.sealvol(
            &reg,
            &[
                "versions",
                &format!("{reg}/weights/demo"),
                "--output",
                "json",
            ],
        ),
        "versions",
    );
    assert_eq!(versions.as_array().map(Vec::len), Some(2), "{versions}");
    ok(
        sb.sealvol(&reg, &["ls", &format!("{reg}/weights/synced")]),
        "the synced volume",
    );
}
