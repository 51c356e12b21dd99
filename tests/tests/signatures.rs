//! Signed versions (issue 35) against the real peers a user signs and
//! checks with: OpenSSF model-signing 1.1.1 (its Python API, from the
//! project venv: its CLI cannot hash with BLAKE3), cosign v3, oras v1.3
//! (`oras attach` to hang a model_signing bundle on a version, `oras copy
//! -r` to mirror a signed version), skopeo and CNCF distribution 2.8 (no
//! referrers API: the referrers tag schema).
//!
//! Each way round is checked: what model_signing and cosign sign, `sealvol
//! verify --signed-by` accepts; what `sealvol sign` pushes, model_signing
//! verifies over the `sealvol pull`ed folder and `cosign verify` accepts.
//! And what must be refused is, in one line, before a byte is written or
//! served: a bundle of another version, of a folder with a file changed or
//! missing, of an untrusted key, and no bundle at all.
//!
//! A missing peer fails the test (naming `bash scripts/deps.sh`, which
//! `scripts/test.sh` runs): these tests are never skipped.

use std::os::unix::fs::PermissionsExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use base64::Engine as _;
use sealvol_tests::forge::Mirror;
use sealvol_tests::fuse::{is_mounted, mountpoint, read, Mounted};
use sealvol_tests::{
    assert_same_tree, fails, go_tool, host, json, noise, ok, s, sha256, stderr, venv_bin, write,
    DockerRegistry, Sandbox, Server,
};
use serde_json::Value;

/// A Sigstore bundle's media type: the referrers' artifactType.
const BUNDLE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The predicateType of model_signing's statements.
const OMS: &str = "https://model_signing/signature/v1.0";

/// model_signing through its Python API: `sign MODEL KEY SIG` hashes every
/// file of MODEL with BLAKE3 and signs with the ECDSA private key KEY;
/// `verify MODEL PUB SIG` checks SIG with the public key PUB and rehashes
/// MODEL as the bundle says it was hashed.
const MODEL_SIGNING: &str = r#"
import sys
import model_signing

op, model, key, sig = sys.argv[1:5]
if op == "sign":
    hashing = (
        model_signing.hashing.Config()
        .use_file_serialization(hashing_algorithm="blake3")
        .set_ignored_paths(paths=[sig], ignore_git_paths=True)
    )
    (
        model_signing.signing.Config()
        .use_elliptic_key_signer(private_key=key)
        .set_hashing_config(hashing)
        .sign(model, sig)
    )
elif op == "verify":
    model_signing.verifying.Config().use_elliptic_key_verifier(public_key=key).verify(model, sig)
else:
    sys.exit(f"unknown operation {op}")
"#;

/// The venv's python, with model_signing importable.
fn python(sb: &Sandbox) -> PathBuf {
    let python = venv_bin("python");
    let probe = sb
        .command(&python)
        .args(["-c", "import model_signing"])
        .output();
    assert!(
        matches!(&probe, Ok(o) if o.status.success()),
        "{} cannot import model_signing ({probe:?}): run `bash scripts/deps.sh` \
         (or `bash scripts/test.sh`), which installs model-signing into the venv",
        python.display()
    );
    python
}

fn model_signing(sb: &Sandbox, op: &str, model: &Path, key: &Path, sig: &Path) -> Output {
    sb.command(python(sb))
        .args(["-c", MODEL_SIGNING, op, s(model), s(key), s(sig)])
        .output()
        .expect("run python")
}

/// model_signing signs `model` with `key` (BLAKE3) into `sig`.
fn ms_sign(sb: &Sandbox, model: &Path, key: &Path, sig: &Path) {
    ok(
        model_signing(sb, "sign", model, key, sig),
        &format!("model_signing sign {}", model.display()),
    );
    assert!(sig.exists(), "model_signing wrote no {}", sig.display());
}

fn oras(sb: &Sandbox) -> Command {
    sb.command(go_tool("oras"))
}

/// cosign with the sandbox's HOME and docker config, no password on its
/// keys, and nothing from the network (no transparency log, no signing
/// config).
fn cosign(sb: &Sandbox, args: &[&str]) -> Output {
    sb.command(go_tool("cosign"))
        .env("COSIGN_PASSWORD", "")
        .env("TUF_ROOT", sb.path().join("home/tuf"))
        .args(args)
        .output()
        .expect("run cosign")
}

/// The key pairs a test signs with, written by openssl into `keys/`: two
/// ECDSA P-256 ones (`ec` and `other`; PKCS#8 private keys) and an Ed25519
/// one (`ed`); `X.pem` private, `X.pub` public.
struct Keys {
    dir: PathBuf,
}

impl Keys {
    fn new(sb: &Sandbox) -> Keys {
        let dir = sb.path().join("keys");
        std::fs::create_dir_all(&dir).unwrap();
        let openssl = |args: &[&str]| {
            let out = Command::new("openssl")
                .current_dir(&dir)
                .args(args)
                .output()
                .expect("run openssl (scripts/deps.sh installs it)");
            ok(out, &format!("openssl {args:?}"));
        };
        for name in ["ec", "other"] {
            sealvol_tests::ec_key(&dir, name);
        }
        openssl(&["genpkey", "-algorithm", "ed25519", "-out", "ed.pem"]);
        openssl(&["pkey", "-in", "ed.pem", "-pubout", "-out", "ed.pub"]);
        Keys { dir }
    }

    fn private(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.pem"))
    }

    fn public(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{name}.pub"))
    }

    /// What sealvol calls the key: `sha256:<hex>` of its DER
    /// SubjectPublicKeyInfo.
    fn fingerprint(&self, name: &str) -> String {
        let pem = std::fs::read_to_string(self.public(name)).unwrap();
        let b64: String = pem.lines().filter(|l| !l.starts_with("-----")).collect();
        let der = base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("PEM base64");
        sha256(&der)
    }

    /// cosign's own key files for `name` (`cosign import-key-pair`, no
    /// password): the private one.
    fn cosign_key(&self, sb: &Sandbox, name: &str) -> PathBuf {
        let prefix = self.dir.join(format!("{name}-cosign"));
        let out = cosign(
            sb,
            &[
                "import-key-pair",
                "--key",
                s(&self.private(name)),
                "--output-key-prefix",
                s(&prefix),
            ],
        );
        ok(out, &format!("cosign import-key-pair {name}.pem"));
        prefix.with_extension("key")
    }
}

/// A model folder model_signing can sign (no symlinks): a 3 MiB weights
/// file, small files in nested folders and an empty file, modes set
/// explicitly.
fn sample(root: &Path) {
    write(&root.join("model.safetensors"), &noise(3 << 20, 35), 0o644);
    write(&root.join("config.json"), b"{\"hidden_size\": 64}\n", 0o644);
    write(&root.join("tokenizer/vocab.txt"), &noise(5000, 36), 0o644);
    write(&root.join("tokenizer/deep/merges.txt"), b"a b\n", 0o644);
    write(&root.join("empty"), b"", 0o644);
    for dir in ["", "tokenizer", "tokenizer/deep"] {
        std::fs::set_permissions(root.join(dir), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
}

/// The files of [`sample`].
const SAMPLE_FILES: usize = 5;

/// A copy of [`sample`] in `root`, then `change` applied to it.
fn sample_with(root: &Path, change: impl FnOnce(&Path)) {
    sample(root);
    change(root);
}

/// A version `sealvol push` published.
struct Version {
    repo: String,
    /// Its version digest's 64 hex digits.
    hex: String,
    /// `sha256:<hex>` of its index on the registry it was pushed to.
    index: String,
}

impl Version {
    /// `bdn:REPO@b3:<hex>`, resolved against the default registry.
    fn reference(&self) -> String {
        format!("bdn:{}@b3:{}", self.repo, self.hex)
    }

    /// `REGISTRY/REPO@<index digest>`: what cosign and oras name.
    fn oci(&self, registry: &str) -> String {
        format!("{registry}/{}@{}", self.repo, self.index)
    }
}

/// `sealvol push SRC bdn:REPO` to `registry`.
fn push(sb: &Sandbox, registry: &str, src: &Path, repo: &str) -> Version {
    let v = json(
        sb.sealvol(
            registry,
            &["push", s(src), &format!("bdn:{repo}"), "--output", "json"],
        ),
        "sealvol push",
    );
    let hex = v["digest"]
        .as_str()
        .and_then(|d| d.strip_prefix("b3:"))
        .unwrap_or_else(|| panic!("push printed {v}"))
        .to_string();
    let index = v["index_digest"]
        .as_str()
        .unwrap_or_else(|| panic!("push printed {v}"))
        .to_string();
    Version {
        repo: repo.to_string(),
        hex,
        index,
    }
}

/// `oras attach` of the bundle file `sig` to the version's index, as
/// model_signing users hang a signature on an OCI artifact.
fn attach(sb: &Sandbox, registry: &str, v: &Version, sig: &Path) {
    let name = sig.file_name().unwrap().to_str().unwrap();
    let out = oras(sb)
        .current_dir(sig.parent().unwrap())
        .args([
            "attach",
            "--plain-http",
            "--artifact-type",
            BUNDLE,
            &v.oci(registry),
            &format!("{name}:{BUNDLE}"),
        ])
        .output()
        .expect("run oras");
    ok(out, &format!("oras attach {name}"));
}

/// The signature referrers of the version (the descriptors), from the
/// registry's referrers API, or its referrers tag where it has none.
fn referrers(registry: &str, v: &Version) -> Vec<Value> {
    let client = reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .unwrap();
    let r = client
        .get(format!(
            "http://{registry}/v2/{}/referrers/{}",
            v.repo, v.index
        ))
        .send()
        .expect("GET referrers");
    let index: Value = if r.status().is_success() {
        r.json().expect("a referrers index")
    } else {
        let tag = v.index.replace(':', "-");
        match Mirror::new(registry).manifest(&v.repo, &tag) {
            Some((bytes, _)) => serde_json::from_slice(&bytes).unwrap(),
            None => return Vec::new(),
        }
    };
    index["manifests"].as_array().cloned().unwrap_or_default()
}

/// The bundle bytes of the referrer `desc` (its manifest's one layer).
fn bundle_of(registry: &str, repo: &str, desc: &Value) -> Vec<u8> {
    let mirror = Mirror::new(registry);
    let (bytes, _) = mirror
        .manifest(repo, desc["digest"].as_str().unwrap())
        .expect("the referrer manifest");
    let manifest: Value = serde_json::from_slice(&bytes).unwrap();
    let layers = manifest["layers"].as_array().expect("layers");
    assert_eq!(layers.len(), 1, "{manifest}");
    assert_eq!(layers[0]["mediaType"], BUNDLE, "{manifest}");
    mirror.blob(repo, layers[0]["digest"].as_str().unwrap())
}

/// The bundle of the OMS signature `sealvol sign` pushed for the version
/// (the referrer that names the version in `dev.sealvol.version`).
fn sealvol_bundle(registry: &str, v: &Version) -> Vec<u8> {
    let all = referrers(registry, v);
    let ours: Vec<&Value> = all
        .iter()
        .filter(|d| {
            d["annotations"]["dev.sealvol.version"] == format!("b3:{}", v.hex).as_str()
                && d["annotations"]["dev.sigstore.bundle.predicateType"] == OMS
        })
        .collect();
    assert_eq!(ours.len(), 1, "one OMS referrer from sealvol sign: {all:?}");
    assert_eq!(ours[0]["artifactType"], BUNDLE, "{:?}", ours[0]);
    bundle_of(registry, &v.repo, ours[0])
}

/// A registry that must not have the referrers API: distribution 2.8.
fn assert_no_referrers_api(registry: &str, v: &Version) {
    let r = reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!(
            "http://{registry}/v2/{}/referrers/{}",
            v.repo, v.index
        ))
        .send()
        .unwrap();
    assert_eq!(r.status(), 404, "distribution 2.8 has no referrers API");
}

/// The one line of a `sealvol verify` that passed, checked: it names the
/// version, the key file and its fingerprint, and what is covered.
fn assert_verified(out: Output, v: &Version, keys: &Keys, key: &str, covers: &str) -> String {
    let what = format!("sealvol verify {} --signed-by {key}.pub", v.reference());
    let err = stderr(&out);
    let line = ok(out, &what);
    assert_eq!(line.lines().count(), 1, "{what}: {line}");
    assert_eq!(
        line,
        format!(
            "{}: signed by {} ({}), {covers}",
            v.reference(),
            s(&keys.public(key)),
            keys.fingerprint(key)
        ),
        "{what}"
    );
    assert!(err.is_empty(), "{what}: stderr {err}");
    line
}

fn verify(sb: &Sandbox, registry: &str, v: &Version, keys: &Keys, key: &str) -> Output {
    sb.sealvol(
        registry,
        &[
            "verify",
            &v.reference(),
            "--signed-by",
            s(&keys.public(key)),
        ],
    )
}

/// `sealvol signatures REF --signed-by KEY.pub --output json`.
fn signatures(sb: &Sandbox, registry: &str, v: &Version, keys: &Keys, key: &str) -> Vec<Value> {
    let list = json(
        sb.sealvol(
            registry,
            &[
                "signatures",
                &v.reference(),
                "--signed-by",
                s(&keys.public(key)),
                "--output",
                "json",
            ],
        ),
        "sealvol signatures",
    );
    list.as_array()
        .unwrap_or_else(|| panic!("signatures printed {list}"))
        .clone()
}

/// Asserts that `list` holds exactly signatures of `kinds` (sorted), each
/// verified by `key`.
fn assert_all_verified(list: &[Value], keys: &Keys, key: &str, kinds: &[&str]) {
    let mut got: Vec<&str> = list.iter().map(|f| f["kind"].as_str().unwrap()).collect();
    got.sort();
    assert_eq!(got, kinds, "{list:?}");
    for f in list {
        assert_eq!(f["verified"], true, "{f}");
        assert_eq!(f["matches"], true, "{f}");
        assert_eq!(f["signer"], keys.fingerprint(key).as_str(), "{f}");
        assert_eq!(f["key"], s(&keys.public(key)), "{f}");
        assert!(f.get("problem").is_none(), "{f}");
        if f["kind"] == "oms" {
            assert_eq!(f["files"], SAMPLE_FILES, "{f}");
        }
    }
}

#[test]
fn model_signing_and_sealvol_sign_verify_each_other() {
    let sb = Sandbox::new();
    let keys = Keys::new(&sb);
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let v = push(&sb, &reg, &src, "ns/vol");

    // model_signing signs the folder; oras hangs the bundle on the version.
    let sig = sb.path().join("sigs/model.sig");
    std::fs::create_dir_all(sig.parent().unwrap()).unwrap();
    ms_sign(&sb, &src, &keys.private("ec"), &sig);
    attach(&sb, &reg, &v, &sig);
    assert_verified(
        verify(&sb, &reg, &v, &keys, "ec"),
        &v,
        &keys,
        "ec",
        &format!("{SAMPLE_FILES} files"),
    );

    // sealvol signs with a key it reads from the environment: the PEM is
    // in no argument and in nothing it prints.
    let pem = std::fs::read_to_string(keys.private("ec")).unwrap();
    let out = sb
        .command(sealvol_tests::sealvol_bin())
        .env("SEALVOL_REGISTRY", &reg)
        .env("SEALVOL_TEST_SIGNING_KEY", &pem)
        .args([
            "sign",
            &v.reference(),
            "--key",
            "env://SEALVOL_TEST_SIGNING_KEY",
        ])
        .output()
        .expect("run sealvol sign");
    let printed = format!("{}{}", String::from_utf8_lossy(&out.stdout), stderr(&out));
    for line in pem.lines().filter(|l| !l.starts_with("-----")) {
        assert!(
            !printed.contains(line),
            "sealvol sign printed its key: {printed}"
        );
    }
    let text = ok(out, "sealvol sign --key env://…");
    assert!(
        text.starts_with(&format!(
            "signed {} ({SAMPLE_FILES} files) with {} (ecdsa-p256)\n  oms    sha256:",
            v.reference(),
            keys.fingerprint("ec")
        )),
        "sealvol sign printed {text:?}"
    );
    // A variable that is not there: one line that names it, not a key.
    let unset = fails(
        sb.sealvol(
            &reg,
            &[
                "sign",
                &v.reference(),
                "--key",
                "env://SEALVOL_TEST_NO_SUCH_KEY",
            ],
        ),
        "sealvol sign --key env://<unset>",
    );
    assert!(unset.contains("SEALVOL_TEST_NO_SUCH_KEY"), "{unset}");

    // Both signatures list as verified by ec.pub; without a key, neither
    // is checked.
    let list = signatures(&sb, &reg, &v, &keys, "ec");
    assert_all_verified(&list, &keys, "ec", &["oms", "oms"]);
    let unchecked = json(
        sb.sealvol(&reg, &["signatures", &v.reference(), "--output", "json"]),
        "sealvol signatures (no key)",
    );
    let unchecked = unchecked.as_array().unwrap();
    assert_eq!(unchecked.len(), 2, "{unchecked:?}");
    for f in unchecked {
        assert_eq!(f["verified"], false, "{f}");
        assert_eq!(f["matches"], true, "{f}");
        assert_eq!(f["problem"], "not checked: no trusted key given", "{f}");
    }
    // Signed by another key, they list as not verified.
    for f in signatures(&sb, &reg, &v, &keys, "other") {
        assert_eq!(f["verified"], false, "{f}");
        assert_eq!(f["problem"], "signed by none of the trusted keys", "{f}");
    }

    // The pulled folder, checked by sealvol first, is what model_signing
    // verifies sealvol's bundle (and its own) against.
    let pulled = sb.path().join("pulled");
    ok(
        sb.sealvol(
            &reg,
            &[
                "pull",
                &v.reference(),
                s(&pulled),
                "--require-signature",
                s(&keys.public("ec")),
            ],
        ),
        "sealvol pull --require-signature",
    );
    assert_same_tree(&src, &pulled);
    let ours = sb.path().join("sigs/sealvol.sig");
    std::fs::write(&ours, sealvol_bundle(&reg, &v)).unwrap();
    for bundle in [&ours, &sig] {
        ok(
            model_signing(&sb, "verify", &pulled, &keys.public("ec"), bundle),
            &format!("model_signing verify {}", bundle.display()),
        );
        // model_signing itself checks: another key does not verify.
        let refused = model_signing(&sb, "verify", &pulled, &keys.public("other"), bundle);
        assert!(
            !refused.status.success(),
            "model_signing verified {} with another key",
            bundle.display()
        );
    }
    // And it notices a changed file in the folder.
    write(
        &pulled.join("config.json"),
        b"{\"hidden_size\": 65}\n",
        0o644,
    );
    let changed = model_signing(&sb, "verify", &pulled, &keys.public("ec"), &ours);
    assert!(
        !changed.status.success() && stderr(&changed).contains("config.json"),
        "model_signing verified a changed folder: {}",
        stderr(&changed)
    );

    // cat and mount serve it under --require-signature.
    let cat = sb.sealvol(
        &reg,
        &[
            "cat",
            &format!("{}/config.json", v.reference()),
            "--require-signature",
            s(&keys.public("ec")),
        ],
    );
    assert!(cat.status.success(), "cat: {}", stderr(&cat));
    assert_eq!(cat.stdout, b"{\"hidden_size\": 64}\n");
    let mnt = mountpoint(&sb, "mnt");
    let mut m = Mounted::start(
        &sb,
        &reg,
        &[
            "mount",
            &v.reference(),
            s(&mnt),
            "--require-signature",
            s(&keys.public("ec")),
        ],
        &[&mnt],
    );
    assert_eq!(
        read(&mnt.join("tokenizer/deep/merges.txt")).unwrap(),
        b"a b\n"
    );
    m.stop();
}

/// `sealvol mount REF MNT --require-signature KEY` exits 1 with one line
/// and mounts nothing.
fn assert_mount_refused(
    sb: &Sandbox,
    reg: &str,
    reference: &str,
    key: &Path,
    name: &str,
) -> String {
    let mnt = mountpoint(sb, &format!("mnt-{name}"));
    match Mounted::try_start(
        sb,
        reg,
        &["mount", reference, s(&mnt), "--require-signature", s(key)],
        &[&mnt],
    ) {
        Ok(mut m) => {
            m.stop();
            panic!("{name}: {reference} was mounted");
        }
        Err(f) => {
            assert_eq!(f.status.and_then(|s| s.code()), Some(1), "{name}: {f:?}");
            assert_eq!(f.stderr.lines().count(), 1, "{name}: {f:?}");
            assert!(
                f.stderr.starts_with("sealvol: ") && !f.stderr.contains("panicked"),
                "{name}: {f:?}"
            );
            assert!(!is_mounted(&mnt), "{name}: something is mounted");
            assert_eq!(std::fs::read_dir(&mnt).unwrap().count(), 0);
            f.stderr.trim().to_string()
        }
    }
}

#[test]
fn a_version_without_a_matching_trusted_signature_is_refused_before_a_byte() {
    let sb = Sandbox::new();
    let keys = Keys::new(&sb);
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let sigs = sb.path().join("sigs");
    std::fs::create_dir_all(&sigs).unwrap();

    // A signature of another version: model_signing over another folder,
    // and sealvol's own (its subject names the other version).
    let elsewhere = sb.path().join("elsewhere");
    write(&elsewhere.join("weights.bin"), &noise(100_000, 7), 0o644);
    write(&elsewhere.join("README.md"), b"another model\n", 0o644);
    let other_version = push(&sb, &reg, &elsewhere, "ns/elsewhere");
    ok(
        sb.sealvol(
            &reg,
            &[
                "sign",
                &other_version.reference(),
                "--key",
                s(&keys.private("ec")),
            ],
        ),
        "sealvol sign (another version)",
    );
    std::fs::write(
        sigs.join("sealvol-elsewhere.sig"),
        sealvol_bundle(&reg, &other_version),
    )
    .unwrap();
    ms_sign(
        &sb,
        &elsewhere,
        &keys.private("ec"),
        &sigs.join("elsewhere.sig"),
    );
    // One file changed, one missing.
    let changed = sb.path().join("changed");
    sample_with(&changed, |root| {
        write(&root.join("config.json"), b"{\"hidden_size\": 65}\n", 0o644)
    });
    ms_sign(
        &sb,
        &changed,
        &keys.private("ec"),
        &sigs.join("changed.sig"),
    );
    let missing = sb.path().join("missing");
    sample_with(&missing, |root| {
        std::fs::remove_file(root.join("tokenizer/vocab.txt")).unwrap()
    });
    ms_sign(
        &sb,
        &missing,
        &keys.private("ec"),
        &sigs.join("missing.sig"),
    );
    // The right folder, but signed by a key that is not trusted.
    ms_sign(
        &sb,
        &src,
        &keys.private("other"),
        &sigs.join("untrusted.sig"),
    );

    // Each case is the same version in a repository of its own, with only
    // that signature attached (none for `unsigned`), checked against ec.pub.
    let cases: [(&str, Option<&str>, String); 6] = [
        (
            "other-folder",
            Some("elsewhere.sig"),
            "2 files listed that the version does not have: \"README.md\", \"weights.bin\"".into(),
        ),
        (
            "other-version",
            Some("sealvol-elsewhere.sig"),
            format!("it signs version b3:{}", other_version.hex),
        ),
        (
            "changed",
            Some("changed.sig"),
            "1 files whose BLAKE3 differs: \"config.json\"".into(),
        ),
        (
            "missing",
            Some("missing.sig"),
            "1 files the statement does not list: \"tokenizer/vocab.txt\"".into(),
        ),
        (
            "untrusted",
            Some("untrusted.sig"),
            "signed by none of the trusted keys".into(),
        ),
        (
            "unsigned",
            None,
            "is not signed (no signature referrers)".into(),
        ),
    ];
    let trusted = keys.public("ec");
    for (name, sig, why) in &cases {
        let v = push(&sb, &reg, &src, &format!("ns/{name}"));
        if let Some(sig) = sig {
            attach(&sb, &reg, &v, &sigs.join(sig));
        }
        let reference = v.reference();
        let line = fails(
            verify(&sb, &reg, &v, &keys, "ec"),
            &format!("{name}: sealvol verify"),
        );
        assert!(
            line.starts_with(&format!("sealvol: {reference} is not signed")),
            "{name}: {line}"
        );
        assert!(line.contains(why.as_str()), "{name}: {why:?} not in {line}");
        if sig.is_some() {
            assert!(
                line.contains(&format!("is not signed by a trusted key ({})", s(&trusted))),
                "{name}: {line}"
            );
        }

        // pull writes nothing, cat prints nothing, mount mounts nothing,
        // each with the same one line.
        let dest = sb.path().join(format!("pull-{name}"));
        let out = sb.sealvol(
            &reg,
            &[
                "pull",
                &reference,
                s(&dest),
                "--require-signature",
                s(&trusted),
            ],
        );
        assert_eq!(fails(out, &format!("{name}: pull")), line);
        assert!(
            !dest.exists() || std::fs::read_dir(&dest).unwrap().next().is_none(),
            "{name}: pull wrote into {}",
            dest.display()
        );
        let out = sb.sealvol(
            &reg,
            &[
                "cat",
                &format!("{reference}/config.json"),
                "--require-signature",
                s(&trusted),
            ],
        );
        assert!(
            out.stdout.is_empty(),
            "{name}: cat printed {:?}",
            out.stdout
        );
        assert_eq!(fails(out, &format!("{name}: cat")), line);
        // mount says it in the same one line.
        let refused = assert_mount_refused(&sb, &reg, &reference, &trusted, name);
        assert_eq!(refused, line, "{name}: mount");

        // The untrusted signature is sound: its own key accepts it.
        if *name == "untrusted" {
            assert_verified(
                verify(&sb, &reg, &v, &keys, "other"),
                &v,
                &keys,
                "other",
                &format!("{SAMPLE_FILES} files"),
            );
        }
    }
}

#[test]
fn cosign_signatures_verify_in_sealvol_and_sealvol_cosign_signatures_in_cosign() {
    let sb = Sandbox::new();
    let keys = Keys::new(&sb);
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);

    // `cosign sign --key` of the version index, with an imported P-256 key
    // and an Ed25519 one (cosign signs those with Ed25519ph): sealvol
    // accepts each with its public key alone.
    for (name, wrong) in [("ec", "other"), ("ed", "ec")] {
        let v = push(&sb, &reg, &src, &format!("ns/cosign-{name}"));
        let key = keys.cosign_key(&sb, name);
        ok(
            cosign(
                &sb,
                &[
                    "sign",
                    "--key",
                    s(&key),
                    "--tlog-upload=false",
                    "--use-signing-config=false",
                    "--allow-http-registry",
                    "-y",
                    &v.oci(&reg),
                ],
            ),
            &format!("cosign sign ({name})"),
        );
        assert_verified(
            verify(&sb, &reg, &v, &keys, name),
            &v,
            &keys,
            name,
            "the version index",
        );
        assert_all_verified(
            &signatures(&sb, &reg, &v, &keys, name),
            &keys,
            name,
            &["cosign"],
        );
        let line = fails(
            verify(&sb, &reg, &v, &keys, wrong),
            &format!("cosign {name}: verify with {wrong}.pub"),
        );
        assert!(
            line.contains("signed by none of the trusted keys"),
            "{line}"
        );
    }

    // `sealvol sign --cosign`: `cosign verify --key` accepts it (P-256 and
    // Ed25519), and refuses it with another key.
    for (name, wrong) in [("ec", "other"), ("ed", "ec")] {
        let v = push(&sb, &reg, &src, &format!("ns/sealvol-{name}"));
        let signed = json(
            sb.sealvol(
                &reg,
                &[
                    "sign",
                    &v.reference(),
                    "--key",
                    s(&keys.private(name)),
                    "--cosign",
                    "--output",
                    "json",
                ],
            ),
            &format!("sealvol sign --cosign ({name})"),
        );
        assert_eq!(signed["signed"]["manifests"].as_array().unwrap().len(), 2);
        assert_eq!(signed["signed"]["referrers_api"], true, "{signed}");
        let cosign_verify = |key: &str| {
            cosign(
                &sb,
                &[
                    "verify",
                    "--key",
                    s(&keys.public(key)),
                    "--insecure-ignore-tlog=true",
                    "--allow-http-registry",
                    &v.oci(&reg),
                ],
            )
        };
        let out = cosign_verify(name);
        let err = stderr(&out);
        let printed = ok(out, &format!("cosign verify ({name})"));
        assert!(
            printed.contains(&v.index.replace("sha256:", "")) || printed.contains(&v.index),
            "cosign verify printed {printed}; {err}"
        );
        let refused = cosign_verify(wrong);
        assert!(
            !refused.status.success(),
            "cosign verified the {name} signature with {wrong}.pub"
        );
        assert_all_verified(
            &signatures(&sb, &reg, &v, &keys, name),
            &keys,
            name,
            &["cosign", "oms"],
        );
    }
}

#[test]
fn signatures_follow_oras_copy_to_distribution_but_not_skopeo_copy() {
    let sb = Sandbox::new();
    let keys = Keys::new(&sb);
    let src = sb.path().join("src");
    sample(&src);
    let serve = Server::start(&sb.path().join("serve"));
    let reg = host(&serve);
    let v = push(&sb, &reg, &src, "ns/vol");
    ok(
        sb.sealvol(
            &reg,
            &[
                "sign",
                &v.reference(),
                "--key",
                s(&keys.private("ec")),
                "--cosign",
            ],
        ),
        "sealvol sign --cosign",
    );

    // `oras copy -r` mirrors the version and its referrers to distribution
    // 2.8, which keeps them under the referrers tag schema: the index keeps
    // its digest, and sealvol and cosign find both signatures there.
    let dist = DockerRegistry::start();
    let d = dist.addr();
    ok(
        oras(&sb)
            .args([
                "copy",
                "-r",
                "--from-plain-http",
                "--to-plain-http",
                &format!("{reg}/ns/vol:b3-{}", v.hex),
                &format!("{d}/ns/vol:b3-{}", v.hex),
            ])
            .output()
            .expect("run oras"),
        "oras copy -r",
    );
    assert_no_referrers_api(&d, &v);
    assert!(
        Mirror::new(&d)
            .manifest("ns/vol", &v.index.replace(':', "-"))
            .is_some(),
        "oras copy -r made no referrers tag"
    );
    let line = ok(verify(&sb, &d, &v, &keys, "ec"), "verify on the copy");
    assert!(
        line.starts_with(&format!(
            "{}: signed by {} ({})",
            v.reference(),
            s(&keys.public("ec")),
            keys.fingerprint("ec")
        )),
        "{line}"
    );
    assert_all_verified(
        &signatures(&sb, &d, &v, &keys, "ec"),
        &keys,
        "ec",
        &["cosign", "oms"],
    );
    ok(
        cosign(
            &sb,
            &[
                "verify",
                "--key",
                s(&keys.public("ec")),
                "--insecure-ignore-tlog=true",
                "--allow-http-registry",
                &v.oci(&d),
            ],
        ),
        "cosign verify on the copy",
    );
    let pulled = sb.path().join("pulled");
    ok(
        sb.sealvol(
            &d,
            &[
                "pull",
                &v.reference(),
                s(&pulled),
                "--require-signature",
                s(&keys.public("ec")),
            ],
        ),
        "pull --require-signature from the copy",
    );
    assert_same_tree(&src, &pulled);

    // skopeo 1.9 re-serializes what it copies with `--all`: the version's
    // index loses its artifactType and so gets another digest, and the
    // referrers tag's index loses its entries' artifactType. Signed on
    // distribution (the tag schema), both tags copied to another one: the
    // signatures do not follow, and sealvol says the copy is unsigned
    // (one line) rather than passing it.
    let origin = &dist;
    let o = origin.addr();
    let w = push(&sb, &o, &src, "ns/skopeo");
    let signed = json(
        sb.sealvol(
            &o,
            &[
                "sign",
                &w.reference(),
                "--key",
                s(&keys.private("ec")),
                "--output",
                "json",
            ],
        ),
        "sealvol sign on distribution",
    );
    assert_eq!(signed["signed"]["referrers_api"], false, "{signed}");
    assert_verified(
        verify(&sb, &o, &w, &keys, "ec"),
        &w,
        &keys,
        "ec",
        &format!("{SAMPLE_FILES} files"),
    );
    let target = DockerRegistry::start();
    let t = target.addr();
    let referrers_tag = w.index.replace(':', "-");
    for tag in [format!("b3-{}", w.hex), referrers_tag.clone()] {
        let out = sb
            .command("skopeo")
            .args([
                "copy",
                "--all",
                "--src-tls-verify=false",
                "--dest-tls-verify=false",
                &format!("docker://{o}/ns/skopeo:{tag}"),
                &format!("docker://{t}/ns/skopeo:{tag}"),
            ])
            .output()
            .expect("run skopeo (scripts/deps.sh installs it)");
        ok(out, &format!("skopeo copy --all {tag}"));
    }
    let copied = Mirror::new(&t)
        .manifest_digest("ns/skopeo", &format!("b3-{}", w.hex))
        .expect("the copied version");
    assert_ne!(
        copied, w.index,
        "skopeo kept the index digest: the skopeo finding changed, update this test"
    );
    let (tag_index, _) = Mirror::new(&t)
        .manifest("ns/skopeo", &referrers_tag)
        .expect("the copied referrers tag");
    let tag_index: Value = serde_json::from_slice(&tag_index).unwrap();
    let entries = tag_index["manifests"].as_array().unwrap();
    assert_eq!(entries.len(), 1, "{tag_index}");
    assert!(
        entries[0].get("artifactType").is_none(),
        "skopeo kept the entries' artifactType: {tag_index}"
    );
    let line = fails(
        verify(&sb, &t, &w, &keys, "ec"),
        "verify on the skopeo copy",
    );
    assert_eq!(
        line,
        format!(
            "sealvol: {} is not signed (no signature referrers); sign it with `sealvol sign`",
            w.reference()
        )
    );
    let listed = ok(
        sb.sealvol(&t, &["signatures", &w.reference()]),
        "signatures on the skopeo copy",
    );
    assert_eq!(listed, "no signatures");
    // The copy's content is intact: it pulls without a signature required.
    let pulled = sb.path().join("pulled-skopeo");
    ok(
        sb.sealvol(&t, &["pull", &w.reference(), s(&pulled)]),
        "pull of the skopeo copy",
    );
    assert_same_tree(&src, &pulled);
}

#[test]
fn a_deleted_signature_still_in_the_referrers_tag_leaves_the_others_to_decide() {
    let sb = Sandbox::new();
    let keys = Keys::new(&sb);
    let src = sb.path().join("src");
    sample(&src);
    // distribution 2.8: the referrers tag schema, whose index nobody
    // updates when a signature manifest is deleted.
    let dist = DockerRegistry::start();
    let d = dist.addr();
    let v = push(&sb, &d, &src, "ns/vol");
    let sign = || {
        json(
            sb.sealvol(
                &d,
                &[
                    "sign",
                    &v.reference(),
                    "--key",
                    s(&keys.private("ec")),
                    "--output",
                    "json",
                ],
            ),
            "sealvol sign",
        )["signed"]["manifests"][0]
            .as_str()
            .unwrap()
            .to_string()
    };
    let kept = sign();
    let deleted = sign();
    assert_ne!(kept, deleted);
    let r = reqwest::blocking::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .delete(format!("http://{d}/v2/{}/manifests/{deleted}", v.repo))
        .send()
        .unwrap();
    assert_eq!(r.status(), 202, "DELETE of the signature manifest");
    let listed: Vec<String> = referrers(&d, &v)
        .iter()
        .map(|r| r["digest"].as_str().unwrap().to_string())
        .collect();
    assert!(listed.contains(&deleted), "{listed:?}");

    assert_verified(
        verify(&sb, &d, &v, &keys, "ec"),
        &v,
        &keys,
        "ec",
        &format!("{SAMPLE_FILES} files"),
    );
    let list = signatures(&sb, &d, &v, &keys, "ec");
    assert_eq!(list.len(), 2, "{list:?}");
    for f in &list {
        if f["manifest"] == deleted.as_str() {
            assert_eq!(f["verified"], false, "{f}");
            assert!(f["problem"].as_str().unwrap().contains("not found"), "{f}");
        } else {
            assert_eq!(f["manifest"], kept.as_str(), "{f}");
            assert_eq!(f["verified"], true, "{f}");
        }
    }
}
