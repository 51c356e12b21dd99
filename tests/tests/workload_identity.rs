//! Workload identity for `s3://` sources (SPEC.md §8.1) end to end: a real
//! `sealvol serve` whose environment names a web-identity token file and a
//! role syncs a private bucket with no stored secret, against moto with IAM
//! enforced — moto's STS hands out credentials of the role, and its S3
//! allows or refuses them by the role's policy, as AWS does.
//!
//! One moto quirk shapes the test: with enforcement on, moto refuses even
//! `AssumeRoleWithWebIdentity`, which AWS serves unsigned (the token is the
//! credential). So each registry is let through with one unsigned request,
//! its first: the exchange, which the registry makes once and shares.

use std::path::Path;

use sealvol_tests::{fails, host, json, noise, ok, s, tree, Moto, Node, Sandbox, Server};
use serde_json::Value;

const TOKEN: &str = "eyJhbGciOiJSUzI1NiIsImtpZCI6InRlc3QifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6bWw6c2VhbHZvbCJ9.c2lnbmF0dXJl";

const READ_PRIVATE: &str = r#"{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":["s3:GetObject","s3:ListBucket"],"Resource":["arn:aws:s3:::private","arn:aws:s3:::private/*"]}]}"#;

/// A registry with `role` as `AWS_ROLE_ARN`, and the sandbox its CLI runs in.
struct Registry {
    sb: Sandbox,
    server: Server,
}

impl Registry {
    fn start(moto: &Moto, token_file: &Path, role: &str) -> Registry {
        let sb = Sandbox::new();
        let server = Server::start_config_aws_env(
            &sb.path().join("registry"),
            "sync_workers = 1",
            &[
                ("AWS_ENDPOINT_URL", moto.url()),
                ("AWS_REGION", "us-east-1"),
                ("AWS_WEB_IDENTITY_TOKEN_FILE", s(token_file)),
                ("AWS_ROLE_ARN", role),
                ("AWS_ENDPOINT_URL_STS", moto.url()),
            ],
        );
        Registry { sb, server }
    }

    fn sealvol(&self, args: &[&str]) -> std::process::Output {
        self.sb.sealvol(&host(&self.server), args)
    }

    fn sync_wait(&self, source: &str, dest: &str, extra: &[&str]) -> std::process::Output {
        let dest = format!("{}/{dest}", host(&self.server));
        let mut args = vec![
            "sync", "start", "--source", source, "--dest", &dest, "--wait", "--output", "json",
        ];
        args.extend_from_slice(extra);
        self.sealvol(&args)
    }

    /// A job that must fail: its stderr line and the job as described.
    fn sync_failed(&self, source: &str, dest: &str, extra: &[&str]) -> (String, Value) {
        let line = fails(self.sync_wait(source, dest, extra), "sync start --wait");
        let id = line
            .strip_prefix("sealvol: sync ")
            .and_then(|rest| rest.split_once(" failed: "))
            .map(|(id, _)| id.to_string())
            .unwrap_or_else(|| panic!("not `sealvol: sync ID failed: …`: {line:?}"));
        let h = host(&self.server);
        let job = json(
            self.sealvol(&[
                "sync",
                "describe",
                &id,
                "--registry",
                &h,
                "--output",
                "json",
            ]),
            "sync describe",
        );
        assert_eq!(job["state"], "FAILED", "{job}");
        (line, job)
    }
}

#[test]
fn s3_without_a_secret_assumes_the_role_of_the_web_identity_token() {
    let files: Vec<(&str, Vec<u8>)> = vec![
        ("config.json", br#"{"hidden":64}"#.to_vec()),
        ("model.safetensors", noise(3 * (1 << 20) + 5, 7)),
        ("tokenizer/vocab.txt", noise(20_000, 8)),
    ];
    let moto = Moto::start();
    moto.create_bucket("private");
    for (path, bytes) in &files {
        moto.put("private", &format!("team/llm/{path}"), bytes);
    }
    let reader = moto.create_role("reader", Some(READ_PRIVATE));
    let nobody = moto.create_role("nobody", None);
    let tokens = tempfile::tempdir().expect("token folder");
    let token_file = tokens.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("write the token");

    // The role that may read: READY, with the bucket's files.
    let reg = Registry::start(&moto, &token_file, &reader);
    moto.enforce_iam(1);
    let job = json(
        reg.sync_wait("s3://private/team/llm", "wid/llm:v1", &[]),
        "sync start --wait with workload identity",
    );
    assert_eq!(job["state"], "READY", "{job}");
    assert!(job["secret"].is_null(), "{job}");
    let digest = job["version"]["digest"]
        .as_str()
        .unwrap_or_else(|| panic!("no version digest: {job}"))
        .to_string();
    let pulled = reg.sb.path().join("pulled");
    let reference = format!("{}/wid/llm@{digest}", host(&reg.server));
    ok(
        reg.sealvol(&["pull", &reference, s(&pulled), "--output", "json"]),
        "pull",
    );
    let got: Vec<(String, Node)> = tree(&pulled)
        .into_iter()
        .filter(|(_, n)| matches!(n, Node::File { .. }))
        .collect();
    let want: Vec<(String, Node)> = files
        .iter()
        .map(|(path, bytes)| {
            let node = Node::File {
                mode: 0o644,
                len: bytes.len() as u64,
                sha256: sealvol_tests::sha256(bytes),
            };
            (path.to_string(), node)
        })
        .collect();
    assert_eq!(got, want, "the version is not the bucket's files");

    // Enforcement is on: keys moto never issued are refused, so the READY
    // above was the role's doing.
    let h = host(&reg.server);
    ok(
        reg.sb.sealvol_stdin(
            &h,
            &[
                "secret",
                "set",
                "bogus",
                "--for",
                "s3://private",
                "--registry",
                &h,
            ],
            b"AKIAIOSFODNN7EXAMPLE:wJalrXUtnFEMI",
        ),
        "secret set",
    );
    let (line, job) = reg.sync_failed("s3://private/team/llm", "wid/bogus", &["--secret", "bogus"]);
    assert_eq!(job["error"]["code"], "SOURCE_DENIED", "{line}\n{job}");

    // A role without S3 rights: the exchange works, the bucket refuses.
    let denied = Registry::start(&moto, &token_file, &nobody);
    moto.enforce_iam(1);
    let (line, job) = denied.sync_failed("s3://private/team/llm", "wid/llm", &[]);
    assert_eq!(job["error"]["code"], "SOURCE_DENIED", "{line}\n{job}");
    let message = job["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(&nobody),
        "the role is not named: {message}"
    );
    for text in [&line, message] {
        assert!(!text.contains(TOKEN), "the token leaked: {text}");
    }
}
