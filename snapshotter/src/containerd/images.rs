//! containerd's image records, read over its API (`containerd_address`):
//! where a view layer unpacked by `ctr images pull` came from.
//!
//! That path (`content.Fetch`, then `image.Unpack`) passes a snapshotter no
//! layer annotations, so the snapshotter sees only the unpacked pointer
//! file, which names the version but not its repository (SPEC.md §5.4). The
//! image record `ctr` stored before unpacking does: its name is the
//! reference pulled, and its target (the version index, or a view
//! manifest) carries `dev.sealvol.version`.

use std::path::{Path, PathBuf};

use sealvol_spec::oci::ANN_VERSION;
use sealvol_spec::B3Digest;
use tonic::transport::Channel;

use super::api::containerd::services::content::v1 as content;
use super::api::containerd::services::images::v1 as images;

/// The gRPC header naming the namespace a containerd call is in.
pub const NAMESPACE_HEADER: &str = "containerd-namespace";

/// The largest image target read: a version index lists a few manifests.
const MAX_TARGET: i64 = 4 << 20;

/// Why an image could not be found.
#[derive(Debug, thiserror::Error)]
pub enum LookupError {
    #[error("cannot reach containerd at {address}: {message}")]
    Connect { address: String, message: String },
    #[error("containerd's {call}: {message}")]
    Call { call: &'static str, message: String },
    #[error("no image in containerd's namespace {namespace:?} holds the sealed version {version}")]
    NotFound { namespace: String, version: String },
}

/// A client of containerd's images and content services.
#[derive(Clone, Debug)]
pub struct ImageRecords {
    address: PathBuf,
}

impl ImageRecords {
    pub fn new(address: impl Into<PathBuf>) -> ImageRecords {
        ImageRecords {
            address: address.into(),
        }
    }

    pub fn address(&self) -> &Path {
        &self.address
    }

    async fn channel(&self) -> Result<Channel, LookupError> {
        super::dial(&self.address)
            .await
            .map_err(|e| LookupError::Connect {
                address: self.address.display().to_string(),
                message: e.to_string(),
            })
    }

    /// The name (the reference it was pulled by) of the most recently
    /// updated image in `namespace` whose target is `version`'s index or
    /// one of its manifests.
    pub async fn find_version(
        &self,
        namespace: &str,
        version: &B3Digest,
    ) -> Result<String, LookupError> {
        let channel = self.channel().await?;
        let mut list = images::images_client::ImagesClient::new(channel.clone())
            .list(in_namespace(
                images::ListImagesRequest { filters: vec![] },
                namespace,
            ))
            .await
            .map_err(call("images list"))?
            .into_inner()
            .images;
        list.sort_by_key(|i| {
            std::cmp::Reverse(i.updated_at.as_ref().map(|t| (t.seconds, t.nanos)))
        });
        let wanted = version.to_string();
        let mut store = content::content_client::ContentClient::new(channel);
        for image in list {
            let Some(target) = image.target else { continue };
            // An index or a manifest, OCI's or docker's media type.
            if !target.media_type.ends_with("json") || !(1..=MAX_TARGET).contains(&target.size) {
                continue;
            }
            // An image whose target is not in the content store (fetched
            // partly, or its content collected) is not the one unpacking.
            let bytes = match read(&mut store, namespace, &target.digest, target.size).await {
                Ok(b) => b,
                Err(e) => {
                    tracing::debug!(image = %image.name, error = %e, "skipped");
                    continue;
                }
            };
            let names_version = serde_json::from_slice::<Annotated>(&bytes)
                .ok()
                .and_then(|a| a.annotations)
                .and_then(|a| a.get(ANN_VERSION).cloned())
                .is_some_and(|v| v == wanted);
            if names_version {
                return Ok(image.name);
            }
        }
        Err(LookupError::NotFound {
            namespace: namespace.to_string(),
            version: wanted,
        })
    }
}

#[derive(serde::Deserialize)]
struct Annotated {
    annotations: Option<std::collections::HashMap<String, String>>,
}

fn in_namespace<T>(message: T, namespace: &str) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    if let Ok(v) = namespace.parse() {
        req.metadata_mut().insert(NAMESPACE_HEADER, v);
    }
    req
}

fn call(call: &'static str) -> impl Fn(tonic::Status) -> LookupError {
    move |s| LookupError::Call {
        call,
        message: s.message().to_string(),
    }
}

/// Reads the blob `digest` of `size` bytes (already bounded) whole.
async fn read(
    store: &mut content::content_client::ContentClient<Channel>,
    namespace: &str,
    digest: &str,
    size: i64,
) -> Result<Vec<u8>, LookupError> {
    let request = content::ReadContentRequest {
        digest: digest.to_string(),
        offset: 0,
        size,
    };
    let mut stream = store
        .read(in_namespace(request, namespace))
        .await
        .map_err(call("content read"))?
        .into_inner();
    let mut out = Vec::with_capacity(size as usize);
    while let Some(part) = stream.message().await.map_err(call("content read"))? {
        if out.len() + part.data.len() > size as usize {
            return Err(LookupError::Call {
                call: "content read",
                message: format!("{digest} is longer than its descriptor's {size} bytes"),
            });
        }
        out.extend_from_slice(&part.data);
    }
    Ok(out)
}
