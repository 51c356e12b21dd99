//! The S3 operations the gateway serves (SPEC.md §10.2), each as its
//! paragraph says, over `service::files` and the volume records:
//! `ListBuckets`, `HeadBucket`, `GetBucketLocation`, `ListObjectsV2` (and
//! the older `ListObjects`), `HeadObject` and `GetObject`. The S3 trait's
//! other operations keep their "not implemented" answer; writes never get
//! here (`access::Policy` refuses them).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use s3s::dto::{
    Bucket, CommonPrefix, ContentType, ETag, GetBucketLocationInput, GetBucketLocationOutput,
    GetObjectInput, GetObjectOutput, HeadBucketInput, HeadBucketOutput, HeadObjectInput,
    HeadObjectOutput, ListBucketsInput, ListBucketsOutput, ListObjectsInput, ListObjectsOutput,
    ListObjectsV2Input, ListObjectsV2Output, Object, StreamingBlob, Timestamp,
};
use s3s::{s3_error, S3Error, S3Request, S3Response, S3Result, S3};
use sealvol_spec::api::Action;
use sealvol_spec::tree::EntryData;
use sealvol_spec::{B3Digest, TreeIndex};

use crate::auth::policy::Subject;
use crate::auth::Auth;
use crate::http::s3::access::Who;
use crate::http::s3::addressing::{self, Cursor, Item, Page, Under};
use crate::service::files::{self, File, FileError, Resolved};
use crate::service::{trees, volumes};
use crate::state::app::App;

/// Most keys and common prefixes one listing page holds, as in S3.
const MAX_KEYS: usize = 1000;

/// Most version trees one listing page reads; past it the page ends
/// early (truncated, possibly empty) and the next one goes on, so no
/// request reads a bucket's every version.
const MAX_TREES: usize = 64;

/// What S3's `encoding-type=url` leaves as it is: RFC 3986's unreserved
/// characters, and `/`, as S3 does.
const KEY_ENCODE: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~')
    .remove(b'/');

pub struct Gateway {
    pub app: Arc<App>,
    pub auth: Arc<Auth>,
}

/// What a listing shows of one file.
struct Listed {
    size: u64,
    blake3: B3Digest,
    modified: Option<Timestamp>,
}

/// One root of a bucket's key space: a volume at one of its versions.
struct Root {
    key: String,
    digest: B3Digest,
    volume: String,
}

/// A listing request, as both versions of `ListObjects` ask it.
struct Listing {
    bucket: String,
    prefix: String,
    delimiter: Option<String>,
    cursor: Cursor,
    max: usize,
}

/// A listing's answer: its entries, and where the next page starts.
struct ListPage {
    items: Vec<Item<Listed>>,
    next: Option<Cursor>,
}

fn who<T>(req: &S3Request<T>) -> Subject {
    req.extensions
        .get::<Who>()
        .map_or(Subject::Anonymous, |w| w.0.clone())
}

fn timestamp(rfc3339: Option<&str>) -> Option<Timestamp> {
    let at: SystemTime = humantime::parse_rfc3339_weak(rfc3339?).ok()?;
    Some(Timestamp::from(at))
}

fn etag(d: &B3Digest) -> ETag {
    // The file's BLAKE3, which the version digest covers: a strong
    // validator, and never an MD5 (SPEC.md §10.2).
    ETag::Strong(d.hex())
}

fn internal(e: impl std::fmt::Display) -> S3Error {
    tracing::error!("S3 gateway: {e}");
    s3_error!(InternalError, "{e}")
}

impl Gateway {
    /// A subject's view: may it pull `repository`?
    fn may_pull(&self, subject: &Subject, repository: &str) -> bool {
        self.auth.policy().allows(subject, repository, Action::Pull)
    }

    /// The volumes of `bucket` the subject may pull; `NoSuchBucket` when
    /// it holds none, `AccessDenied` when it holds only others.
    async fn volumes_of(
        &self,
        subject: &Subject,
        bucket: &str,
    ) -> S3Result<Vec<sealvol_spec::api::Volume>> {
        if addressing::volume_name(bucket, "x").is_none() {
            return Err(s3_error!(NoSuchBucket, "{bucket:?} is not a namespace"));
        }
        let all = volumes::list(&self.app, Some(bucket.to_string()))
            .await
            .map_err(internal)?;
        if all.is_empty() {
            return Err(s3_error!(NoSuchBucket, "no namespace {bucket}"));
        }
        let visible: Vec<_> = all
            .into_iter()
            .filter(|v| self.may_pull(subject, &v.name))
            .collect();
        if visible.is_empty() {
            crate::auth::caller::denied_line(subject, bucket, "pull");
            return Err(s3_error!(
                AccessDenied,
                "{} may pull no volume of {bucket}",
                subject.name()
            ));
        }
        Ok(visible)
    }

    /// A refusal from `files`, in S3's terms.
    async fn refused(&self, bucket: &str, key: &str, e: FileError) -> S3Error {
        match e {
            FileError::VolumeUnknown(_) => {
                let empty = volumes::list(&self.app, Some(bucket.to_string()))
                    .await
                    .map(|v| v.is_empty())
                    .unwrap_or(false);
                if empty {
                    s3_error!(NoSuchBucket, "no namespace {bucket}")
                } else {
                    s3_error!(NoSuchKey, "{key}: {e}")
                }
            }
            FileError::VersionUnknown { .. } | FileError::PathUnknown(_) => {
                s3_error!(NoSuchKey, "{key}: {e}")
            }
            FileError::RangeNotSatisfiable { .. } => s3_error!(InvalidRange, "{e}"),
            FileError::Unverifiable(_) => s3_error!(InvalidObjectState, "{e}"),
            FileError::Corrupt { .. } | FileError::Registry(_) => internal(e),
        }
    }

    /// The file `key` of `bucket` names, in the version it names now.
    async fn find(&self, bucket: &str, key: &str) -> S3Result<(Resolved, File)> {
        let k = addressing::parse(bucket, key).ok_or_else(|| {
            s3_error!(
                NoSuchKey,
                "{key}: a key is VOLUME/PATH, VOLUME:TAG/PATH or VOLUME@b3:HEX/PATH"
            )
        })?;
        let found = match files::resolve(&self.app, &k.volume, &k.selector).await {
            Ok(f) => f,
            Err(e) => return Err(self.refused(bucket, key, e).await),
        };
        match files::file(&found.tree, &k.path) {
            Ok(file) => Ok((found, file)),
            Err(e) => Err(self.refused(bucket, key, e).await),
        }
    }

    /// The roots of `volumes` that a listing of `prefix` may reach, in
    /// byte order, with when each version was made.
    async fn roots(
        &self,
        bucket: &str,
        volumes: Vec<sealvol_spec::api::Volume>,
        prefix: &str,
    ) -> S3Result<(Vec<Root>, HashMap<B3Digest, Option<String>>)> {
        let mut roots = Vec::new();
        let mut made = HashMap::new();
        for v in volumes {
            let Some(short) = v
                .name
                .strip_prefix(bucket)
                .and_then(|n| n.strip_prefix('/'))
            else {
                continue;
            };
            // Deeper names have no key (SPEC.md §10.1); others only where
            // the prefix may reach them.
            if short.contains('/') || !(prefix.starts_with(short) || short.starts_with(prefix)) {
                continue;
            }
            let versions = volumes::versions(&self.app, &v.name, false)
                .await
                .map_err(internal)?;
            let mut root = |key: String, digest: B3Digest| {
                roots.push(Root {
                    key,
                    digest,
                    volume: v.name.clone(),
                })
            };
            if let Some(h) = &v.head {
                root(format!("{short}/"), h.digest);
            }
            for t in &v.tags {
                root(format!("{short}:{}/", t.tag), t.digest);
            }
            for ver in versions {
                root(format!("{short}@{}/", ver.digest), ver.digest);
                made.insert(ver.digest, ver.created_at);
            }
        }
        roots.sort_by(|a, b| a.key.cmp(&b.key));
        Ok((roots, made))
    }

    /// One page of a bucket's keys (SPEC.md §10.2): its roots in byte
    /// order, each folded into a common prefix where the delimiter falls
    /// in it, else its version's files.
    async fn list(&self, subject: &Subject, l: &Listing) -> S3Result<ListPage> {
        let volumes = self.volumes_of(subject, &l.bucket).await?;
        let (roots, made) = self.roots(&l.bucket, volumes, &l.prefix).await?;
        let delimiter = l.delimiter.as_deref();
        let mut page = Page::new(&l.prefix, delimiter, &l.cursor, l.max);
        let mut trees: HashMap<B3Digest, Arc<TreeIndex>> = HashMap::new();
        let mut previous: Option<&str> = None;
        'roots: for r in &roots {
            match addressing::under(&r.key, &l.prefix, delimiter) {
                Under::None => continue,
                Under::Prefix(cp) => match page.behind(cp) {
                    Some(true) => continue,
                    // Every version holds files, so the prefix holds keys.
                    Some(false) => {
                        if !page.offer_prefix(cp) {
                            break;
                        }
                        previous = Some(&r.key);
                        continue;
                    }
                    None => {}
                },
                Under::Files(_) => {}
            }
            let sub = l.prefix.strip_prefix(r.key.as_str()).unwrap_or("");
            let tree = match trees.get(&r.digest) {
                Some(t) => Arc::clone(t),
                None => {
                    if trees.len() >= MAX_TREES {
                        if let Some(p) = previous {
                            page.cut(Cursor {
                                after: p.to_string(),
                                under: true,
                            });
                        }
                        break;
                    }
                    let t = trees::tree_of(&self.app, &r.volume, &r.digest.to_string())
                        .await
                        .map_err(internal)?;
                    trees.insert(r.digest, Arc::clone(&t));
                    t
                }
            };
            let mut files: Vec<(&str, u64, &B3Digest)> = tree
                .entries()
                .iter()
                .filter_map(|e| match &e.data {
                    EntryData::File { size, blake3, .. } if e.path.starts_with(sub) => {
                        Some((e.path.as_str(), *size, blake3))
                    }
                    _ => None,
                })
                .collect();
            files.sort_unstable_by(|a, b| a.0.cmp(b.0));
            // Skip what the cursor has passed without building its keys.
            let skip = match l.cursor.after.strip_prefix(r.key.as_str()) {
                Some(at) => files.partition_point(|f| f.0 <= at),
                None => 0,
            };
            let modified = made.get(&r.digest).cloned().flatten();
            for (path, size, blake3) in &files[skip..] {
                let key = format!("{}{path}", r.key);
                let listed = || Listed {
                    size: *size,
                    blake3: **blake3,
                    modified: timestamp(modified.as_deref()),
                };
                if !page.offer(&key, listed) {
                    break 'roots;
                }
            }
            previous = Some(&r.key);
        }
        let next = page.next();
        Ok(ListPage {
            items: page.items,
            next,
        })
    }
}

/// `max-keys` as asked, within S3's bounds.
fn max_keys(asked: Option<i32>) -> usize {
    asked.map_or(MAX_KEYS, |n| usize::try_from(n).unwrap_or(0).min(MAX_KEYS))
}

/// The listing's entries as S3 answers them, keys and prefixes encoded
/// when the client asked for `encoding-type=url`.
fn entries(items: Vec<Item<Listed>>, url: bool) -> (Vec<Object>, Vec<CommonPrefix>) {
    let enc = |s: String| {
        if url {
            utf8_percent_encode(&s, KEY_ENCODE).to_string()
        } else {
            s
        }
    };
    let (mut objects, mut prefixes) = (Vec::new(), Vec::new());
    for item in items {
        match item {
            Item::Key(key, l) => objects.push(Object {
                key: Some(enc(key)),
                size: Some(i64::try_from(l.size).unwrap_or(i64::MAX)),
                e_tag: Some(etag(&l.blake3)),
                last_modified: l.modified,
                storage_class: Some(s3s::dto::ObjectStorageClass::from_static(
                    s3s::dto::ObjectStorageClass::STANDARD,
                )),
                ..Default::default()
            }),
            Item::Prefix(p) => prefixes.push(CommonPrefix {
                prefix: Some(enc(p)),
            }),
        }
    }
    (objects, prefixes)
}

fn is_url(e: &Option<s3s::dto::EncodingType>) -> bool {
    e.as_ref()
        .is_some_and(|e| e.as_str() == s3s::dto::EncodingType::URL)
}

#[async_trait::async_trait]
impl S3 for Gateway {
    /// `ListBuckets`: the namespaces holding a volume the caller may pull.
    async fn list_buckets(
        &self,
        req: S3Request<ListBucketsInput>,
    ) -> S3Result<S3Response<ListBucketsOutput>> {
        let (subject, auth) = (who(&req), Arc::clone(&self.auth));
        let visible = move |repo: &str| auth.policy().allows(&subject, repo, Action::Pull);
        let names = volumes::namespaces(&self.app, visible)
            .await
            .map_err(internal)?;
        let buckets = names
            .into_iter()
            .map(|name| Bucket {
                name: Some(name),
                ..Default::default()
            })
            .collect();
        Ok(S3Response::new(ListBucketsOutput {
            buckets: Some(buckets),
            ..Default::default()
        }))
    }

    async fn head_bucket(
        &self,
        req: S3Request<HeadBucketInput>,
    ) -> S3Result<S3Response<HeadBucketOutput>> {
        self.volumes_of(&who(&req), &req.input.bucket).await?;
        Ok(S3Response::new(HeadBucketOutput::default()))
    }

    /// Every bucket is in the default region: clients sign for any.
    async fn get_bucket_location(
        &self,
        req: S3Request<GetBucketLocationInput>,
    ) -> S3Result<S3Response<GetBucketLocationOutput>> {
        self.volumes_of(&who(&req), &req.input.bucket).await?;
        Ok(S3Response::new(GetBucketLocationOutput::default()))
    }

    async fn list_objects_v2(
        &self,
        req: S3Request<ListObjectsV2Input>,
    ) -> S3Result<S3Response<ListObjectsV2Output>> {
        let subject = who(&req);
        let input = req.input;
        let mut cursor = Cursor::after(input.start_after.as_deref().unwrap_or(""));
        if let Some(token) = &input.continuation_token {
            let at = Cursor::from_token(token).ok_or_else(|| {
                s3_error!(
                    InvalidArgument,
                    "the continuation token is not one this gateway gave"
                )
            })?;
            cursor = cursor.max(at);
        }
        let listing = Listing {
            bucket: input.bucket.clone(),
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone(),
            cursor,
            max: max_keys(input.max_keys),
        };
        let found = self.list(&subject, &listing).await?;
        let url = is_url(&input.encoding_type);
        let (contents, common_prefixes) = entries(found.items, url);
        let count = contents.len() + common_prefixes.len();
        Ok(S3Response::new(ListObjectsV2Output {
            name: Some(input.bucket),
            prefix: input.prefix,
            delimiter: input.delimiter,
            max_keys: Some(listing.max as i32),
            key_count: Some(count as i32),
            is_truncated: Some(found.next.is_some()),
            continuation_token: input.continuation_token,
            next_continuation_token: found.next.map(|c| c.token()),
            start_after: input.start_after,
            encoding_type: input.encoding_type,
            contents: Some(contents),
            common_prefixes: Some(common_prefixes),
            ..Default::default()
        }))
    }

    /// The first `ListObjects`: the same listing, `marker` for
    /// `start-after`, and a `NextMarker` (the last entry) when truncated.
    async fn list_objects(
        &self,
        req: S3Request<ListObjectsInput>,
    ) -> S3Result<S3Response<ListObjectsOutput>> {
        let subject = who(&req);
        let input = req.input;
        // A marker that ends with the delimiter is a common prefix a page
        // ended on (no file's key ends with `/`): resume past its keys.
        let marker = input.marker.clone().unwrap_or_default();
        let folded =
            (input.delimiter.as_deref()).is_some_and(|d| !d.is_empty() && marker.ends_with(d));
        let listing = Listing {
            bucket: input.bucket.clone(),
            prefix: input.prefix.clone().unwrap_or_default(),
            delimiter: input.delimiter.clone(),
            cursor: Cursor {
                after: marker,
                under: folded,
            },
            max: max_keys(input.max_keys),
        };
        let found = self.list(&subject, &listing).await?;
        let url = is_url(&input.encoding_type);
        let next_marker = found.next.as_ref().map(|c| c.after.clone());
        let (contents, common_prefixes) = entries(found.items, url);
        Ok(S3Response::new(ListObjectsOutput {
            name: Some(input.bucket),
            prefix: input.prefix,
            delimiter: input.delimiter,
            marker: input.marker,
            max_keys: Some(listing.max as i32),
            is_truncated: Some(next_marker.is_some()),
            next_marker,
            encoding_type: input.encoding_type,
            contents: Some(contents),
            common_prefixes: Some(common_prefixes),
            ..Default::default()
        }))
    }

    async fn head_object(
        &self,
        req: S3Request<HeadObjectInput>,
    ) -> S3Result<S3Response<HeadObjectOutput>> {
        let (found, file) = self.find(&req.input.bucket, &req.input.key).await?;
        Ok(S3Response::new(HeadObjectOutput {
            accept_ranges: Some("bytes".into()),
            content_length: Some(i64::try_from(file.size).unwrap_or(i64::MAX)),
            content_type: Some(octet_stream()),
            e_tag: Some(etag(&file.blake3)),
            last_modified: timestamp(found.created_at.as_deref()),
            metadata: Some(version_metadata(&found.digest)),
            ..Default::default()
        }))
    }

    /// `GetObject`, whole or one range, each piece checked against the
    /// version's chain as it is read (`service::files`).
    async fn get_object(
        &self,
        req: S3Request<GetObjectInput>,
    ) -> S3Result<S3Response<GetObjectOutput>> {
        let input = req.input;
        let (found, file) = self.find(&input.bucket, &input.key).await?;
        let size = file.size;
        let range = match &input.range {
            Some(r) => Some(r.check(size).map_err(|_| {
                s3_error!(
                    InvalidRange,
                    "the range lies outside the file's {size} bytes"
                )
            })?),
            None => None,
        };
        let span = range.clone().unwrap_or(0..size);
        let (blake3, len) = (file.blake3, span.end - span.start);
        let body =
            match files::open(Arc::clone(&self.app.blobs), Arc::new(file), span.clone()).await {
                Ok(b) => b,
                Err(e) => return Err(self.refused(&input.bucket, &input.key, e).await),
            };
        Ok(S3Response::new(GetObjectOutput {
            body: Some(StreamingBlob::wrap(sync_wrapper::SyncStream::new(body))),
            accept_ranges: Some("bytes".into()),
            content_length: Some(i64::try_from(len).unwrap_or(i64::MAX)),
            content_range: range.map(|r| format!("bytes {}-{}/{size}", r.start, r.end - 1)),
            content_type: Some(
                input
                    .response_content_type
                    .and_then(|t| t.parse().ok())
                    .unwrap_or_else(octet_stream),
            ),
            content_disposition: input.response_content_disposition,
            cache_control: input.response_cache_control,
            e_tag: Some(etag(&blake3)),
            last_modified: timestamp(found.created_at.as_deref()),
            metadata: Some(version_metadata(&found.digest)),
            ..Default::default()
        }))
    }
}

fn octet_stream() -> ContentType {
    "application/octet-stream"
        .parse()
        .expect("a valid media type")
}

/// `x-amz-meta-sealvol-version`: the version a key resolved to, so a
/// client that asked by tag or head can pin what it got.
fn version_metadata(d: &B3Digest) -> HashMap<String, String> {
    HashMap::from([("sealvol-version".to_string(), d.to_string())])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn url_encoding_keeps_slashes_and_unreserved_characters() {
        let items = vec![
            Item::Key(
                "v@b3:ab/a b+c%.txt".to_string(),
                Listed {
                    size: 1,
                    blake3: B3Digest::of(b""),
                    modified: None,
                },
            ),
            Item::Prefix("v:prod/".to_string()),
        ];
        let (objects, prefixes) = entries(items, true);
        assert_eq!(
            objects[0].key.as_deref(),
            Some("v%40b3%3Aab/a%20b%2Bc%25.txt")
        );
        assert_eq!(prefixes[0].prefix.as_deref(), Some("v%3Aprod/"));
        assert_eq!(max_keys(None), 1000);
        assert_eq!(max_keys(Some(5000)), 1000);
        assert_eq!(max_keys(Some(-1)), 0);
    }
}
