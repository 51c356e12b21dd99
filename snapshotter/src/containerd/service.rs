//! containerd's snapshots service over [`SnapshotStore`]: each call as
//! containerd's proxy snapshotter client makes it, each store error as
//! the gRPC code containerd turns back into its error class
//! (`ALREADY_EXISTS` tells an unpacker the layer is there already).

use std::collections::{BTreeMap, HashMap};
use std::pin::Pin;
use std::sync::Arc;

use tonic::{Request, Response, Status};

use super::api::containerd::services::snapshots::v1 as pb;
use super::api::containerd::types::Mount as WireMount;
use super::fuse_manager::Keeper;
use super::images::{ImageRecords, NAMESPACE_HEADER};
use super::store::{Kind, MountSpec, Record, SnapshotStore, StoreError};
use super::version::{pin, recognize, Recognized, VersionLayer};
use sealvol_spec::oci::ViewPointer;

/// The service; cheap to clone.
#[derive(Clone)]
pub struct SnapshotService {
    store: Arc<SnapshotStore>,
    /// The fuse manager, which mounts and serves the versions.
    keeper: Keeper,
    /// containerd's image records: where a view layer unpacked without
    /// labels came from.
    images: ImageRecords,
}

impl SnapshotService {
    pub fn new(store: SnapshotStore, keeper: Keeper, images: ImageRecords) -> SnapshotService {
        SnapshotService {
            store: Arc::new(store),
            keeper,
            images,
        }
    }

    pub fn store(&self) -> &Arc<SnapshotStore> {
        &self.store
    }

    pub fn keeper(&self) -> &Keeper {
        &self.keeper
    }

    /// Makes sure every version the store records is mounted: a manager
    /// that kept running says it serves them already; a new one (the old
    /// one died, or the node rebooted) mounts them again. One that cannot
    /// be mounted is logged; its reads fail until it is removed or the
    /// daemon restarts.
    pub async fn remount(&self) {
        let store = Arc::clone(&self.store);
        let Ok(Ok(all)) = tokio::task::spawn_blocking(move || store.list()).await else {
            tracing::error!("cannot list snapshots to mount their versions again");
            return;
        };
        for (name, r) in all {
            if let Err(e) = self.mount_mapped(&r).await {
                tracing::error!(snapshot = %name, "cannot mount its versions for its user namespace again: {}", e.message());
            }
            let Some(reference) = r.version.clone() else {
                continue;
            };
            // A prefetch the layer asked for is in the labels it was
            // prepared with.
            let labels: HashMap<String, String> = r.labels.clone().into_iter().collect();
            let prefetch = super::version::prefetch(&labels);
            let at = self.store.fs(r.id);
            if let Err(e) = self.keeper.mount(&reference, &at, prefetch).await {
                tracing::error!(snapshot = %name, "cannot mount {reference} again: {}", e.message());
            }
        }
    }

    /// A `Prepare` of a sealed version's view layer: the version mounted
    /// lazily and committed as the layer's chain ID, then `ALREADY_EXISTS`,
    /// which tells containerd's unpacker to skip the layer.
    async fn prepare_version(
        &self,
        parent: String,
        labels: BTreeMap<String, String>,
        layer: VersionLayer,
    ) -> Status {
        let (name, reference) = (layer.target.clone(), layer.reference.to_string());
        let exists = || {
            Status::already_exists(format!(
                "snapshot {} is the sealed version {reference}, mounted",
                layer.target
            ))
        };
        let (n, r) = (name.clone(), reference.clone());
        let record = match self
            .run(move |s| s.create_version(&n, &parent, labels, &r))
            .await
        {
            Ok(record) => record,
            // Another image with the same layer mounted it already.
            Err(e) if e.code() == tonic::Code::AlreadyExists => return exists(),
            Err(e) => return e,
        };
        let at = self.store.fs(record.id);
        match self.keeper.mount(&reference, &at, layer.prefetch).await {
            Ok(()) => {
                tracing::info!(snapshot = %name, "mounted {reference} lazily");
                exists()
            }
            Err(e) => {
                let _ = self.run(move |s| s.remove(&name)).await;
                e
            }
        }
    }

    /// A `Commit` of a sealed version's unpacked view layer (`ctr images
    /// pull`, which passes no labels): the version, found in the image
    /// record containerd stored before unpacking, is mounted lazily over
    /// the unpacked pointer file and committed as the layer. A version that
    /// cannot be mounted fails the commit, and so the pull, rather than
    /// leave a snapshot holding only the pointer file.
    async fn commit_version(
        &self,
        namespace: &str,
        r: pb::CommitSnapshotRequest,
        pointer: ViewPointer,
    ) -> Result<(), Status> {
        let image = self
            .images
            .find_version(namespace, &pointer.version)
            .await
            .map_err(|e| {
                Status::failed_precondition(format!(
                    "snapshot {} is the view layer of the sealed version {}, and {e}",
                    r.key, pointer.version
                ))
            })?;
        let reference = pin(&image, pointer.version).map_err(|e| {
            Status::failed_precondition(format!("the image of snapshot {}: {e}", r.key))
        })?;
        let k = r.key.clone();
        let active = self.run(move |s| s.get(&k)).await?;
        let (shown, at) = (reference.to_string(), self.store.fs(active.id));
        self.keeper.mount(&shown, &at, None).await?;
        let version = Some(shown.clone());
        let name = r.name.clone();
        match self
            .run(move |s| s.commit(&r.name, &r.key, labels(r.labels), version))
            .await
        {
            Ok(()) => {
                tracing::info!(snapshot = %name, "mounted {shown} lazily in place of its view layer");
                Ok(())
            }
            Err(e) => {
                let _ = self.keeper.unmount(&at).await;
                Err(e)
            }
        }
    }

    /// Mounts the sealed versions an active or view snapshot with id
    /// mapping labels is on, owned by its user namespace's root, where its
    /// mounts name them ([`SnapshotStore::mapped_versions`]).
    async fn mount_mapped(&self, r: &Record) -> Result<(), Status> {
        let record = r.clone();
        let mapped = self.run(move |s| s.mapped_versions(&record)).await?;
        for m in mapped {
            tokio::fs::create_dir_all(&m.at)
                .await
                .map_err(|e| Status::internal(format!("{}: {e}", m.at.display())))?;
            self.keeper
                .mount_owned(&m.reference, &m.at, None, Some(m.owner))
                .await?;
        }
        Ok(())
    }

    /// An active or view snapshot, and the mounts of versions it needs.
    async fn create(
        &self,
        kind: Kind,
        key: String,
        parent: String,
        labels: BTreeMap<String, String>,
    ) -> Result<Vec<WireMount>, Status> {
        let k = key.clone();
        let (record, m) = self
            .run(move |s| s.create(kind, &k, &parent, labels))
            .await?;
        if let Err(e) = self.mount_mapped(&record).await {
            let _ = self.unmount_mapped(&record).await;
            let _ = self.run(move |s| s.remove(&key)).await;
            return Err(e);
        }
        Ok(mounts(m))
    }

    async fn unmount_mapped(&self, r: &Record) -> Result<(), Status> {
        let record = r.clone();
        let mapped = self.run(move |s| s.mapped_versions(&record)).await?;
        for m in mapped {
            self.keeper.unmount(&m.at).await?;
        }
        Ok(())
    }

    pub fn into_server(self) -> pb::snapshots_server::SnapshotsServer<SnapshotService> {
        pb::snapshots_server::SnapshotsServer::new(self)
    }

    /// Runs a store operation off the async threads (redb commits fsync;
    /// a commit measures the layer).
    async fn run<T: Send + 'static>(
        &self,
        op: impl FnOnce(&SnapshotStore) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, Status> {
        let store = Arc::clone(&self.store);
        tokio::task::spawn_blocking(move || op(&store))
            .await
            .map_err(|e| Status::internal(format!("snapshot store task: {e}")))?
            .map_err(status)
    }
}

fn status(e: StoreError) -> Status {
    let message = e.to_string();
    match e {
        StoreError::AlreadyExists(_) => Status::already_exists(message),
        StoreError::NotFound(_) => Status::not_found(message),
        StoreError::FailedPrecondition(_) => Status::failed_precondition(message),
        StoreError::InvalidArgument(_) => Status::invalid_argument(message),
        StoreError::Internal(_) => Status::internal(message),
    }
}

/// The containerd namespace a call on `key` is made in: its gRPC header,
/// else the first segment of the key (containerd's metadata store names
/// backend snapshots `NAMESPACE/ID/KEY`).
fn namespace(metadata: &tonic::metadata::MetadataMap, key: &str) -> String {
    metadata
        .get(NAMESPACE_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
        .unwrap_or_else(|| {
            key.split_once('/')
                .map_or("default", |(ns, _)| ns)
                .to_string()
        })
}

fn mounts(specs: Vec<MountSpec>) -> Vec<WireMount> {
    specs
        .into_iter()
        .map(|m| WireMount {
            r#type: m.kind,
            source: m.source,
            target: String::new(),
            options: m.options,
        })
        .collect()
}

fn timestamp(nanos: u128) -> prost_types::Timestamp {
    prost_types::Timestamp {
        seconds: (nanos / 1_000_000_000) as i64,
        nanos: (nanos % 1_000_000_000) as i32,
    }
}

fn info(name: String, r: Record) -> pb::Info {
    pb::Info {
        name,
        parent: r.parent,
        kind: match r.kind {
            Kind::View => pb::Kind::View,
            Kind::Active => pb::Kind::Active,
            Kind::Committed => pb::Kind::Committed,
        } as i32,
        created_at: Some(timestamp(r.created_at)),
        updated_at: Some(timestamp(r.updated_at)),
        labels: r.labels.into_iter().collect(),
    }
}

fn labels(l: std::collections::HashMap<String, String>) -> BTreeMap<String, String> {
    l.into_iter().collect()
}

/// Infos per `List` answer: containerd reads the stream to its end.
const LIST_BATCH: usize = 100;

type ListStream =
    Pin<Box<dyn tokio_stream::Stream<Item = Result<pb::ListSnapshotsResponse, Status>> + Send>>;

#[tonic::async_trait]
impl pb::snapshots_server::Snapshots for SnapshotService {
    async fn prepare(
        &self,
        req: Request<pb::PrepareSnapshotRequest>,
    ) -> Result<Response<pb::PrepareSnapshotResponse>, Status> {
        let r = req.into_inner();
        match recognize(&r.labels) {
            Recognized::Version(layer) => {
                return Err(self
                    .prepare_version(r.parent, labels(r.labels), layer)
                    .await)
            }
            Recognized::Unusable(why) => tracing::warn!(key = %r.key, "{why}"),
            Recognized::Ordinary => {}
        }
        let mounts = self
            .create(Kind::Active, r.key, r.parent, labels(r.labels))
            .await?;
        Ok(Response::new(pb::PrepareSnapshotResponse { mounts }))
    }

    async fn view(
        &self,
        req: Request<pb::ViewSnapshotRequest>,
    ) -> Result<Response<pb::ViewSnapshotResponse>, Status> {
        let r = req.into_inner();
        let mounts = self
            .create(Kind::View, r.key, r.parent, labels(r.labels))
            .await?;
        Ok(Response::new(pb::ViewSnapshotResponse { mounts }))
    }

    async fn mounts(
        &self,
        req: Request<pb::MountsRequest>,
    ) -> Result<Response<pb::MountsResponse>, Status> {
        let key = req.into_inner().key;
        let m = self.run(move |s| s.mounts(&key)).await?;
        Ok(Response::new(pb::MountsResponse { mounts: mounts(m) }))
    }

    async fn commit(
        &self,
        req: Request<pb::CommitSnapshotRequest>,
    ) -> Result<Response<()>, Status> {
        let namespace = namespace(req.metadata(), &req.get_ref().key);
        let r = req.into_inner();
        let key = r.key.clone();
        if let Some(pointer) = self.run(move |s| s.view_pointer(&key)).await? {
            self.commit_version(&namespace, r, pointer).await?;
            return Ok(Response::new(()));
        }
        // A committed snapshot is its upper dir alone: the versions mounted
        // for its user namespace served only its own overlay.
        let k = r.key.clone();
        let active = self.run(move |s| s.get(&k)).await?;
        self.unmount_mapped(&active).await?;
        self.run(move |s| s.commit(&r.name, &r.key, labels(r.labels), None))
            .await?;
        Ok(Response::new(()))
    }

    async fn remove(
        &self,
        req: Request<pb::RemoveSnapshotRequest>,
    ) -> Result<Response<()>, Status> {
        let key = req.into_inner().key;
        let k = key.clone();
        let r = self.run(move |s| s.removable(&k)).await?;
        // A version's mount goes first (detached if files are still open),
        // then its record and folder.
        if r.version.is_some() {
            self.keeper.unmount(&self.store.fs(r.id)).await?;
        }
        self.unmount_mapped(&r).await?;
        self.run(move |s| s.remove(&key)).await?;
        Ok(Response::new(()))
    }

    async fn stat(
        &self,
        req: Request<pb::StatSnapshotRequest>,
    ) -> Result<Response<pb::StatSnapshotResponse>, Status> {
        let key = req.into_inner().key;
        let k = key.clone();
        let r = self.run(move |s| s.get(&k)).await?;
        Ok(Response::new(pb::StatSnapshotResponse {
            info: Some(info(key, r)),
        }))
    }

    async fn update(
        &self,
        req: Request<pb::UpdateSnapshotRequest>,
    ) -> Result<Response<pb::UpdateSnapshotResponse>, Status> {
        let r = req.into_inner();
        let Some(i) = r.info else {
            return Err(Status::invalid_argument(
                "an update names the snapshot in info",
            ));
        };
        let paths = r.update_mask.map(|m| m.paths).unwrap_or_default();
        let name = i.name.clone();
        let updated = self
            .run(move |s| s.update_labels(&i.name, labels(i.labels), &paths))
            .await?;
        Ok(Response::new(pb::UpdateSnapshotResponse {
            info: Some(info(name, updated)),
        }))
    }

    type ListStream = ListStream;

    async fn list(
        &self,
        _req: Request<pb::ListSnapshotsRequest>,
    ) -> Result<Response<ListStream>, Status> {
        // containerd filters what it lists itself; every snapshot is sent.
        let all = self.run(|s| s.list()).await?;
        let infos: Vec<pb::Info> = all.into_iter().map(|(k, r)| info(k, r)).collect();
        let batches: Vec<Result<pb::ListSnapshotsResponse, Status>> = infos
            .chunks(LIST_BATCH)
            .map(|c| Ok(pb::ListSnapshotsResponse { info: c.to_vec() }))
            .collect();
        Ok(Response::new(Box::pin(tokio_stream::iter(batches))))
    }

    async fn usage(
        &self,
        req: Request<pb::UsageRequest>,
    ) -> Result<Response<pb::UsageResponse>, Status> {
        let key = req.into_inner().key;
        let (size, inodes) = self.run(move |s| s.usage(&key)).await?;
        Ok(Response::new(pb::UsageResponse {
            size: i64::try_from(size).unwrap_or(i64::MAX),
            inodes: i64::try_from(inodes).unwrap_or(i64::MAX),
        }))
    }

    async fn cleanup(&self, _req: Request<pb::CleanupRequest>) -> Result<Response<()>, Status> {
        let removed = self.run(|s| s.cleanup()).await?;
        if removed > 0 {
            tracing::info!(removed, "removed snapshot folders no record names");
        }
        Ok(Response::new(()))
    }
}
