//! Signed versions (SPEC.md §5.9): keys, signing a version from its tree
//! alone, pushing the Sigstore bundle as a referrer of the version index,
//! and finding and checking a version's signatures against trusted keys.
//!
//! Signing reads no file data: the OMS statement lists every file with the
//! BLAKE3 the tree already binds to the version digest. Checking reads the
//! referrers, their bundles and nothing else, so a mount can refuse an
//! unsigned version before the first byte is served.
//!
//! Keys are PEM: a private key as PKCS#8 (`BEGIN PRIVATE KEY`) or SEC1
//! (`BEGIN EC PRIVATE KEY`), a public key as SPKI (`BEGIN PUBLIC KEY`), for
//! ECDSA P-256 or P-384 and Ed25519. Keyless signatures (a Fulcio
//! certificate) are recognized and refused as not supported.

use std::collections::HashMap;
use std::fmt;
use std::path::Path;

use aws_lc_rs::rand::SystemRandom;
use aws_lc_rs::signature::{
    self as sig, EcdsaKeyPair, Ed25519KeyPair, KeyPair as _, UnparsedPublicKey,
    VerificationAlgorithm,
};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{PrivateKeyDer, SubjectPublicKeyInfoDer};
use sealvol_spec::oci::{build_signature, sha256_of, signature_layer, OciDescriptor, ANN_CREATED};
use sealvol_spec::signature::{
    check_cosign_subjects, check_oms_payload, cosign_statement, oms_statement, pae, Bundle, Head,
    Signer, Statement, ANN_BUNDLE_PREDICATE, MAX_SIGNATURES, MT_BUNDLE, PAYLOAD_TYPE,
    PREDICATE_COSIGN, PREDICATE_OMS,
};
use sealvol_spec::tree::TreeIndex;
use sealvol_spec::Sha256Digest;
use sha2::{Digest as _, Sha256};

pub use crate::error::KeyError;
use crate::resolve::Resolved;
use crate::{Error, Remote, TransportError};

/// The largest key file read.
const MAX_KEY_BYTES: u64 = 64 << 10;

/// The algorithm of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algorithm {
    EcdsaP256,
    EcdsaP384,
    Ed25519,
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Algorithm::EcdsaP256 => "ecdsa-p256",
            Algorithm::EcdsaP384 => "ecdsa-p384",
            Algorithm::Ed25519 => "ed25519",
        })
    }
}

// The SPKI DER prefixes of the three key types (AlgorithmIdentifier and
// the BIT STRING header); the rest is the point or key.
const SPKI_P256: &[u8] = &[
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];
const SPKI_P384: &[u8] = &[
    0x30, 0x76, 0x30, 0x10, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x05, 0x2b,
    0x81, 0x04, 0x00, 0x22, 0x03, 0x62, 0x00,
];
const SPKI_ED25519: &[u8] = &[
    0x30, 0x2a, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x03, 0x21, 0x00,
];

/// A public key a caller trusts.
#[derive(Clone)]
pub struct TrustedKey {
    /// Where it came from, for messages.
    pub source: String,
    pub algorithm: Algorithm,
    /// SubjectPublicKeyInfo, DER.
    spki: Vec<u8>,
}

impl fmt::Debug for TrustedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} ({}, {})",
            self.source,
            self.algorithm,
            self.fingerprint()
        )
    }
}

impl TrustedKey {
    /// Reads a PEM public key from a file.
    pub fn load(path: &Path) -> Result<TrustedKey, KeyError> {
        let name = path.display().to_string();
        let pem = read_pem(path, &name)?;
        TrustedKey::from_pem(&pem, &name)
    }

    /// Parses a PEM public key (SPKI); `name` is what messages call it.
    pub fn from_pem(pem: &[u8], name: &str) -> Result<TrustedKey, KeyError> {
        let err = |message: String| KeyError {
            source_name: name.to_string(),
            message,
        };
        let der = SubjectPublicKeyInfoDer::from_pem_slice(pem).map_err(|e| {
            err(format!(
                "not a PEM public key ({e}); give the signer's `-----BEGIN PUBLIC KEY-----` file, \
                 e.g. `openssl pkey -in KEY.pem -pubout`"
            ))
        })?;
        TrustedKey::from_spki(der.as_ref(), name).map_err(err)
    }

    fn from_spki(der: &[u8], name: &str) -> Result<TrustedKey, String> {
        let algorithm = [
            (SPKI_P256, 91, Algorithm::EcdsaP256),
            (SPKI_P384, 120, Algorithm::EcdsaP384),
            (SPKI_ED25519, 44, Algorithm::Ed25519),
        ]
        .into_iter()
        .find(|(prefix, len, _)| der.len() == *len && der.starts_with(prefix))
        .map(|(_, _, a)| a)
        .ok_or("not an ECDSA P-256/P-384 or Ed25519 public key (RSA and other curves are not supported)")?;
        Ok(TrustedKey {
            source: name.to_string(),
            algorithm,
            spki: der.to_vec(),
        })
    }

    /// `sha256:<hex>` of the DER SubjectPublicKeyInfo: what `signatures`
    /// prints for a signer.
    pub fn fingerprint(&self) -> String {
        format!("sha256:{}", hex::encode(Sha256::digest(&self.spki)))
    }

    /// The hint model_signing writes and checks (SPEC.md §5.9).
    pub fn oms_hint(&self) -> String {
        sealvol_spec::signature::oms_hint(&self.spki)
    }

    /// The hint cosign writes (SPEC.md §5.9).
    pub fn cosign_hint(&self) -> String {
        sealvol_spec::signature::cosign_hint(&self.spki)
    }

    /// Whether `sig` is this key's signature over `message`.
    pub fn verifies(&self, message: &[u8], sig: &[u8]) -> bool {
        let alg: &'static dyn VerificationAlgorithm = match self.algorithm {
            Algorithm::EcdsaP256 => &sig::ECDSA_P256_SHA256_ASN1,
            Algorithm::EcdsaP384 => &sig::ECDSA_P384_SHA384_ASN1,
            Algorithm::Ed25519 => &sig::ED25519,
        };
        UnparsedPublicKey::new(alg, &self.spki)
            .verify(message, sig)
            .is_ok()
            // cosign signs with Ed25519ph (SHA-512 prehash) by default.
            || (self.algorithm == Algorithm::Ed25519
                && ed25519ph_verifies(&self.spki[SPKI_ED25519.len()..], message, sig))
    }

    /// The PEM text of this key.
    pub fn pem(&self) -> String {
        sealvol_spec::signature::spki_pem(&self.spki)
    }
}

/// Whether `sig` is an Ed25519ph signature (RFC 8032, empty context) of
/// `message` under the raw 32-byte key `public`. aws-lc has it; its Rust
/// API does not expose it.
fn ed25519ph_verifies(public: &[u8], message: &[u8], sig: &[u8]) -> bool {
    if public.len() != 32 || sig.len() != 64 {
        return false;
    }
    // SAFETY: the pointers are valid for the lengths passed (the key is 32
    // bytes and the signature 64, as checked, and the message is a slice);
    // aws-lc reads them only for the duration of the call.
    let ok = unsafe {
        aws_lc_sys::ED25519ph_verify(
            message.as_ptr(),
            message.len(),
            sig.as_ptr(),
            public.as_ptr(),
            std::ptr::null(),
            0,
        )
    };
    ok == 1
}

fn read_pem(path: &Path, name: &str) -> Result<Vec<u8>, KeyError> {
    use std::io::Read as _;
    let err = |message: String| KeyError {
        source_name: name.to_string(),
        message,
    };
    let f = std::fs::File::open(path).map_err(|e| err(e.to_string()))?;
    let mut out = Vec::new();
    f.take(MAX_KEY_BYTES + 1)
        .read_to_end(&mut out)
        .map_err(|e| err(e.to_string()))?;
    if out.len() as u64 > MAX_KEY_BYTES {
        return Err(err(format!("over {MAX_KEY_BYTES} bytes: not a key")));
    }
    Ok(out)
}

/// A private key to sign with.
pub struct SigningKey {
    pair: Pair,
    public: TrustedKey,
}

enum Pair {
    Ecdsa(EcdsaKeyPair),
    Ed25519(Ed25519KeyPair),
}

impl SigningKey {
    /// Reads a PEM private key: `env://VAR` takes the PEM from the
    /// environment variable `VAR` (so the key never lands in a file or in
    /// argv), anything else is a file path.
    pub fn load(spec: &str) -> Result<SigningKey, KeyError> {
        match spec.strip_prefix("env://") {
            Some(var) => {
                let pem = std::env::var(var).map_err(|_| KeyError {
                    source_name: spec.to_string(),
                    message: format!("the environment variable {var} is not set"),
                })?;
                SigningKey::from_pem(pem.as_bytes(), spec)
            }
            None => {
                let pem = read_pem(Path::new(spec), spec)?;
                SigningKey::from_pem(&pem, spec)
            }
        }
    }

    /// Parses a PEM private key; `name` is what messages call it (never
    /// the key itself).
    pub fn from_pem(pem: &[u8], name: &str) -> Result<SigningKey, KeyError> {
        let err = |message: String| KeyError {
            source_name: name.to_string(),
            message,
        };
        if pem.windows(9).any(|w| w == b"ENCRYPTED") {
            return Err(err(
                "an encrypted private key; decrypt it first (`openssl pkey -in KEY -out PLAIN.pem`) \
                 and pass it with --key env://VAR to keep it off the disk"
                    .into(),
            ));
        }
        let der = PrivateKeyDer::from_pem_slice(pem).map_err(|e| {
            err(format!(
                "not a PEM private key ({e}); give a PKCS#8 `BEGIN PRIVATE KEY` or SEC1 \
                 `BEGIN EC PRIVATE KEY` file"
            ))
        })?;
        let der = der.secret_der();
        let pair = None
            .or_else(|| {
                EcdsaKeyPair::from_private_key_der(&sig::ECDSA_P256_SHA256_ASN1_SIGNING, der)
                    .ok()
                    .map(Pair::Ecdsa)
            })
            .or_else(|| {
                EcdsaKeyPair::from_private_key_der(&sig::ECDSA_P384_SHA384_ASN1_SIGNING, der)
                    .ok()
                    .map(Pair::Ecdsa)
            })
            .or_else(|| {
                Ed25519KeyPair::from_pkcs8_maybe_unchecked(der)
                    .ok()
                    .map(Pair::Ed25519)
            })
            .ok_or_else(|| {
                err("not an ECDSA P-256/P-384 or Ed25519 private key (RSA and other curves are not supported)".into())
            })?;
        use aws_lc_rs::encoding::AsDer as _;
        let spki = match &pair {
            Pair::Ecdsa(k) => k.public_key().as_der().map(|d| d.as_ref().to_vec()),
            Pair::Ed25519(k) => k.public_key().as_der().map(|d| d.as_ref().to_vec()),
        }
        .map_err(|_| err("cannot encode its public key".into()))?;
        let public = TrustedKey::from_spki(&spki, name).map_err(err)?;
        Ok(SigningKey { pair, public })
    }

    /// The public half.
    pub fn public(&self) -> &TrustedKey {
        &self.public
    }

    fn sign(&self, message: &[u8]) -> Vec<u8> {
        match &self.pair {
            Pair::Ecdsa(k) => k
                .sign(&SystemRandom::new(), message)
                .expect("ECDSA signing does not fail")
                .as_ref()
                .to_vec(),
            Pair::Ed25519(k) => k.sign(message).as_ref().to_vec(),
        }
    }

    /// A bundle of `statement` signed by this key, with `hint` (the
    /// OMS hint, or cosign's).
    pub fn sign_statement(&self, statement: &Statement, hint: String) -> Bundle {
        let payload = statement.encode();
        let sig = self.sign(&pae(PAYLOAD_TYPE, &payload));
        Bundle::new(&payload, &sig, hint)
    }
}

/// Checks the bundle's signature under each of `keys`: the statement and
/// the key that signed it, or `None` when none did.
pub fn open_bundle<'k>(
    bundle: &Bundle,
    keys: &'k [TrustedKey],
) -> Result<Option<(Statement, &'k TrustedKey)>, sealvol_spec::signature::SignatureError> {
    if bundle.signer() == Signer::Certificate {
        return Err(sealvol_spec::signature::SignatureError::Unsupported(
            "a keyless signature (a Fulcio certificate); sealvol checks signatures by keys given with --signed-by"
                .into(),
        ));
    }
    let (payload_type, payload, sig) = bundle.signed()?;
    let message = pae(&payload_type, &payload);
    let Some(key) = keys.iter().find(|k| k.verifies(&message, &sig)) else {
        return Ok(None);
    };
    Ok(Some((Statement::decode(&payload)?, key)))
}

/// What `sign` pushed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Signed {
    /// The referrer manifests: the OMS bundle's, then cosign's if asked.
    pub manifests: Vec<Sha256Digest>,
    pub fingerprint: String,
    /// Files the statement lists.
    pub files: usize,
    /// Whether the registry lists referrers itself.
    pub referrers_api: bool,
}

/// Signs `version` (whose tree is `tree`) with `key`: the OMS statement
/// made from the tree, and with `cosign` also cosign's statement over the
/// version index, each pushed as a bundle referrer of the index.
pub async fn sign(
    remote: &Remote,
    version: &Resolved,
    tree: &TreeIndex,
    key: &SigningKey,
    cosign: bool,
    created: &str,
) -> Result<Signed, Error> {
    let v = version.index.digest;
    let statement = oms_statement(tree);
    let files = sealvol_spec::signature::version_files(tree).0.len();
    let mut bundles = vec![(
        key.sign_statement(&statement, key.public.oms_hint()),
        PREDICATE_OMS,
        Some(v),
    )];
    if cosign {
        let s = cosign_statement(&version.index_digest);
        bundles.push((
            key.sign_statement(&s, key.public.cosign_hint()),
            PREDICATE_COSIGN,
            None,
        ));
    }
    let mut manifests = Vec::new();
    let mut api = true;
    for (bundle, predicate, v) in bundles {
        let built = build_signature(
            bundle.encode(),
            predicate,
            v.as_ref(),
            &version.index_digest,
            version.index_bytes.len() as u64,
            created,
        )
        .map_err(|e| Error::Usage(format!("cannot lay out the signature: {e}")))?;
        api = crate::referrer::push(remote, version, &built).await?;
        manifests.push(built.manifest.digest());
    }
    Ok(Signed {
        manifests,
        fingerprint: key.public.fingerprint(),
        files,
        referrers_api: api,
    })
}

/// What kind of statement a signature carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// An OMS statement over the version's files.
    Oms,
    /// A `cosign sign` statement over the version index.
    Cosign,
    /// Something else (another predicate, or unreadable).
    Other,
}

/// One signature found on a version, and what checking it showed.
#[derive(Clone, Debug, serde::Serialize)]
pub struct Found {
    /// The referrer manifest.
    pub manifest: Sha256Digest,
    pub kind: Kind,
    /// When it was made, as its referrer says (RFC 3339; empty if not).
    pub created: String,
    /// The bundle's hint of its key, or `keyless`.
    pub hint: String,
    /// The trusted key that signed it (its fingerprint), if any did.
    pub signer: Option<String>,
    /// Where that key came from.
    pub key: Option<String>,
    /// Whether the statement describes this version.
    pub matches: bool,
    /// Signed by a trusted key and matching: it counts.
    pub verified: bool,
    /// Files of the version the signature covers (OMS).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files: Option<usize>,
    /// Files under the statement's `ignore_paths`, not covered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ignored: Vec<String>,
    /// Why it does not count, when it does not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

/// A signature referrer of a version, fetched but not yet checked: what a
/// check needs of the registry, so that a mount can fetch it while it
/// fetches the tree.
#[derive(Clone, Debug)]
pub struct Fetched {
    pub manifest: Sha256Digest,
    /// When it was made, as its referrer says (RFC 3339; empty if not).
    pub created: String,
    /// Its bundle, or why there is none to check.
    pub bundle: Result<Bundle, String>,
}

/// A signature referrer of a version as its referrers list shows it.
#[derive(Clone, Debug)]
pub struct Listed {
    pub manifest: Sha256Digest,
    /// When it was made, as the referrer says (RFC 3339; empty if not).
    pub created: String,
    /// Whether its annotation says it holds an OMS statement.
    pub oms: bool,
}

/// The signature referrers of `version`, at most [`MAX_SIGNATURES`], in
/// the order a check tries them: OMS statements (by the referrer's
/// annotation) before others, each newest first.
pub async fn list(remote: &Remote, version: &Resolved) -> Result<Vec<Listed>, Error> {
    let (referrers, _) = remote
        .referrers(&version.repo, &version.index_digest, MT_BUNDLE)
        .await?;
    let mut listed: Vec<Listed> = referrers
        .iter()
        .filter_map(|d| {
            Some(Listed {
                manifest: sha256_of(d)?,
                created: annotation(d, ANN_CREATED),
                oms: annotation(d, ANN_BUNDLE_PREDICATE) == PREDICATE_OMS,
            })
        })
        .take(MAX_SIGNATURES)
        .collect();
    listed.sort_by(|a, b| b.oms.cmp(&a.oms).then_with(|| b.created.cmp(&a.created)));
    Ok(listed)
}

/// Fetches one listed signature's manifest and bundle. One whose manifest
/// or bundle is gone (a referrers tag still listing a deleted signature),
/// damaged or malformed is kept with the reason, to leave the others to
/// decide; a registry that cannot be reached fails.
pub async fn fetch_one(remote: &Remote, version: &Resolved, l: &Listed) -> Result<Fetched, Error> {
    Ok(Fetched {
        manifest: l.manifest,
        created: l.created.clone(),
        bundle: fetch_bundle(remote, &version.repo, &l.manifest).await?,
    })
}

/// Fetches every signature referrer of `version` ([`list`]), a few at a
/// time.
pub async fn fetch(remote: &Remote, version: &Resolved) -> Result<Vec<Fetched>, Error> {
    use futures_util::{StreamExt as _, TryStreamExt as _};
    let listed = list(remote, version).await?;
    futures_util::stream::iter(&listed)
        .map(|l| fetch_one(remote, version, l))
        .buffered(4)
        .try_collect()
        .await
}

/// What a mount fetches of a version's signatures while it fetches the
/// tree: the list, and the first one a check tries.
#[derive(Clone, Debug)]
pub struct Prefetched {
    pub listed: Vec<Listed>,
    pub first: Option<Fetched>,
}

/// [`Prefetched`] of `version`.
pub async fn prefetch(remote: &Remote, version: &Resolved) -> Result<Prefetched, Error> {
    let listed = list(remote, version).await?;
    let first = match listed.first() {
        Some(l) => Some(fetch_one(remote, version, l).await?),
        None => None,
    };
    Ok(Prefetched { listed, first })
}

async fn fetch_bundle(
    remote: &Remote,
    repo: &str,
    manifest: &Sha256Digest,
) -> Result<Result<Bundle, String>, Error> {
    let unusable = |e: TransportError| match e {
        TransportError::NotFound(m) => Ok(Err(m)),
        e @ TransportError::Corrupt { .. } => Ok(Err(e.to_string())),
        e => Err(Error::from(e)),
    };
    let bytes = match remote.manifest(repo, &manifest.to_string()).await {
        Ok((b, _)) => b,
        Err(e) => return unusable(e),
    };
    let layer = match signature_layer(&bytes) {
        Ok(l) => l,
        Err(e) => return Ok(Err(e.to_string())),
    };
    let digest = sha256_of(&layer).expect("checked");
    let blob = match remote.get_blob(repo, &digest, layer.size()).await {
        Ok(b) => b,
        Err(e) => return unusable(e),
    };
    Ok(Bundle::decode(&blob).map_err(|e| e.to_string()))
}

/// The signature referrers of `version` (at most [`MAX_SIGNATURES`]),
/// each fetched and checked against `tree` and `keys` (SPEC.md §5.9),
/// newest first. With no keys, signatures are checked against the version
/// only.
pub async fn signatures(
    remote: &Remote,
    version: &Resolved,
    tree: &TreeIndex,
    keys: &[TrustedKey],
) -> Result<Vec<Found>, Error> {
    let fetched = fetch(remote, version).await?;
    Ok(judge_all(&fetched, version, tree, keys))
}

/// [`judge`] of each, newest first.
pub fn judge_all(
    fetched: &[Fetched],
    version: &Resolved,
    tree: &TreeIndex,
    keys: &[TrustedKey],
) -> Vec<Found> {
    let mut out: Vec<Found> = fetched
        .iter()
        .map(|f| judge(f, version, tree, keys))
        .collect();
    out.sort_by(|a, b| b.created.cmp(&a.created));
    out
}

fn annotation(d: &OciDescriptor, key: &str) -> String {
    d.annotations()
        .as_ref()
        .and_then(|a: &HashMap<String, String>| a.get(key))
        .cloned()
        .unwrap_or_default()
}

/// Checks one fetched signature against the version (its tree and index)
/// and `keys`.
pub fn judge(f: &Fetched, version: &Resolved, tree: &TreeIndex, keys: &[TrustedKey]) -> Found {
    let mut found = Found {
        manifest: f.manifest,
        kind: Kind::Other,
        created: f.created.clone(),
        hint: String::new(),
        signer: None,
        key: None,
        matches: false,
        verified: false,
        files: None,
        ignored: Vec::new(),
        problem: None,
    };
    let bundle = match &f.bundle {
        Ok(b) => b,
        Err(why) => {
            found.problem = Some(why.clone());
            return found;
        }
    };
    found.hint = match bundle.signer() {
        Signer::Key { hint } => hint,
        Signer::Certificate => "keyless".into(),
    };
    let (payload_type, payload, sig) = match bundle.signed() {
        Ok(parts) => parts,
        Err(e) => {
            found.problem = Some(e.to_string());
            return found;
        }
    };
    // The statement's head first (its predicate is skipped), so that even
    // a signature that does not count says what it claims.
    let head = match Head::decode(&payload) {
        Ok(h) => h,
        Err(e) => {
            found.problem = Some(e.to_string());
            return found;
        }
    };
    found.kind = match head.predicate_type.as_str() {
        PREDICATE_OMS => Kind::Oms,
        PREDICATE_COSIGN => Kind::Cosign,
        other => {
            found.problem = Some(format!(
                "a statement of predicateType {other:?}, not a signature of a version"
            ));
            return found;
        }
    };
    // The signature before the statement's body: checking it hashes the
    // payload once, while the body of a large version's statement is most
    // of the work, and is moot when no trusted key signed it.
    let signer = match (keys.is_empty(), bundle.signer()) {
        (true, _) => None,
        (false, Signer::Certificate) => {
            found.problem = Some(
                "a keyless signature (a Fulcio certificate) is not supported yet; \
                 sealvol checks signatures by the keys given"
                    .into(),
            );
            return found;
        }
        (false, Signer::Key { .. }) => {
            let message = pae(&payload_type, &payload);
            match keys.iter().find(|k| k.verifies(&message, &sig)) {
                Some(k) => Some(k),
                None => {
                    found.problem = Some("signed by none of the trusted keys".into());
                    return found;
                }
            }
        }
    };
    let bound = match found.kind {
        Kind::Oms => check_oms_payload(&payload, tree).map(|c| {
            found.files = Some(c.files);
            found.ignored = c.ignored;
        }),
        _ => check_cosign_subjects(&head.subject, &version.index_digest),
    };
    if let Err(e) = bound {
        found.problem = Some(e.to_string());
        return found;
    }
    found.matches = true;
    match signer {
        None => found.problem = Some("not checked: no trusted key given".into()),
        Some(key) => {
            found.signer = Some(key.fingerprint());
            found.key = Some(key.source.clone());
            found.verified = true;
        }
    }
    found
}

/// Requires that a trusted key signed `version` (SPEC.md §5.9): the
/// signature that counts, or [`Error::Unsigned`] saying why none does.
/// Signatures are fetched and checked in [`list`]'s order until one
/// counts, so a version signed many times costs one bundle.
pub async fn require(
    remote: &Remote,
    version: &Resolved,
    tree: &TreeIndex,
    keys: &[TrustedKey],
) -> Result<Found, Error> {
    let pre = Prefetched {
        listed: list(remote, version).await?,
        first: None,
    };
    require_from(remote, version, tree, keys, &pre).await
}

/// [`require`], starting from what [`prefetch`] fetched.
pub async fn require_from(
    remote: &Remote,
    version: &Resolved,
    tree: &TreeIndex,
    keys: &[TrustedKey],
    pre: &Prefetched,
) -> Result<Found, Error> {
    if keys.is_empty() {
        return Err(Error::Usage("no trusted key given".into()));
    }
    let mut refused = Vec::new();
    for l in &pre.listed {
        let fetched = match &pre.first {
            Some(f) if f.manifest == l.manifest => f.clone(),
            _ => fetch_one(remote, version, l).await?,
        };
        let found = judge(&fetched, version, tree, keys);
        if found.verified {
            return Ok(found);
        }
        refused.push(found);
    }
    let shown = crate::resolve::display_ref(remote, &version.pinned.without_path());
    let trusted = keys
        .iter()
        .map(|k| k.source.as_str())
        .collect::<Vec<_>>()
        .join(", ");
    Err(Error::Unsigned(match refused.as_slice() {
        [] => format!("{shown} is not signed (no signature referrers); sign it with `sealvol sign`"),
        [one] => format!(
            "{shown} is not signed by a trusted key ({trusted}): its signature {}: {}",
            one.manifest,
            one.problem.as_deref().unwrap_or("refused")
        ),
        many => format!(
            "{shown} is not signed by a trusted key ({trusted}): none of its {} signatures counts; the first tried: {}",
            many.len(),
            many[0].problem.as_deref().unwrap_or("refused")
        ),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    // P-256 and Ed25519 keys written by openssl (PKCS#8, SEC1, SPKI).
    const P256_PKCS8: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg2MwqbQhMC9wJE8mn
UjwQCERDh1eBOaQDn3bhfrZrz8ahRANCAAROmMuJDBz1ABq5QI5YnN/ks0j6QX23
4F1qhOpzab1Gim7dL+GykpR3wcRwFOtI//M5GxUsUCaHZLnPbPjAewjH
-----END PRIVATE KEY-----
";
    const P256_PUB: &str = "-----BEGIN PUBLIC KEY-----
MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAETpjLiQwc9QAauUCOWJzf5LNI+kF9
t+BdaoTqc2m9Ropu3S/hspKUd8HEcBTrSP/zORsVLFAmh2S5z2z4wHsIxw==
-----END PUBLIC KEY-----
";

    #[test]
    fn keys_round_trip_and_verify() {
        let k = SigningKey::from_pem(P256_PKCS8.as_bytes(), "test").unwrap();
        assert_eq!(k.public().algorithm, Algorithm::EcdsaP256);
        let pubk = TrustedKey::from_pem(P256_PUB.as_bytes(), "pub").unwrap();
        assert_eq!(k.public().pem(), P256_PUB);
        // `sha256sum ec.pub`, what model_signing compares.
        assert_eq!(
            pubk.oms_hint(),
            "01d4b193fd2f7e150dc4f6df7229e8631a666b75ddcbeaa6a39e253a53e99eeb"
        );
        let s = cosign_statement(&Sha256Digest::of(b"x"));
        let b = k.sign_statement(&s, pubk.oms_hint());
        let (st, key) = open_bundle(&b, std::slice::from_ref(&pubk))
            .unwrap()
            .unwrap();
        assert_eq!(st, s);
        assert_eq!(key.fingerprint(), k.public().fingerprint());
        // Another key does not verify.
        let ed = Ed25519KeyPair::generate().unwrap();
        use aws_lc_rs::encoding::AsDer as _;
        let der = ed.to_pkcs8v1().unwrap();
        let pem = format!(
            "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
            base64::engine::general_purpose::STANDARD.encode(der.as_ref())
        );
        let ek = SigningKey::from_pem(pem.as_bytes(), "ed").unwrap();
        assert_eq!(ek.public().algorithm, Algorithm::Ed25519);
        assert!(open_bundle(&b, std::slice::from_ref(ek.public()))
            .unwrap()
            .is_none());
        let eb = ek.sign_statement(&s, String::new());
        assert!(open_bundle(&eb, std::slice::from_ref(ek.public()))
            .unwrap()
            .is_some());
        let _ = ed.public_key().as_der().unwrap();
    }

    #[test]
    fn bad_keys_are_one_line() {
        let e = SigningKey::from_pem(
            b"-----BEGIN ENCRYPTED PRIVATE KEY-----\nAA==\n-----END ENCRYPTED PRIVATE KEY-----\n",
            "k.pem",
        );
        assert!(e.err().unwrap().to_string().contains("encrypted"));
        let e = TrustedKey::from_pem(b"nothing", "p.pem")
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("p.pem: not a PEM public key"), "{e}");
        assert!(SigningKey::load("env://SEALVOL_TEST_NO_SUCH_VAR").is_err());
    }
}
