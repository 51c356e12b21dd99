//! Manifests as the registry stores them, with no HTTP in it: parsing and
//! checking what a manifest references, storing it under a digest or a tag
//! in one transaction, and sealing a version when it is a version index
//! (SPEC.md §7.1). The `/v2` manifest PUT and the sync runner both store
//! through `store_manifest`.

use bytes::Bytes;
use sealvol_spec::oci::OciDescriptor;
use sealvol_spec::Sha256Digest;
use serde_json::Value;
use sha2::{Digest as _, Sha256};

use crate::error::{Code, RegistryError, Result};
use crate::state::app::App;
use crate::store::meta::{ManifestRecord, References};

/// A manifest, as CNCF distribution and zot.
pub const MAX_MANIFEST: usize = 4 << 20;

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub(crate) const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

pub(crate) fn parse_digest(s: &str) -> Result<Sha256Digest> {
    s.parse().map_err(|_| {
        RegistryError::new(
            Code::DigestInvalid,
            format!("{s:?} is not a sha256:<64 hex> digest"),
        )
    })
}

pub(crate) fn check_tag(s: &str) -> Result<()> {
    s.parse::<sealvol_spec::Tag>()
        .map(|_| ())
        .map_err(|e| RegistryError::new(Code::ManifestInvalid, e.to_string()))
}

/// The descriptors a manifest references: blobs for an image manifest,
/// child manifests for an index.
pub(crate) struct Parsed {
    pub media_type: String,
    pub blobs: Vec<Sha256Digest>,
    pub children: Vec<Sha256Digest>,
    pub subject: Option<Sha256Digest>,
    pub artifact_type: Option<String>,
    pub annotations: Option<Value>,
}

fn descriptor_digest(d: &Value, what: &str) -> Result<Sha256Digest> {
    let invalid = |why: String| RegistryError::new(Code::ManifestInvalid, why);
    let s = d
        .get("digest")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{what} has no digest")))?;
    if d.get("mediaType").and_then(Value::as_str).is_none()
        || d.get("size").and_then(Value::as_u64).is_none()
    {
        return Err(invalid(format!("{what} needs mediaType, digest and size")));
    }
    s.parse().map_err(|_| {
        RegistryError::new(
            Code::DigestInvalid,
            format!("{what} digest {s:?} is not sha256:<64 hex>"),
        )
    })
}

pub(crate) fn parse_manifest(bytes: &[u8], content_type: Option<&str>) -> Result<Parsed> {
    let invalid = |why: &str| RegistryError::new(Code::ManifestInvalid, why.to_string());
    let v: Value = serde_json::from_slice(bytes).map_err(|e| invalid(&format!("not JSON: {e}")))?;
    if v.get("schemaVersion").and_then(Value::as_u64) != Some(2) {
        return Err(invalid("schemaVersion must be 2"));
    }
    let declared = v.get("mediaType").and_then(Value::as_str);
    let media_type = match (declared, content_type) {
        (Some(d), Some(c)) if d != c => {
            return Err(invalid(&format!(
                "mediaType {d} differs from Content-Type {c}"
            )));
        }
        (Some(d), _) => d.to_string(),
        (None, Some(c)) => c.to_string(),
        (None, None) if v.get("manifests").is_some() => OCI_INDEX.to_string(),
        (None, None) => OCI_MANIFEST.to_string(),
    };
    let mut p = Parsed {
        media_type,
        blobs: Vec::new(),
        children: Vec::new(),
        subject: None,
        artifact_type: v
            .get("artifactType")
            .and_then(Value::as_str)
            .map(str::to_string),
        annotations: v.get("annotations").cloned(),
    };
    match p.media_type.as_str() {
        OCI_MANIFEST | DOCKER_MANIFEST => {
            let config = v
                .get("config")
                .ok_or_else(|| invalid("image manifest has no config"))?;
            p.blobs.push(descriptor_digest(config, "config")?);
            if p.artifact_type.is_none() {
                p.artifact_type = config
                    .get("mediaType")
                    .and_then(Value::as_str)
                    .map(str::to_string);
            }
            let layers = v
                .get("layers")
                .and_then(Value::as_array)
                .ok_or_else(|| invalid("image manifest has no layers array"))?;
            for (i, l) in layers.iter().enumerate() {
                // Non-distributable layers with URLs live elsewhere.
                if l.get("urls").is_none() {
                    p.blobs.push(descriptor_digest(l, &format!("layer {i}"))?);
                }
            }
        }
        OCI_INDEX | DOCKER_LIST => {
            let manifests = v
                .get("manifests")
                .and_then(Value::as_array)
                .ok_or_else(|| invalid("index has no manifests array"))?;
            for (i, m) in manifests.iter().enumerate() {
                p.children
                    .push(descriptor_digest(m, &format!("manifest {i}"))?);
            }
        }
        other => return Err(invalid(&format!("unsupported manifest media type {other}"))),
    }
    if let Some(s) = v.get("subject") {
        p.subject = Some(descriptor_digest(s, "subject")?);
    }
    Ok(p)
}

/// The descriptor (JSON) the referrers API lists for manifest `digest`
/// of `size` bytes when it has a subject.
pub(crate) fn referrer_descriptor(
    parsed: &Parsed,
    digest: &Sha256Digest,
    size: usize,
) -> Option<String> {
    parsed.subject.map(|_| {
        let mut d = serde_json::json!({
            "mediaType": parsed.media_type,
            "digest": digest.to_string(),
            "size": size,
        });
        if let Some(t) = &parsed.artifact_type {
            d["artifactType"] = Value::String(t.clone());
        }
        if let Some(a) = &parsed.annotations {
            d["annotations"] = a.clone();
        }
        d.to_string()
    })
}

/// Stores a manifest under `reference` (its digest or a tag) in `name`, as
/// a PUT does: checks it, requires what it references to be in the
/// repository, seals a version index. Answers its digest and subject.
pub(crate) async fn store_manifest(
    app: &App,
    name: &str,
    reference: &str,
    bytes: Bytes,
    content_type: Option<&str>,
) -> Result<(Sha256Digest, Option<Sha256Digest>)> {
    let digest = Sha256Digest(Sha256::digest(&bytes).into());
    let tag = if reference.contains(':') {
        if parse_digest(reference)? != digest {
            return Err(RegistryError::new(
                Code::DigestInvalid,
                format!("manifest digest is {digest}, not {reference}"),
            ));
        }
        None
    } else {
        check_tag(reference)?;
        Some(reference.to_string())
    };
    let parsed = parse_manifest(&bytes, content_type)?;

    let subject_descriptor = referrer_descriptor(&parsed, &digest, bytes.len());
    // A version index seals a version of the volume (SPEC.md §7.1), or
    // re-publishes one the volume holds, whose tree's format decides which
    // index stays current. It is checked as a reader would check it before
    // anything is stored: an index that claims a version it is not would
    // otherwise move that version's tags onto bytes no client can pull.
    let sealed = match claims_version(&parsed) {
        true => Some(check_version(app, name, &bytes).await?),
        false => None,
    };
    if let Some(t) = &tag {
        check_digest_tag(t, sealed.as_ref())?;
    }
    let refs = References {
        blobs: parsed.blobs.iter().map(ToString::to_string).collect(),
        children: parsed.children.iter().map(ToString::to_string).collect(),
    };
    let record = ManifestRecord {
        media_type: parsed.media_type,
        size: bytes.len() as u64,
        subject: subject_descriptor,
        stored_at: app.now(),
    };
    // Every referenced blob and child manifest must already be in this
    // repository; they are checked in the transaction that records the
    // manifest, with garbage collection's sweep held off.
    let _sweep = app.sweep.read().await;
    let mark = crate::service::links::sweep_mark(app).await?;
    app.blobs.put(&digest, bytes.clone()).await?;
    let (repo, d, subject) = (
        name.to_string(),
        digest.to_string(),
        parsed.subject.map(|s| s.to_string()),
    );
    let now = app.now();
    let stored = app
        .meta(move |m| {
            m.put_manifest(
                &repo,
                &d,
                &record,
                &refs,
                tag.as_deref(),
                subject.as_deref(),
                sealed.as_ref(),
                now,
            )
        })
        .await?;
    // Recorded: a sweep here would now see the manifest, so the lock is
    // not held while waiting out another replica's sweep (a write that
    // waits holding it would keep this replica's next pass waiting too).
    drop(_sweep);
    if stored.is_ok()
        && !crate::service::links::settle(app, mark, &[digest])
            .await?
            .is_empty()
    {
        // A sweep on another replica took the bytes as they were stored.
        app.blobs.put(&digest, bytes.clone()).await?;
    }
    if let Err(what) = stored {
        return Err(RegistryError::new(
            Code::ManifestBlobUnknown,
            format!("{what} is not in repository {name}; push it first"),
        ));
    }
    Ok((digest, parsed.subject))
}

/// Whether a manifest says it is a sealvol version index: an index with
/// the version's `artifactType` or its `dev.sealvol.version` annotation,
/// either of which makes a reader take it for one (SPEC.md §5.7). (Every
/// manifest of a version carries the annotation; only its index is the
/// version.)
fn claims_version(p: &Parsed) -> bool {
    use sealvol_spec::oci::{ANN_VERSION, MT_VERSION};
    let index = p.media_type == OCI_INDEX || p.media_type == DOCKER_LIST;
    let annotated = (p.annotations.as_ref()).is_some_and(|a| a.get(ANN_VERSION).is_some());
    index && (annotated || p.artifact_type.as_deref() == Some(MT_VERSION))
}

/// Checks a version index of `name` before it is stored, as a reader
/// checks one (SPEC.md §5.7): its tree manifest is in the repository, its
/// tree index decodes and its version digest is the one the index claims,
/// and its chunk manifests list every chunk the tree names (garbage
/// collection keeps what they list, and nothing else). Answers what
/// sealing it records; refuses it with `MANIFEST_INVALID` (or
/// `MANIFEST_BLOB_UNKNOWN` for what was not pushed yet) otherwise.
async fn check_version(
    app: &App,
    name: &str,
    bytes: &[u8],
) -> Result<crate::store::meta::volumes::Sealed> {
    use crate::service::trees::Unreadable;
    use sealvol_spec::oci::sha256_of;
    let invalid =
        |why: String| RegistryError::new(Code::ManifestInvalid, format!("not a version: {why}"));
    let ix = sealvol_spec::oci::VersionIndex::parse(bytes).map_err(|e| invalid(e.to_string()))?;
    let claimed = ix.digest.to_string();
    let invalid = |why: String| {
        RegistryError::new(
            Code::ManifestInvalid,
            format!("the index claims version {claimed}, but {why}"),
        )
    };
    // Each manifest it names is in the repository, as its descriptor says:
    // a reader (containerd) refuses content of another size or type.
    // (`parse_manifest` refused children that are not sha256.)
    let named = std::iter::once(&ix.tree_manifest)
        .chain(&ix.chunk_manifests)
        .chain(&ix.view_manifests);
    for m in named {
        let d = sha256_of(m).ok_or_else(|| invalid(format!("{} is not sha256", m.digest())))?;
        let (repo, key) = (name.to_string(), d.to_string());
        let Some(record) = app.meta(move |m| m.manifest(&repo, &key)).await? else {
            return Err(RegistryError::new(
                Code::ManifestBlobUnknown,
                format!("manifest {d} is not in repository {name}; push it first"),
            ));
        };
        if record.size != m.size() || record.media_type != m.media_type().to_string() {
            return Err(invalid(format!(
                "its descriptor of {d} says {} bytes of {}, and the manifest is {} bytes of {}",
                m.size(),
                m.media_type(),
                record.size,
                record.media_type
            )));
        }
    }
    let refused = |e: Unreadable| match e {
        Unreadable::Missing(what) => RegistryError::new(
            Code::ManifestBlobUnknown,
            format!("{what} is not in repository {name}; push it first"),
        ),
        Unreadable::Invalid(why) => invalid(why),
        Unreadable::Store(e) => e,
    };
    let found = crate::service::trees::read_tree(app, &ix)
        .await
        .map_err(refused)?;
    let tree = found.tree.clone();
    let (digest, named, stats) = tokio::task::spawn_blocking(move || {
        let named: std::collections::BTreeSet<Sha256Digest> = tree
            .entries()
            .iter()
            .flat_map(|e| match &e.data {
                sealvol_spec::EntryData::File { chunks, .. } => chunks.as_slice(),
                _ => &[],
            })
            .map(|c| c.sha256)
            .collect();
        (tree.version_digest(), named, tree.stats())
    })
    .await
    .map_err(RegistryError::internal)?;
    if digest != ix.digest {
        return Err(invalid(format!("its tree's version digest is {digest}")));
    }
    // What the index says of the tree, the volume API shows as the
    // version's: it must be so (SPEC.md §5.5).
    use sealvol_spec::oci::{ANN_FILES, ANN_SIZE};
    let index: Value = serde_json::from_slice(bytes).unwrap_or_default();
    for (key, actual) in [(ANN_SIZE, stats.bytes), (ANN_FILES, stats.files)] {
        let said = index["annotations"][key].as_str();
        if let Some(v) = said.filter(|v| *v != actual.to_string()) {
            return Err(invalid(format!(
                "its {key} is {v:?}, and its tree holds {actual}"
            )));
        }
    }
    let chunks = crate::service::volumes::chunk_sizes(app, &ix)
        .await
        .map_err(refused)?;
    let listed: std::collections::HashSet<&Sha256Digest> = chunks.iter().map(|(d, _)| d).collect();
    if let Some(missing) = named.iter().find(|c| !listed.contains(c)) {
        return Err(invalid(format!(
            "chunk {missing} of its tree is in none of its chunk manifests"
        )));
    }
    Ok(crate::store::meta::volumes::Sealed::new(
        &ix,
        Some(found.format),
        Some(chunks),
    ))
}

/// A `b3-<hex>` tag names the version of that digest (SPEC.md §5.3), and
/// the registry keeps it on the version's current index: a manifest
/// stored under it must be that version's index.
fn check_digest_tag(tag: &str, sealed: Option<&crate::store::meta::volumes::Sealed>) -> Result<()> {
    let Some(hex) = tag.strip_prefix("b3-") else {
        return Ok(());
    };
    if sealed.is_some_and(|s| s.version.strip_prefix("b3:") == Some(hex)) {
        return Ok(());
    }
    Err(RegistryError::new(
        Code::ManifestInvalid,
        format!(
            "tag {tag} is the digest tag of version b3:{hex}; only that version's index may be stored under it"
        ),
    ))
}

/// The format of the tree index a version index's tree manifest holds, by
/// the media type of its one layer (SPEC.md §5.6); `None` when the tree
/// manifest is not stored (the index is then refused) or is not a tree
/// manifest of a format this registry knows.
pub(crate) async fn tree_format(
    app: &App,
    ix: &sealvol_spec::oci::VersionIndex,
) -> Option<sealvol_spec::TreeFormat> {
    use sealvol_spec::oci::{artifact_layers, sha256_of, MT_TREE_BLOB, MT_TREE_BLOB_V1};
    let d = sha256_of(&ix.tree_manifest)?;
    let bytes = app.blobs.get(&d).await.ok()??;
    let layers = artifact_layers(&bytes, sealvol_spec::oci::MT_TREE_MANIFEST).ok()?;
    let [layer] = layers.as_slice() else {
        return None;
    };
    match layer.media_type().to_string().as_str() {
        MT_TREE_BLOB => Some(sealvol_spec::TreeFormat::V2),
        MT_TREE_BLOB_V1 => Some(sealvol_spec::TreeFormat::V1),
        _ => None,
    }
}

// The OCI reads and deletes of `/v2`, one metadata call each.

/// The digest tag `tag` of `repo` points at, if any.
pub(crate) async fn resolve_tag(app: &App, repo: &str, tag: &str) -> Result<Option<String>> {
    let (repo, tag) = (repo.to_string(), tag.to_string());
    app.meta(move |m| m.resolve_tag(&repo, &tag)).await
}

/// The record of manifest `digest` in `repo`, if it is there.
pub(crate) async fn record(
    app: &App,
    repo: &str,
    digest: &str,
) -> Result<Option<crate::store::meta::ManifestRecord>> {
    let (repo, digest) = (repo.to_string(), digest.to_string());
    app.meta(move |m| m.manifest(&repo, &digest)).await
}

/// Deletes manifest `digest` of `repo`; whether it was there.
pub(crate) async fn delete(app: &App, repo: &str, digest: &str) -> Result<bool> {
    let (repo, digest, now) = (repo.to_string(), digest.to_string(), app.now());
    app.meta(move |m| m.delete_manifest(&repo, &digest, now))
        .await
}

/// Deletes tag `tag` of `repo`; whether it was there.
pub(crate) async fn delete_tag(app: &App, repo: &str, tag: &str) -> Result<bool> {
    let (repo, tag, now) = (repo.to_string(), tag.to_string(), app.now());
    app.meta(move |m| m.delete_tag(&repo, &tag, now)).await
}

/// Whether `repo` exists, and a page of its tags after `last` (with
/// whether more follow).
pub(crate) async fn tags(
    app: &App,
    repo: &str,
    last: Option<String>,
    n: usize,
) -> Result<(bool, (Vec<String>, bool))> {
    let repo = repo.to_string();
    app.meta(move |m| {
        Ok::<_, RegistryError>((m.repo_exists(&repo)?, m.tags(&repo, last.as_deref(), n)?))
    })
    .await
}

/// A page of repository names after `last`, and whether more follow.
pub(crate) async fn catalog(
    app: &App,
    last: Option<String>,
    n: usize,
) -> Result<(Vec<String>, bool)> {
    app.meta(move |meta| meta.catalog(last.as_deref(), n)).await
}

/// The descriptors of the manifests of `repo` whose subject is `subject`,
/// those whose `artifactType` is `artifact_type` when one is given.
pub(crate) async fn referrers(
    app: &App,
    repo: &str,
    subject: &Sha256Digest,
    artifact_type: Option<&str>,
) -> Result<Vec<OciDescriptor>> {
    let (r, s) = (repo.to_string(), subject.to_string());
    let rows = app.meta(move |m| m.referrers(&r, &s)).await?;
    let mut found: Vec<OciDescriptor> = rows
        .iter()
        .filter_map(|row| match serde_json::from_str(row) {
            Ok(d) => Some(d),
            Err(e) => {
                tracing::warn!(repo, subject = %subject, error = %e, "a referrer's descriptor does not parse; left out");
                None
            }
        })
        .collect();
    if let Some(t) = artifact_type {
        found.retain(|d| sealvol_spec::oci::is_artifact(d, t));
    }
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn digest() -> impl Strategy<Value = Sha256Digest> {
        any::<[u8; 32]>().prop_map(Sha256Digest)
    }

    fn descriptor(mt: &str, d: &Sha256Digest) -> Value {
        serde_json::json!({"mediaType": mt, "digest": d.to_string(), "size": 1})
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(128))]

        #[test]
        fn any_bytes_parse_or_are_refused(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse_manifest(&bytes, None);
            let _ = parse_manifest(&bytes, Some(OCI_INDEX));
        }

        /// What a manifest references comes back in order; a damaged
        /// digest or schema version is refused.
        #[test]
        fn references_round_trip_and_damage_is_refused(
            config in digest(),
            layers in prop::collection::vec(digest(), 0..8),
            children in prop::collection::vec(digest(), 1..8),
            which in any::<prop::sample::Index>(),
        ) {
            let image = serde_json::json!({
                "schemaVersion": 2,
                "mediaType": OCI_MANIFEST,
                "config": descriptor("application/vnd.oci.image.config.v1+json", &config),
                "layers": layers.iter().map(|l| descriptor("application/octet-stream", l)).collect::<Vec<_>>(),
            });
            let p = parse_manifest(image.to_string().as_bytes(), Some(OCI_MANIFEST)).unwrap();
            let mut want = vec![config];
            want.extend(layers.iter().copied());
            prop_assert_eq!(&p.blobs, &want);
            prop_assert!(p.children.is_empty());

            let index = serde_json::json!({
                "schemaVersion": 2,
                "manifests": children.iter().map(|c| descriptor(OCI_MANIFEST, c)).collect::<Vec<_>>(),
            });
            let p = parse_manifest(index.to_string().as_bytes(), None).unwrap();
            prop_assert_eq!(&p.media_type, OCI_INDEX);
            prop_assert_eq!(&p.children, &children);

            let mut bad = index.clone();
            let i = which.index(children.len());
            let d = children[i].to_string();
            bad["manifests"][i]["digest"] = Value::String(d[..d.len() - 1].to_string());
            prop_assert!(parse_manifest(bad.to_string().as_bytes(), None).is_err());
            let mut bad = image.clone();
            bad["schemaVersion"] = Value::from(1);
            prop_assert!(parse_manifest(bad.to_string().as_bytes(), None).is_err());
        }
    }
}
