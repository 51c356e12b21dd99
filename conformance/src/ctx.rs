//! The state checks share: the registry, the repository names, the run id,
//! request helpers, and lazily pushed fixtures (pushed once, on first
//! need; a fixture that failed to push makes every check that needs it
//! report a precondition failure).

use reqwest::header::{ACCEPT, CONTENT_TYPE, RANGE};
use reqwest::{Method, Url};

use crate::content::{
    image_config, image_index, image_manifest, with_platform, Blob, Manifest, ManifestExtras,
    ACCEPT_MANIFESTS, ANN_PURPOSE, ANN_RUN, OCI_EMPTY, OCI_LAYER, OCTET_STREAM,
};
use crate::failure::{CheckFailure, Pre};
use crate::http::{with_query, Registry, Resp};

/// Artifact type of the first referrer (set through `artifactType`).
pub const REFERRER_A_TYPE: &str = "application/vnd.sealvol.conformance.signature.v1";
/// Config media type of the second referrer (no `artifactType`: the
/// registry must report this as its artifact type).
pub const REFERRER_B_CONFIG: &str = "application/vnd.sealvol.conformance.sbom.v1+json";

/// The image every pull check reads: a config, one layer, a manifest
/// pushed by tag.
#[derive(Debug, Clone)]
pub struct Image {
    pub config: Blob,
    pub layer: Blob,
    pub manifest: Manifest,
    pub tag: String,
}

/// An image index over the image and a second manifest, pushed by tag.
#[derive(Debug, Clone)]
pub struct Index {
    pub manifest: Manifest,
    pub tag: String,
}

/// Two manifests whose `subject` is the image manifest.
#[derive(Debug, Clone)]
pub struct Referrers {
    pub subject: Manifest,
    /// Has `artifactType` = [`REFERRER_A_TYPE`].
    pub a: Manifest,
    /// No `artifactType`; config media type [`REFERRER_B_CONFIG`].
    pub b: Manifest,
    /// The response to the PUT of `a`, for the `OCI-Subject` check.
    pub a_put: Resp,
}

type Cached<T> = Option<Result<T, String>>;

/// Shared state for one run.
pub struct Ctx {
    pub reg: Registry,
    /// The repository most checks use (the `--namespace`).
    pub repo: String,
    /// A second repository, for mounts and cross-repository visibility.
    pub other: String,
    /// Distinguishes this run's tags and content from earlier runs.
    pub run: String,
    image: Cached<Image>,
    index: Cached<Index>,
    referrers: Cached<Referrers>,
    listed_tags: Cached<Vec<String>>,
}

impl Ctx {
    pub fn new(reg: Registry, repo: &str, run: &str) -> Ctx {
        Ctx {
            reg,
            repo: repo.to_string(),
            other: format!("{repo}/other"),
            run: run.to_string(),
            image: None,
            index: None,
            referrers: None,
            listed_tags: None,
        }
    }

    /// A tag unique to this run.
    pub fn tag(&self, label: &str) -> String {
        format!("{}-{label}", self.run)
    }

    /// A layer blob unique to this run and `label`.
    pub fn blob(&self, label: &str, size: usize) -> Blob {
        Blob::filled(
            OCI_LAYER,
            &format!("sealvol-conformance {} {label}", self.run),
            size,
        )
    }

    /// Annotations marking a manifest as this run's, for `purpose`.
    pub fn annotations(&self, purpose: &str) -> Vec<(&'static str, String)> {
        vec![
            (ANN_RUN, self.run.clone()),
            (ANN_PURPOSE, purpose.to_string()),
        ]
    }

    // ---- request helpers -------------------------------------------------

    /// `GET`/`HEAD`/`DELETE` (any body-less request) to `path` on the
    /// registry, following redirects.
    pub fn call(
        &self,
        method: Method,
        path: &str,
        query: &[(&str, &str)],
    ) -> Result<Resp, CheckFailure> {
        self.reg
            .send(method, self.reg.url(path, query), true, |b| b)
    }

    /// `GET`/`HEAD` a manifest with an `Accept` for every manifest type.
    pub fn fetch_manifest(
        &self,
        method: Method,
        repo: &str,
        reference: &str,
    ) -> Result<Resp, CheckFailure> {
        let url = self
            .reg
            .url(&format!("/v2/{repo}/manifests/{reference}"), &[]);
        self.reg
            .send(method, url, true, |b| b.header(ACCEPT, ACCEPT_MANIFESTS))
    }

    /// `GET`/`HEAD` a blob, optionally with a `Range` header.
    pub fn fetch_blob(
        &self,
        method: Method,
        repo: &str,
        digest: &str,
        range: Option<&str>,
    ) -> Result<Resp, CheckFailure> {
        let url = self.reg.url(&format!("/v2/{repo}/blobs/{digest}"), &[]);
        self.reg.send(method, url, true, |b| match range {
            Some(r) => b.header(RANGE, r),
            None => b,
        })
    }

    /// `PUT` a manifest with its media type as `Content-Type`.
    pub fn put_manifest(
        &self,
        repo: &str,
        reference: &str,
        m: &Manifest,
    ) -> Result<Resp, CheckFailure> {
        let url = self
            .reg
            .url(&format!("/v2/{repo}/manifests/{reference}"), &[]);
        let body = m.bytes.clone();
        self.reg.send(Method::PUT, url, false, |b| {
            b.header(CONTENT_TYPE, m.media_type.as_str()).body(body)
        })
    }

    /// `POST /v2/<repo>/blobs/uploads/` with `query` and an empty body.
    pub fn post_upload(&self, repo: &str, query: &[(&str, &str)]) -> Result<Resp, CheckFailure> {
        let url = self.reg.url(&format!("/v2/{repo}/blobs/uploads/"), query);
        self.reg
            .send(Method::POST, url, false, |b| b.body(Vec::new()))
    }

    /// Starts an upload session: `POST` must answer 202 with `Location`;
    /// returns the resolved location.
    pub fn start_upload(&self, repo: &str) -> Result<Url, CheckFailure> {
        let r = self.post_upload(repo, &[])?;
        r.expect_status(&[202])?;
        self.location(&r)
    }

    /// The resolved `Location` of a response (which must have one).
    pub fn location(&self, r: &Resp) -> Result<Url, CheckFailure> {
        let loc = r.require_header("Location")?;
        self.reg
            .resolve(&loc)
            .map_err(|detail| r.other_failure(detail))
    }

    /// `PATCH` one chunk starting at `start` to an upload `location`.
    pub fn patch_chunk(
        &self,
        location: &Url,
        start: usize,
        chunk: &[u8],
    ) -> Result<Resp, CheckFailure> {
        let end = start + chunk.len() - 1;
        let body = chunk.to_vec();
        self.reg.send(Method::PATCH, location.clone(), false, |b| {
            b.header(CONTENT_TYPE, OCTET_STREAM)
                .header("Content-Range", format!("{start}-{end}"))
                .body(body)
        })
    }

    /// `PUT <location>?digest=<digest>` with `body` (possibly empty).
    pub fn finish_upload(
        &self,
        location: &Url,
        digest: &str,
        body: &[u8],
    ) -> Result<Resp, CheckFailure> {
        let url = with_query(location.clone(), "digest", digest);
        let body = body.to_vec();
        self.reg.send(Method::PUT, url, false, |b| {
            if body.is_empty() {
                b.body(body)
            } else {
                b.header(CONTENT_TYPE, OCTET_STREAM).body(body)
            }
        })
    }

    /// Best-effort `DELETE` of an upload session (cleanup; result ignored).
    pub fn abandon_upload(&self, location: &Url) {
        let _ = self
            .reg
            .send(Method::DELETE, location.clone(), false, |b| b);
    }

    /// Cancels the session a response opened, if it carries a `Location`
    /// (used when a registry answered 202 where 201 was expected).
    pub fn abandon_session_of(&self, r: &Resp) {
        if r.status == 202 {
            if let Ok(loc) = self.location(r) {
                self.abandon_upload(&loc);
            }
        }
    }

    /// Pushes a blob the most widely supported way (POST then PUT).
    pub fn push_blob(&self, repo: &str, blob: &Blob) -> Result<(), CheckFailure> {
        let loc = self.start_upload(repo)?;
        let r = self.finish_upload(&loc, &blob.digest, &blob.bytes)?;
        r.expect_status(&[201])
    }

    /// Pushes a manifest and requires 201.
    pub fn push_manifest(
        &self,
        repo: &str,
        reference: &str,
        m: &Manifest,
    ) -> Result<Resp, CheckFailure> {
        let r = self.put_manifest(repo, reference, m)?;
        r.expect_status(&[201])?;
        Ok(r)
    }

    // ---- fixtures ----------------------------------------------------------

    /// The image (config + layer + manifest pushed by tag).
    pub fn image(&mut self) -> Result<Image, CheckFailure> {
        if self.image.is_none() {
            let r = self.push_image().pre("pushing the test image");
            self.image = Some(r.map_err(|e| e.to_string()));
        }
        cached(&self.image)
    }

    fn push_image(&self) -> Result<Image, CheckFailure> {
        let layer = self.blob("layer", 1000);
        let config = image_config(&[&layer.digest], &self.run);
        self.push_blob(&self.repo, &config)?;
        self.push_blob(&self.repo, &layer)?;
        let manifest = image_manifest(
            config.descriptor(),
            vec![layer.descriptor()],
            ManifestExtras {
                annotations: self.annotations("image"),
                ..Default::default()
            },
        );
        let tag = self.tag("image");
        self.push_manifest(&self.repo, &tag, &manifest)?;
        Ok(Image {
            config,
            layer,
            manifest,
            tag,
        })
    }

    /// Another image manifest over the image's blobs (not pushed).
    pub fn image_variant(&self, img: &Image, purpose: &str) -> Manifest {
        image_manifest(
            img.config.descriptor(),
            vec![img.layer.descriptor()],
            ManifestExtras {
                annotations: self.annotations(purpose),
                ..Default::default()
            },
        )
    }

    /// The members of the test index: the image manifest and a second
    /// manifest pushed by digest.
    pub fn index_members(&mut self) -> Result<Vec<serde_json::Value>, CheckFailure> {
        let img = self.image()?;
        let second = self.image_variant(&img, "index-member");
        self.push_manifest(&self.repo, &second.digest, &second)
            .pre("pushing the index's second manifest")?;
        Ok(vec![
            with_platform(img.manifest.descriptor(), "amd64", "linux"),
            with_platform(second.descriptor(), "arm64", "linux"),
        ])
    }

    /// The image index, pushed by tag.
    pub fn index(&mut self) -> Result<Index, CheckFailure> {
        if self.index.is_none() {
            let r = self.push_index();
            self.index = Some(r.map_err(|e| e.to_string()));
        }
        cached(&self.index)
    }

    fn push_index(&mut self) -> Result<Index, CheckFailure> {
        let members = self.index_members()?;
        let manifest = image_index(members, self.annotations("index"));
        let tag = self.tag("index");
        self.push_manifest(&self.repo, &tag, &manifest)
            .pre("pushing the test index")?;
        Ok(Index { manifest, tag })
    }

    /// Two referrers of the image manifest, pushed by digest.
    pub fn referrers(&mut self) -> Result<Referrers, CheckFailure> {
        if self.referrers.is_none() {
            let r = self.push_referrers();
            self.referrers = Some(r.map_err(|e| e.to_string()));
        }
        cached(&self.referrers)
    }

    /// The first referrer (not pushed): `artifactType` set, subject = `subject`.
    pub fn referrer_a(&self, subject: &Manifest) -> Manifest {
        let empty = Blob::empty();
        image_manifest(
            empty.descriptor(),
            vec![empty.descriptor()],
            ManifestExtras {
                artifact_type: Some(REFERRER_A_TYPE),
                subject: Some(subject.descriptor()),
                annotations: self.annotations("referrer-a"),
            },
        )
    }

    fn push_referrers(&mut self) -> Result<Referrers, CheckFailure> {
        let img = self.image()?;
        let subject = img.manifest;
        let empty = Blob::empty();
        self.push_blob(&self.repo, &empty)
            .pre("pushing the empty blob {}")?;
        let a = self.referrer_a(&subject);
        let a_put = self
            .push_manifest(&self.repo, &a.digest, &a)
            .pre("pushing a manifest with a subject")?;
        let b = image_manifest(
            empty.descriptor_as(REFERRER_B_CONFIG),
            vec![empty.descriptor_as(OCI_EMPTY)],
            ManifestExtras {
                subject: Some(subject.descriptor()),
                annotations: self.annotations("referrer-b"),
                ..Default::default()
            },
        );
        self.push_manifest(&self.repo, &b.digest, &b)
            .pre("pushing a second manifest with a subject")?;
        Ok(Referrers {
            subject,
            a,
            b,
            a_put,
        })
    }

    /// Four tags of this run on the image manifest (`<run>-list-a` … `-d`).
    pub fn listed_tags(&mut self) -> Result<Vec<String>, CheckFailure> {
        if self.listed_tags.is_none() {
            let r = self.push_listed_tags();
            self.listed_tags = Some(r.map_err(|e| e.to_string()));
        }
        cached(&self.listed_tags)
    }

    fn push_listed_tags(&mut self) -> Result<Vec<String>, CheckFailure> {
        let img = self.image()?;
        let tags: Vec<String> = ["a", "b", "c", "d"]
            .iter()
            .map(|s| self.tag(&format!("list-{s}")))
            .collect();
        for t in &tags {
            self.push_manifest(&self.repo, t, &img.manifest)
                .pre(&format!("tagging the image as {t}"))?;
        }
        Ok(tags)
    }
}

fn cached<T: Clone>(c: &Cached<T>) -> Result<T, CheckFailure> {
    match c {
        Some(Ok(v)) => Ok(v.clone()),
        Some(Err(msg)) => Err(CheckFailure::Precondition(
            msg.strip_prefix("precondition: ")
                .unwrap_or(msg)
                .to_string(),
        )),
        None => Err(CheckFailure::Precondition("fixture not prepared".into())),
    }
}
