//! Registry credentials end to end, against CNCF distribution 2.8 with
//! `htpasswd` authentication: without credentials a push or pull fails with
//! one line that says to run `sealvol login`; `sealvol login` checks the
//! password with the registry before it stores anything, and stores it in
//! docker's `config.json` the way `docker login` does, so sealvol and
//! standard tools (skopeo) read each other's credentials.

use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Output;

use base64::Engine as _;
use sealvol_tests::{
    assert_same_tree, closed_addr, fails, json, ok, s, stderr, tree, write, DockerRegistry, Sandbox,
};
use serde_json::Value;

const USER: &str = "alice";
/// With a colon and a space: docker's `auth` is base64 of `user:password`
/// and readers split it at the first colon.
const PASSWORD: &str = "c0rrect:horse battery";

/// A small tree: files of several sizes and modes, a nested directory, an
/// empty one and a symlink. Modes are set explicitly, whatever the umask.
fn sample(root: &Path) {
    let noise: Vec<u8> = (0..200_000u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    write(&root.join("weights.bin"), &noise, 0o644);
    write(&root.join("config.json"), b"{\"hidden_size\": 64}\n", 0o644);
    write(&root.join("secret.key"), b"not for everyone\n", 0o600);
    write(&root.join("run.sh"), b"#!/bin/sh\necho hi\n", 0o755);
    write(&root.join("nested/params.json"), b"{\"lr\": 0.1}\n", 0o644);
    std::fs::create_dir_all(root.join("emptydir")).unwrap();
    symlink("nested/params.json", root.join("link")).unwrap();
    for dir in ["", "nested", "emptydir"] {
        std::fs::set_permissions(root.join(dir), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// docker's `auth` value: base64 of `user:password`.
fn basic(user: &str, password: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))
}

/// The sandbox's `$DOCKER_CONFIG/config.json`.
fn config_json(sb: &Sandbox) -> PathBuf {
    sb.docker_config().join("config.json")
}

/// The names in the sandbox's `$DOCKER_CONFIG`.
fn docker_config_files(sb: &Sandbox) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(sb.docker_config())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Writes `config.json` into the sandbox's `$DOCKER_CONFIG` by hand, as
/// `docker login HOST` does: an `auths` entry keyed by `host[:port]` whose
/// `auth` is base64 of `user:password`.
fn docker_login_by_hand(sb: &Sandbox, host: &str, user: &str, password: &str) {
    let config = serde_json::json!({ "auths": { host: { "auth": basic(user, password) } } });
    write(
        &config_json(sb),
        serde_json::to_string_pretty(&config).unwrap().as_bytes(),
        0o600,
    );
}

/// `sealvol login HOST -u USER --password-stdin` with `stdin`.
fn login(sb: &Sandbox, host: &str, user: &str, stdin: &[u8]) -> Output {
    sb.sealvol_stdin(
        &closed_addr(),
        &["login", host, "-u", user, "--password-stdin"],
        stdin,
    )
}

/// Pulls `reference` into `dest` through a fresh cache, so every chunk
/// comes from the registry; asserts that some did.
fn pull_fresh(sb: &Sandbox, reference: &str, dest: &Path) -> Value {
    let cache = tempfile::tempdir().unwrap();
    let v = json(
        sb.sealvol(
            &closed_addr(),
            &[
                "pull",
                reference,
                s(dest),
                "--cache-dir",
                s(cache.path()),
                "--output",
                "json",
            ],
        ),
        &format!("pull {reference}"),
    );
    assert!(v["chunks"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["chunks_downloaded"], v["chunks"], "fresh cache: {v}");
    v
}

/// `skopeo inspect` of `image` (`docker://…`) with `authfile` as its only
/// source of credentials: skopeo 1.9 also reads `$DOCKER_CONFIG/config.json`
/// when given `--authfile`, so `DOCKER_CONFIG` names an empty folder here.
fn skopeo_inspect(sb: &Sandbox, authfile: &Path, image: &str) -> Output {
    let no_config = tempfile::tempdir().unwrap();
    sb.command("skopeo")
        .env("DOCKER_CONFIG", no_config.path())
        .env_remove("XDG_CONFIG_HOME")
        .args([
            "inspect",
            "--tls-verify=false",
            "--authfile",
            s(authfile),
            image,
        ])
        .output()
        .expect("run skopeo (installed by scripts/deps.sh)")
}

#[test]
fn without_credentials_push_and_pull_fail_with_one_line_that_says_sealvol_login() {
    let registry = DockerRegistry::start_with_htpasswd(USER, PASSWORD);
    let host = registry.addr();
    let repo = format!("{host}/ns/vol");

    // A version to pull, pushed by someone who has the credentials.
    let owner = Sandbox::new();
    docker_login_by_hand(&owner, &host, USER, PASSWORD);
    let owner_src = owner.path().join("src");
    sample(&owner_src);
    ok(
        owner.sealvol(&closed_addr(), &["push", s(&owner_src), &repo]),
        "push with credentials",
    );

    let sb = Sandbox::new();
    let src = sb.path().join("src");
    sample(&src);
    std::fs::write(src.join("mine.txt"), b"a version the registry lacks\n").unwrap();
    let dest = sb.path().join("pulled");
    for (what, args) in [
        ("push", vec!["push", s(&src), &repo]),
        ("pull", vec!["pull", &repo, s(&dest)]),
    ] {
        let line = fails(
            sb.sealvol(&closed_addr(), &args),
            &format!("{what} without credentials"),
        );
        assert!(
            line.contains("sealvol login"),
            "{what} without credentials should say to run `sealvol login`: {line}"
        );
        assert!(line.contains(&host), "{what}: name the registry: {line}");
    }
    assert!(
        !dest.exists() || tree(&dest).is_empty(),
        "a denied pull wrote {:?}",
        tree(&dest)
    );
    assert!(
        docker_config_files(&sb).is_empty(),
        "push and pull do not write credentials: {:?}",
        docker_config_files(&sb)
    );
}

#[test]
fn login_with_a_wrong_password_fails_and_leaves_config_json_alone() {
    let registry = DockerRegistry::start_with_htpasswd(USER, PASSWORD);
    let host = registry.addr();
    let sb = Sandbox::new();
    let wrong: [(&str, Vec<u8>); 4] = [
        (USER, b"wrong password\n".to_vec()),
        // The right password with more on the same line.
        (USER, format!("{PASSWORD}x\n").into_bytes()),
        ("bob", format!("{PASSWORD}\n").into_bytes()),
        (USER, b"\n".to_vec()),
    ];

    // No config.json yet: none is created, and no temporary file is left.
    for (user, stdin) in &wrong {
        let what = format!("login -u {user} with {:?}", String::from_utf8_lossy(stdin));
        fails(login(&sb, &host, user, stdin), &what);
        assert!(
            docker_config_files(&sb).is_empty(),
            "{what} wrote {:?}",
            docker_config_files(&sb)
        );
    }

    // An existing config.json keeps its bytes, mode and inode: it is not
    // even rewritten.
    let before = br#"{"auths":{"other.example:5000":{"auth":"dTpw"}},"experimental":"enabled"}"#;
    let path = config_json(&sb);
    write(&path, before, 0o644);
    let meta = std::fs::metadata(&path).unwrap();
    for (user, stdin) in &wrong {
        let what = format!("login -u {user} with {:?}", String::from_utf8_lossy(stdin));
        fails(login(&sb, &host, user, stdin), &what);
        assert_eq!(std::fs::read(&path).unwrap(), before, "{what}");
        let now = std::fs::metadata(&path).unwrap();
        assert_eq!(
            (now.ino(), now.mode() & 0o777, now.mtime(), now.mtime_nsec()),
            (meta.ino(), 0o644, meta.mtime(), meta.mtime_nsec()),
            "{what} replaced or touched config.json"
        );
        assert_eq!(docker_config_files(&sb), ["config.json"], "{what}");
    }
}

#[test]
fn login_stores_docker_credentials_that_push_pull_and_skopeo_use() {
    let registry = DockerRegistry::start_with_htpasswd(USER, PASSWORD);
    let host = registry.addr();
    let repo = format!("{host}/ns/vol");
    let sb = Sandbox::new();

    // The password is the first line of stdin; what follows is ignored.
    ok(
        login(
            &sb,
            &host,
            USER,
            format!("{PASSWORD}\nnot the password\n").as_bytes(),
        ),
        "login with the right password",
    );
    let path = config_json(&sb);
    let mode = std::fs::metadata(&path)
        .unwrap_or_else(|e| panic!("login did not write {}: {e}", path.display()))
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "config.json is for its owner only");
    let config: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(
        config["auths"][&host]["auth"].as_str(),
        Some(basic(USER, PASSWORD).as_str()),
        "{config}"
    );
    assert_eq!(docker_config_files(&sb), ["config.json"]);

    let src = sb.path().join("src");
    sample(&src);
    let printed = ok(
        sb.sealvol(&closed_addr(), &["push", s(&src), &repo]),
        "push after login",
    );
    assert!(
        printed.starts_with(&format!("{repo}@b3:")),
        "push printed {printed:?}"
    );
    let dest = sb.path().join("pulled");
    let v = pull_fresh(&sb, &printed, &dest);
    assert_eq!(v["ref"].as_str(), Some(printed.as_str()), "{v}");
    assert_same_tree(&src, &dest);

    // skopeo reads the same file: it sees the version sealvol pushed, and
    // without the credentials the registry turns it away.
    let stat = json(
        sb.sealvol(&closed_addr(), &["stat", &printed, "--output", "json"]),
        "stat",
    );
    let image = format!("docker://{repo}:head");
    let out = skopeo_inspect(&sb, &path, &image);
    assert!(
        out.status.success(),
        "skopeo inspect with the credentials sealvol login wrote: {}",
        stderr(&out)
    );
    let inspected: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(inspected["Digest"], stat["index_digest"], "{inspected}");
    let empty = sb.path().join("empty-auth.json");
    std::fs::write(&empty, r#"{"auths":{}}"#).unwrap();
    let out = skopeo_inspect(&sb, &empty, &image);
    assert!(
        !out.status.success(),
        "the registry let skopeo in without credentials"
    );
}

#[test]
fn credentials_docker_login_wrote_are_used_without_sealvol_login() {
    let registry = DockerRegistry::start_with_htpasswd(USER, PASSWORD);
    let host = registry.addr();
    let repo = format!("{host}/ns/vol");
    let sb = Sandbox::new();
    docker_login_by_hand(&sb, &host, USER, PASSWORD);

    let src = sb.path().join("src");
    sample(&src);
    let printed = ok(
        sb.sealvol(&closed_addr(), &["push", s(&src), &repo]),
        "push with docker's credentials",
    );
    let dest = sb.path().join("pulled");
    pull_fresh(&sb, &printed, &dest);
    assert_same_tree(&src, &dest);
}
