//! Signatures over a version (SPEC.md §5.9): the OpenSSF model-signing
//! (OMS) in-toto statement that lists every file of a version with its
//! BLAKE3, the cosign statement over a version index, the Sigstore bundle
//! and DSSE envelope that carry them, and the checks that bind a statement
//! to a version.
//!
//! A statement is made from the tree index alone: the tree already holds
//! every file's BLAKE3, bound to the version digest, so signing a version
//! reads no file data. This module does no cryptography and no I/O; keys,
//! signing and signature checks are `sealvol-client`'s.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

use base64::Engine as _;
use serde::{Deserialize, Serialize};
use sha2::{Digest as _, Sha256};
use thiserror::Error;

use crate::digest::{B3Digest, Sha256Digest};
use crate::tree::{EntryData, TreeIndex};

/// Media type of a Sigstore bundle (v0.3): the layer of a signature
/// referrer and its `artifactType`, as cosign 3 writes them.
pub const MT_BUNDLE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// DSSE payload type of an in-toto statement.
pub const PAYLOAD_TYPE: &str = "application/vnd.in-toto+json";
/// `_type` of an in-toto statement, v1.
pub const STATEMENT_TYPE: &str = "https://in-toto.io/Statement/v1";
/// `predicateType` of an OMS statement (model_signing 1.x).
pub const PREDICATE_OMS: &str = "https://model_signing/signature/v1.0";
/// `predicateType` of a `cosign sign` statement.
pub const PREDICATE_COSIGN: &str = "https://sigstore.dev/cosign/sign/v1";
/// Referrer annotation (cosign's): what the bundle holds.
pub const ANN_BUNDLE_CONTENT: &str = "dev.sigstore.bundle.content";
/// Referrer annotation (cosign's): the statement's `predicateType`.
pub const ANN_BUNDLE_PREDICATE: &str = "dev.sigstore.bundle.predicateType";
/// The largest bundle a reader takes, checked before it is fetched: a
/// statement of a million files is about 200 MB of base64.
pub const MAX_BUNDLE_BYTES: u64 = 256 << 20;
/// How many signature referrers of one version a reader fetches.
pub const MAX_SIGNATURES: usize = 32;
/// How many names a mismatch names before "and N more".
const SHOWN: usize = 5;

/// Why a bundle or statement is refused.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum SignatureError {
    #[error("not a Sigstore bundle: {0}")]
    Bundle(String),
    #[error("not an in-toto statement: {0}")]
    Statement(String),
    #[error("{0} is not supported")]
    Unsupported(String),
    /// The statement is well-formed but does not describe this version.
    #[error("the statement does not match {version}: {why}")]
    Mismatch { version: String, why: String },
}

/// A Sigstore bundle (protobuf-specs `Bundle`, proto3 JSON), with the
/// fields sealvol reads or writes; others are ignored.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Bundle {
    pub media_type: String,
    pub verification_material: VerificationMaterial,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dsse_envelope: Option<Envelope>,
    /// A signature over a digest instead of a statement (`cosign
    /// sign-blob`): read only to refuse it clearly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_signature: Option<serde_json::Value>,
}

/// How a bundle names its signer.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VerificationMaterial {
    /// Key-based: only a hint of the key; the verifier supplies the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_key: Option<KeyHint>,
    /// Keyless (v0.3): the Fulcio leaf certificate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certificate: Option<serde_json::Value>,
    /// Keyless (v0.1, v0.2): the certificate chain.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub x509_certificate_chain: Option<serde_json::Value>,
    #[serde(default)]
    pub tlog_entries: Vec<serde_json::Value>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct KeyHint {
    #[serde(default)]
    pub hint: String,
}

/// A DSSE envelope.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Envelope {
    /// Standard base64 of the signed payload.
    pub payload: String,
    pub payload_type: String,
    pub signatures: Vec<EnvelopeSignature>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct EnvelopeSignature {
    /// Standard base64 of the signature: ASN.1 DER for ECDSA, 64 raw bytes
    /// for Ed25519.
    pub sig: String,
    #[serde(default)]
    pub keyid: String,
}

/// An in-toto statement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    #[serde(rename = "_type")]
    pub statement_type: String,
    pub subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    #[serde(default)]
    pub predicate: serde_json::Value,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Subject {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    pub digest: BTreeMap<String, String>,
}

/// The predicate of an OMS statement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OmsPredicate {
    pub resources: Vec<Resource>,
    pub serialization: Serialization,
}

/// One file of an OMS statement.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Resource {
    pub name: String,
    pub algorithm: String,
    /// Lowercase hex.
    pub digest: String,
}

/// How the files were hashed, as model_signing records it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Serialization {
    pub method: String,
    pub hash_type: String,
    #[serde(default)]
    pub allow_symlinks: bool,
    /// Paths (relative to the root) the signer left out; a directory
    /// leaves out what is under it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_paths: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shard_size: Option<u64>,
}

/// The `-----BEGIN PUBLIC KEY-----` PEM text of a DER
/// SubjectPublicKeyInfo, as `openssl` and Python's `cryptography` write it:
/// base64 in 64-column lines and a final newline.
pub fn spki_pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN PUBLIC KEY-----\n");
    for line in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        out.push('\n');
    }
    out.push_str("-----END PUBLIC KEY-----\n");
    out
}

/// The key hint of an OMS bundle, which model_signing checks against the
/// key it is given: hex SHA-256 of the key's PEM text ([`spki_pem`]).
pub fn oms_hint(spki_der: &[u8]) -> String {
    hex::encode(Sha256::digest(spki_pem(spki_der)))
}

/// The key hint cosign writes: standard base64 of SHA-256 over the DER
/// SubjectPublicKeyInfo.
pub fn cosign_hint(spki_der: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(Sha256::digest(spki_der))
}

/// DSSE's pre-authentication encoding: what a signature covers.
pub fn pae(payload_type: &str, payload: &[u8]) -> Vec<u8> {
    let mut out = format!(
        "DSSEv1 {} {payload_type} {} ",
        payload_type.len(),
        payload.len()
    )
    .into_bytes();
    out.extend_from_slice(payload);
    out
}

/// The OMS subject digest: SHA-256 over the raw resource digests,
/// concatenated in listed order (model_signing's `files` manifest digest).
fn resources_digest(resources: &[Resource]) -> Result<String, String> {
    let mut h = Sha256::new();
    for r in resources {
        let raw = hex::decode(&r.digest).map_err(|_| format!("{}: digest is not hex", r.name))?;
        h.update(raw);
    }
    Ok(hex::encode(h.finalize()))
}

/// The files an OMS statement lists for `tree`, in canonical order
/// (SPEC.md §2.2, the order model_signing sorts by): every file with its
/// BLAKE3, and every symlink that resolves inside the tree to a file,
/// under its own name with that file's BLAKE3 (model_signing follows such
/// links). Directories, and links to directories, are not listed.
pub fn version_files(tree: &TreeIndex) -> (Vec<(&str, B3Digest)>, bool) {
    let mut out = Vec::new();
    let mut links = false;
    for e in tree.entries() {
        match &e.data {
            EntryData::File { blake3, .. } => out.push((e.path.as_str(), *blake3)),
            EntryData::Symlink { .. } => {
                if let Some(d) = link_file(tree, &e.path) {
                    out.push((e.path.as_str(), d));
                    links = true;
                }
            }
            EntryData::Dir => {}
        }
    }
    (out, links)
}

/// The BLAKE3 of the file the symlink at `path` leads to, following links
/// lexically (each target relative to its link's directory), at most 40.
fn link_file(tree: &TreeIndex, path: &str) -> Option<B3Digest> {
    let mut at = path.to_string();
    for _ in 0..40 {
        match &tree.get(&at)?.data {
            EntryData::File { blake3, .. } => return Some(*blake3),
            EntryData::Dir => return None,
            EntryData::Symlink { target } => {
                let dir = at.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
                at = normalize(dir, target)?;
            }
        }
    }
    None
}

/// `dir/target` with `.` and `..` resolved; `None` when it leaves the root.
fn normalize(dir: &str, target: &str) -> Option<String> {
    if target.starts_with('/') {
        return None;
    }
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for p in target.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// The OMS statement of the version whose tree is `tree` (SPEC.md §5.9):
/// subject named by its version digest.
pub fn oms_statement(tree: &TreeIndex) -> Statement {
    let (files, links) = version_files(tree);
    let resources: Vec<Resource> = files
        .into_iter()
        .map(|(name, d)| Resource {
            name: name.to_string(),
            algorithm: "blake3".into(),
            digest: d.hex(),
        })
        .collect();
    let digest = resources_digest(&resources).expect("hex written here");
    let predicate = OmsPredicate {
        resources,
        serialization: Serialization {
            method: "files".into(),
            hash_type: "blake3".into(),
            allow_symlinks: links,
            ignore_paths: Vec::new(),
            shard_size: None,
        },
    };
    Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject: vec![Subject {
            name: Some(tree.version_digest().to_string()),
            digest: BTreeMap::from([("sha256".to_string(), digest)]),
        }],
        predicate_type: PREDICATE_OMS.into(),
        predicate: serde_json::to_value(predicate).expect("plain data"),
    }
}

/// The statement `cosign sign` makes for a manifest: its sha256, no name,
/// an empty predicate.
pub fn cosign_statement(manifest: &Sha256Digest) -> Statement {
    Statement {
        statement_type: STATEMENT_TYPE.into(),
        subject: vec![Subject {
            name: None,
            digest: BTreeMap::from([("sha256".to_string(), manifest.hex())]),
        }],
        predicate_type: PREDICATE_COSIGN.into(),
        predicate: serde_json::json!({}),
    }
}

impl Statement {
    /// The payload bytes: JSON with keys sorted and no whitespace.
    pub fn encode(&self) -> Vec<u8> {
        crate::oci::canonical_json(self).expect("plain data")
    }

    pub fn decode(payload: &[u8]) -> Result<Statement, SignatureError> {
        let s: Statement = serde_json::from_slice(payload)
            .map_err(|e| SignatureError::Statement(e.to_string()))?;
        if s.statement_type != STATEMENT_TYPE {
            return Err(SignatureError::Statement(format!(
                "_type is {:?}, not {STATEMENT_TYPE}",
                s.statement_type
            )));
        }
        Ok(s)
    }
}

/// What an OMS statement covers of a version it matches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Coverage {
    /// Files (and file links) listed and matched.
    pub files: usize,
    /// Files of the version under the statement's `ignore_paths`, which
    /// the signature does not cover.
    pub ignored: Vec<String>,
    /// Whether the subject names the version digest, which binds the
    /// whole tree (modes, links, empty directories); otherwise the
    /// signature binds the files' names and contents only.
    pub names_version: bool,
}

/// Checks that the OMS statement `s` describes the version whose tree is
/// `tree` (SPEC.md §5.9): the subject digest is that of the resources as
/// listed; a subject named `b3:…` names this version; every resource is
/// BLAKE3; and the listed files are exactly the version's files, less
/// those under the statement's `ignore_paths`, each with the tree's BLAKE3.
pub fn check_oms(s: &Statement, tree: &TreeIndex) -> Result<Coverage, SignatureError> {
    if s.predicate_type != PREDICATE_OMS {
        return Err(SignatureError::Statement(format!(
            "predicateType is {:?}, not {PREDICATE_OMS}",
            s.predicate_type
        )));
    }
    let p: OmsPredicate = serde_json::from_value(s.predicate.clone())
        .map_err(|e| SignatureError::Statement(format!("predicate: {e}")))?;
    check_oms_parts(&s.subject, &p, tree)
}

/// The head of a statement: all but its predicate, which is skipped (a
/// reader picks how to parse it from `predicateType`).
#[derive(Clone, Debug, Deserialize)]
pub struct Head {
    #[serde(rename = "_type")]
    pub statement_type: String,
    pub subject: Vec<Subject>,
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
}

impl Head {
    /// Reads a statement's head from its payload bytes.
    pub fn decode(payload: &[u8]) -> Result<Head, SignatureError> {
        let h: Head = serde_json::from_slice(payload)
            .map_err(|e| SignatureError::Statement(e.to_string()))?;
        if h.statement_type != STATEMENT_TYPE {
            return Err(SignatureError::Statement(format!(
                "_type is {:?}, not {STATEMENT_TYPE}",
                h.statement_type
            )));
        }
        Ok(h)
    }
}

/// [`check_oms`] of a statement's payload bytes, parsed once into typed
/// resources: a statement of a million files takes no JSON tree.
pub fn check_oms_payload(payload: &[u8], tree: &TreeIndex) -> Result<Coverage, SignatureError> {
    #[derive(Deserialize)]
    struct Oms {
        #[serde(rename = "predicateType")]
        predicate_type: String,
        subject: Vec<Subject>,
        predicate: OmsPredicate,
    }
    let s: Oms =
        serde_json::from_slice(payload).map_err(|e| SignatureError::Statement(e.to_string()))?;
    if s.predicate_type != PREDICATE_OMS {
        return Err(SignatureError::Statement(format!(
            "predicateType is {:?}, not {PREDICATE_OMS}",
            s.predicate_type
        )));
    }
    check_oms_parts(&s.subject, &s.predicate, tree)
}

fn check_oms_parts(
    subjects: &[Subject],
    p: &OmsPredicate,
    tree: &TreeIndex,
) -> Result<Coverage, SignatureError> {
    let version = tree.version_digest();
    let mismatch = |why: String| SignatureError::Mismatch {
        version: version.to_string(),
        why,
    };
    let bad = |why: String| SignatureError::Statement(why);
    let [subject] = subjects else {
        return Err(bad(format!("{} subjects, not 1", subjects.len())));
    };
    if p.serialization.method != "files" {
        return Err(SignatureError::Unsupported(format!(
            "an OMS statement serialized by {:?} (sealvol checks \"files\")",
            p.serialization.method
        )));
    }
    if let Some(r) = p.resources.iter().find(|r| r.algorithm != "blake3") {
        return Err(SignatureError::Unsupported(format!(
            "an OMS statement hashed with {:?} ({}); sealvol checks signatures from the \
             tree's BLAKE3 alone: sign with hashing algorithm blake3",
            r.algorithm, r.name
        )));
    }
    let want = subject
        .digest
        .get("sha256")
        .ok_or_else(|| bad("the subject has no sha256 digest".into()))?;
    if resources_digest(&p.resources).map_err(bad)? != *want {
        return Err(bad(
            "the subject digest is not that of the listed resources".into(),
        ));
    }
    let names_version = match subject.name.as_deref() {
        Some(n) if n.starts_with("b3:") => {
            if n != version.to_string() {
                return Err(mismatch(format!("it signs version {n}")));
            }
            true
        }
        _ => false,
    };
    let ignored_by = |path: &str| {
        p.serialization.ignore_paths.iter().any(|i| {
            let i = i.trim_end_matches('/');
            !i.is_empty() && (path == i || path.strip_prefix(i).is_some_and(|r| r.starts_with('/')))
        })
    };
    let mut listed: HashMap<&str, [u8; 32]> = HashMap::with_capacity(p.resources.len());
    for r in &p.resources {
        let mut d = [0u8; 32];
        hex::decode_to_slice(&r.digest, &mut d)
            .map_err(|_| bad(format!("{}: digest is not 32 bytes of hex", r.name)))?;
        if listed.insert(&r.name, d).is_some() {
            return Err(bad(format!("{} is listed twice", r.name)));
        }
    }
    let (files, _) = version_files(tree);
    // A signer that did not allow links (model_signing refuses a folder
    // with any) did not sign a version that has them.
    if !p.serialization.allow_symlinks {
        let links: Vec<String> = tree
            .entries()
            .iter()
            .filter(|e| matches!(e.data, EntryData::Symlink { .. }) && !ignored_by(&e.path))
            .map(|e| e.path.clone())
            .collect();
        if !links.is_empty() {
            return Err(mismatch(format!(
                "the statement allows no symlinks and the version has {}: {}",
                links.len(),
                shown(&links)
            )));
        }
    }
    let mut ignored = Vec::new();
    let (mut missing, mut changed) = (Vec::new(), Vec::new());
    for &(path, d) in &files {
        if ignored_by(path) {
            ignored.push(path.to_string());
            continue;
        }
        match listed.remove(path) {
            None => missing.push(path.to_string()),
            Some(h) if h != d.0 => changed.push(path.to_string()),
            Some(_) => {}
        }
    }
    let mut extra: Vec<String> = listed.keys().map(|k| k.to_string()).collect();
    extra.sort();
    let mut why = String::new();
    for (what, names) in [
        ("files the statement does not list", &missing),
        ("files listed that the version does not have", &extra),
        ("files whose BLAKE3 differs", &changed),
    ] {
        if !names.is_empty() {
            if !why.is_empty() {
                why.push_str("; ");
            }
            let _ = write!(why, "{} {what}: {}", names.len(), shown(names));
        }
    }
    if !why.is_empty() {
        return Err(mismatch(why));
    }
    Ok(Coverage {
        files: files.len() - ignored.len(),
        ignored,
        names_version,
    })
}

/// Checks that a cosign statement signs the manifest `index`.
pub fn check_cosign(s: &Statement, index: &Sha256Digest) -> Result<(), SignatureError> {
    if s.predicate_type != PREDICATE_COSIGN {
        return Err(SignatureError::Statement(format!(
            "predicateType is {:?}, not {PREDICATE_COSIGN}",
            s.predicate_type
        )));
    }
    check_cosign_subjects(&s.subject, index)
}

/// Checks that one of a cosign statement's subjects is the manifest `index`.
pub fn check_cosign_subjects(
    subject: &[Subject],
    index: &Sha256Digest,
) -> Result<(), SignatureError> {
    if subject
        .iter()
        .any(|x| x.digest.get("sha256") == Some(&index.hex()))
    {
        Ok(())
    } else {
        Err(SignatureError::Mismatch {
            version: index.to_string(),
            why: "its subject is another manifest".into(),
        })
    }
}

fn shown(names: &[String]) -> String {
    let mut s = names
        .iter()
        .take(SHOWN)
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ");
    if names.len() > SHOWN {
        let _ = write!(s, " and {} more", names.len() - SHOWN);
    }
    s
}

/// What kind of signer a bundle names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Signer {
    /// A key the verifier supplies; the bundle's hint of it.
    Key { hint: String },
    /// A Fulcio certificate (keyless).
    Certificate,
}

impl Bundle {
    /// A key-based bundle of one DSSE signature `sig` over `payload`.
    pub fn new(payload: &[u8], sig: &[u8], hint: String) -> Bundle {
        let b64 = base64::engine::general_purpose::STANDARD;
        Bundle {
            media_type: MT_BUNDLE.into(),
            verification_material: VerificationMaterial {
                public_key: Some(KeyHint { hint }),
                ..Default::default()
            },
            dsse_envelope: Some(Envelope {
                payload: b64.encode(payload),
                payload_type: PAYLOAD_TYPE.into(),
                signatures: vec![EnvelopeSignature {
                    sig: b64.encode(sig),
                    keyid: String::new(),
                }],
            }),
            message_signature: None,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("plain data")
    }

    /// Parses a bundle of at most [`MAX_BUNDLE_BYTES`] whose media type is
    /// a Sigstore bundle's and which holds a DSSE envelope.
    pub fn decode(bytes: &[u8]) -> Result<Bundle, SignatureError> {
        let bad = |why: String| SignatureError::Bundle(why);
        if bytes.len() as u64 > MAX_BUNDLE_BYTES {
            return Err(bad(format!(
                "{} bytes, over the {MAX_BUNDLE_BYTES}-byte limit",
                bytes.len()
            )));
        }
        let b: Bundle = serde_json::from_slice(bytes).map_err(|e| bad(e.to_string()))?;
        if !b
            .media_type
            .starts_with("application/vnd.dev.sigstore.bundle")
        {
            return Err(bad(format!("mediaType {:?}", b.media_type)));
        }
        if b.dsse_envelope.is_none() {
            return Err(SignatureError::Unsupported(
                "a bundle without a DSSE envelope (a message signature, as `cosign sign-blob` writes)"
                    .into(),
            ));
        }
        Ok(b)
    }

    pub fn signer(&self) -> Signer {
        let m = &self.verification_material;
        if m.certificate.is_some() || m.x509_certificate_chain.is_some() {
            Signer::Certificate
        } else {
            Signer::Key {
                hint: m
                    .public_key
                    .as_ref()
                    .map(|k| k.hint.clone())
                    .unwrap_or_default(),
            }
        }
    }

    /// The envelope's payload type, payload bytes and first signature:
    /// what a verifier checks (model_signing and cosign check the first).
    pub fn signed(&self) -> Result<(String, Vec<u8>, Vec<u8>), SignatureError> {
        let b64 = base64::engine::general_purpose::STANDARD;
        let bad = |why: String| SignatureError::Bundle(why);
        let env = self
            .dsse_envelope
            .as_ref()
            .ok_or_else(|| bad("no DSSE envelope".into()))?;
        if env.payload_type != PAYLOAD_TYPE {
            return Err(bad(format!("payloadType {:?}", env.payload_type)));
        }
        let payload = b64
            .decode(&env.payload)
            .map_err(|e| bad(format!("payload: {e}")))?;
        let first = env
            .signatures
            .first()
            .ok_or_else(|| bad("no signature".into()))?;
        let sig = b64
            .decode(&first.sig)
            .map_err(|e| bad(format!("sig: {e}")))?;
        Ok((env.payload_type.clone(), payload, sig))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chunking::ChunkingParams;
    use crate::tree::Entry;

    fn file(path: &str, data: &[u8]) -> Entry {
        Entry {
            path: path.into(),
            mode: 0o644,
            data: EntryData::file_of(data, &[]),
        }
    }

    fn tree() -> TreeIndex {
        TreeIndex::new(
            ChunkingParams::default(),
            vec![
                file("a.txt", b"hello\n"),
                file("empty", b""),
                Entry {
                    path: "sub".into(),
                    mode: 0o755,
                    data: EntryData::Dir,
                },
                file("sub/w.bin", b"w"),
                Entry {
                    path: "sub/link".into(),
                    mode: 0o777,
                    data: EntryData::Symlink {
                        target: "../a.txt".into(),
                    },
                },
                Entry {
                    path: "dirlink".into(),
                    mode: 0o777,
                    data: EntryData::Symlink {
                        target: "sub".into(),
                    },
                },
            ],
        )
        .unwrap()
    }

    #[test]
    fn pae_is_dsse_v1() {
        assert_eq!(
            pae("application/vnd.in-toto+json", b"{}"),
            b"DSSEv1 28 application/vnd.in-toto+json 2 {}".to_vec()
        );
    }

    #[test]
    fn statement_lists_files_and_file_links_in_order() {
        let t = tree();
        let s = oms_statement(&t);
        let p: OmsPredicate = serde_json::from_value(s.predicate.clone()).unwrap();
        let names: Vec<_> = p.resources.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["a.txt", "empty", "sub/link", "sub/w.bin"]);
        assert_eq!(p.resources[2].digest, p.resources[0].digest);
        assert!(p.serialization.allow_symlinks);
        assert_eq!(
            p.resources[0].digest,
            "8e4c7c1b99dbfd50e7a95185fead5ee1448fa904a2fdd778eaf5f2dbfd629a99"
        );
        assert_eq!(
            s.subject[0].name.as_deref(),
            Some(&*t.version_digest().to_string())
        );
        let c = check_oms(&Statement::decode(&s.encode()).unwrap(), &t).unwrap();
        assert_eq!(c.files, 4);
        assert!(c.names_version && c.ignored.is_empty());
    }

    fn edit(s: &Statement, f: impl FnOnce(&mut OmsPredicate)) -> Statement {
        let mut p: OmsPredicate = serde_json::from_value(s.predicate.clone()).unwrap();
        f(&mut p);
        let mut s = s.clone();
        s.subject[0].digest = BTreeMap::from([(
            "sha256".to_string(),
            resources_digest(&p.resources).unwrap(),
        )]);
        s.predicate = serde_json::to_value(p).unwrap();
        s
    }

    #[test]
    fn mismatches_are_named() {
        let t = tree();
        let s = oms_statement(&t);
        let mut other = s.clone();
        other.subject[0].name = Some(B3Digest::of(b"x").to_string());
        assert!(check_oms(&other, &t)
            .unwrap_err()
            .to_string()
            .contains("it signs version"));
        // Without a version name, the files decide.
        let mut unnamed = s.clone();
        unnamed.subject[0].name = Some("model".into());
        assert!(!check_oms(&unnamed, &t).unwrap().names_version);
        let missing = edit(&unnamed, |p| {
            p.resources.remove(1);
        });
        let e = check_oms(&missing, &t).unwrap_err().to_string();
        assert!(
            e.contains("1 files the statement does not list: \"empty\""),
            "{e}"
        );
        let changed = edit(&unnamed, |p| {
            p.resources[0].digest = B3Digest::of(b"y").hex()
        });
        let e = check_oms(&changed, &t).unwrap_err().to_string();
        assert!(e.contains("BLAKE3 differs: \"a.txt\""), "{e}");
        let extra = edit(&unnamed, |p| {
            p.resources.push(Resource {
                name: "new".into(),
                algorithm: "blake3".into(),
                digest: B3Digest::of(b"").hex(),
            })
        });
        assert!(check_oms(&extra, &t)
            .unwrap_err()
            .to_string()
            .contains("\"new\""));
        // A subject digest that is not that of the resources.
        let mut forged = unnamed.clone();
        forged.subject[0]
            .digest
            .insert("sha256".into(), "00".repeat(32));
        assert!(matches!(
            check_oms(&forged, &t),
            Err(SignatureError::Statement(_))
        ));
        // A signer that allowed no links did not sign a version with one
        // (here `dirlink`, which lists nothing, and `sub/link`).
        let strict = edit(&unnamed, |p| {
            p.serialization.allow_symlinks = false;
            p.resources.retain(|r| r.name != "sub/link");
        });
        let e = check_oms(&strict, &t).unwrap_err().to_string();
        assert!(
            e.contains("allows no symlinks and the version has 2: \"dirlink\", \"sub/link\""),
            "{e}"
        );
        let sha = edit(&unnamed, |p| p.resources[0].algorithm = "sha256".into());
        assert!(matches!(
            check_oms(&sha, &t),
            Err(SignatureError::Unsupported(_))
        ));
    }

    #[test]
    fn ignore_paths_leave_files_out() {
        let t = tree();
        let s = edit(&oms_statement(&t), |p| {
            p.resources.retain(|r| !r.name.starts_with("sub/"));
            p.serialization.ignore_paths = vec!["sub".into()];
        });
        let mut s = s;
        s.subject[0].name = Some("model".into());
        let c = check_oms(&s, &t).unwrap();
        assert_eq!(c.ignored, ["sub/link", "sub/w.bin"]);
        assert_eq!(c.files, 2);
    }

    #[test]
    fn cosign_statement_names_the_manifest() {
        let d = Sha256Digest::of(b"index");
        let s = cosign_statement(&d);
        check_cosign(&Statement::decode(&s.encode()).unwrap(), &d).unwrap();
        assert!(check_cosign(&s, &Sha256Digest::of(b"other")).is_err());
        assert!(check_oms(&s, &tree()).is_err());
    }

    #[test]
    fn bundle_round_trip_and_refusals() {
        let b = Bundle::new(b"{}", b"sig", "h".into());
        let d = Bundle::decode(&b.encode()).unwrap();
        let (t, p, s) = d.signed().unwrap();
        assert_eq!(
            (t.as_str(), &p[..], &s[..]),
            (PAYLOAD_TYPE, &b"{}"[..], &b"sig"[..])
        );
        assert_eq!(d.signer(), Signer::Key { hint: "h".into() });
        assert!(Bundle::decode(b"{}").is_err());
        assert!(Bundle::decode(br#"{"mediaType":"x","verificationMaterial":{}}"#).is_err());
        let blob = br#"{"mediaType":"application/vnd.dev.sigstore.bundle.v0.3+json","verificationMaterial":{},"messageSignature":{}}"#;
        assert!(matches!(
            Bundle::decode(blob),
            Err(SignatureError::Unsupported(_))
        ));
    }
}
