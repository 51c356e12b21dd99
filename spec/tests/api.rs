//! The `/api/v1` bodies (SPEC.md §7–§8): each type serializes to the JSON
//! the spec writes, field for field, and that JSON reads back equal. The
//! registry writes these types and the client reads them, so a change that
//! breaks one of these literals changes the wire.

use std::fmt::Debug;

use sealvol_spec::api::*;
use sealvol_spec::{B3Digest, Sha256Digest, VolumeRef};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::{json, Value};

fn b3() -> String {
    format!("b3:{}", "ab".repeat(32))
}

fn sha() -> String {
    format!("sha256:{}", "cd".repeat(32))
}

fn b3d() -> B3Digest {
    b3().parse().unwrap()
}

fn shad() -> Sha256Digest {
    sha().parse().unwrap()
}

/// `value` is written as `wire` exactly, and `wire` reads back as `value`.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + Debug>(value: &T, wire: Value) {
    assert_eq!(serde_json::to_value(value).unwrap(), wire, "{value:?}");
    let back: T = serde_json::from_value(wire).unwrap();
    assert_eq!(&back, value);
}

fn version() -> Version {
    Version {
        digest: b3d(),
        index_digest: shad(),
        sequence: 4,
        lifecycle: Lifecycle::Tombstoned,
        is_head: false,
        tags: vec![],
        size: Some(10),
        files: Some(2),
        created_at: Some("2026-12-02T18:40:00Z".into()),
        tombstoned_at: Some("2026-12-03T18:40:00Z".into()),
        restorable_until: Some("2026-12-10T18:40:00Z".into()),
    }
}

fn version_json() -> Value {
    json!({"digest": b3(), "index_digest": sha(), "sequence": 4,
           "lifecycle": "TOMBSTONED", "is_head": false, "tags": [],
           "size": 10, "files": 2, "created_at": "2026-12-02T18:40:00Z",
           "tombstoned_at": "2026-12-03T18:40:00Z",
           "restorable_until": "2026-12-10T18:40:00Z"})
}

fn tag() -> TagInfo {
    TagInfo {
        tag: "prod".into(),
        digest: b3d(),
        index_digest: shad(),
        expires_at: Some("2026-12-09T00:00:00Z".into()),
    }
}

fn tag_json() -> Value {
    json!({"tag": "prod", "digest": b3(), "index_digest": sha(),
           "expires_at": "2026-12-09T00:00:00Z"})
}

fn volume() -> Volume {
    Volume {
        name: "weights/qwen3-8b".into(),
        namespace: "weights".into(),
        head: Some(Head {
            digest: b3d(),
            index_digest: shad(),
        }),
        tags: vec![tag()],
        alive: 3,
        tombstoned: 1,
        untagged: 1,
        sequence: 9,
        updated_at: Some("2026-12-03T18:40:00Z".into()),
        expires_at: None,
    }
}

fn volume_json() -> Value {
    json!({"name": "weights/qwen3-8b", "namespace": "weights",
           "head": {"digest": b3(), "index_digest": sha()},
           "tags": [tag_json()],
           "alive": 3, "tombstoned": 1, "untagged": 1,
           "sequence": 9, "updated_at": "2026-12-03T18:40:00Z", "expires_at": null})
}

fn ready_job() -> SyncJob {
    SyncJob {
        id: "sync-0123456789abcdef".into(),
        state: SyncState::Ready,
        source: "hf://Qwen/Qwen3-8B".into(),
        pinned_source: Some(format!("hf://Qwen/Qwen3-8B@{}", "0f".repeat(20))),
        dest: SyncDest {
            name: "weights/qwen3-8b".into(),
            tag: Some("prod".into()),
        },
        include: vec!["*.safetensors".into(), "*.json".into()],
        exclude: vec![],
        secret: Some("hf-token".into()),
        progress: SyncProgress {
            files_done: 7,
            files_total: 7,
            bytes_done: 16_400_000_000,
            bytes_total: 16_400_000_000,
            bytes_stored: 16_000_000_000,
            files_reused: 2,
            bytes_reused: 400_000_000,
        },
        attempts: 1,
        retries: 0,
        retrying: None,
        created_at: Some("2026-12-02T18:40:00Z".into()),
        started_at: Some("2026-12-02T18:40:01Z".into()),
        finished_at: Some("2026-12-02T18:52:13Z".into()),
        version: Some(SyncedVersion {
            digest: b3d(),
            index_digest: shad(),
        }),
        error: None,
        schedule: None,
    }
}

/// A job as SPEC.md §8.2 writes it.
fn ready_job_json() -> Value {
    json!({
        "id": "sync-0123456789abcdef", "state": "READY",
        "source": "hf://Qwen/Qwen3-8B",
        "pinned_source": format!("hf://Qwen/Qwen3-8B@{}", "0f".repeat(20)),
        "dest": {"name": "weights/qwen3-8b", "tag": "prod"},
        "include": ["*.safetensors", "*.json"], "exclude": [], "secret": "hf-token",
        "progress": {"files_done": 7, "files_total": 7, "bytes_done": 16_400_000_000u64,
                     "bytes_total": 16_400_000_000u64, "bytes_stored": 16_000_000_000u64,
                     "files_reused": 2, "bytes_reused": 400_000_000u64},
        "attempts": 1, "retries": 0, "retrying": null,
        "created_at": "2026-12-02T18:40:00Z", "started_at": "2026-12-02T18:40:01Z",
        "finished_at": "2026-12-02T18:52:13Z",
        "version": {"digest": b3(), "index_digest": sha()},
        "error": null, "schedule": null
    })
}

#[test]
fn volume_api_bodies_are_the_spec_json() {
    round_trip(
        &ApiInfo {
            api: API.into(),
            retention_seconds: 604_800,
            gc_grace_seconds: 3_600,
            claim_ttl_seconds: 60,
        },
        json!({"api": "sealvol.volumes.v1", "retention_seconds": 604_800,
               "gc_grace_seconds": 3_600, "claim_ttl_seconds": 60}),
    );
    round_trip(&version(), version_json());
    round_trip(&tag(), tag_json());
    round_trip(&volume(), volume_json());
    round_trip(
        &Volume {
            head: None,
            tags: vec![],
            ..volume()
        },
        json!({"name": "weights/qwen3-8b", "namespace": "weights", "head": null,
               "tags": [], "alive": 3, "tombstoned": 1, "untagged": 1,
               "sequence": 9, "updated_at": "2026-12-03T18:40:00Z", "expires_at": null}),
    );
    round_trip(
        &Claim {
            token: "3f1c".into(),
            holder: "sealvol push host pid 7".into(),
            expires_at: Some("2026-12-02T18:41:00Z".into()),
            ttl_seconds: 60,
        },
        json!({"token": "3f1c", "holder": "sealvol push host pid 7",
               "expires_at": "2026-12-02T18:41:00Z", "ttl_seconds": 60}),
    );
    round_trip(
        &GcReport {
            dry_run: true,
            versions_purged: 1,
            tags_expired: 2,
            volumes_expired: 3,
            manifests_deleted: 4,
            links_removed: 5,
            blobs_deleted: 6,
            bytes_reclaimed: 7,
            blobs_in_grace: 8,
        },
        json!({"dry_run": true, "versions_purged": 1, "tags_expired": 2,
               "volumes_expired": 3, "manifests_deleted": 4, "links_removed": 5,
               "blobs_deleted": 6, "bytes_reclaimed": 7, "blobs_in_grace": 8}),
    );
    round_trip(
        &NamespaceList {
            namespaces: vec!["weights".into()],
        },
        json!({"namespaces": ["weights"]}),
    );
    round_trip(
        &VolumeList {
            volumes: vec![volume()],
        },
        json!({"volumes": [volume_json()]}),
    );
    round_trip(
        &VersionList {
            versions: vec![version()],
        },
        json!({"versions": [version_json()]}),
    );
    round_trip(
        &Tombstoned {
            tombstoned: vec![version()],
        },
        json!({"tombstoned": [version_json()]}),
    );
}

#[test]
fn volume_api_requests_are_the_spec_json() {
    round_trip(
        &VolumePatch {
            expires_at: Some("2026-12-09T00:00:00Z".into()),
        },
        json!({"expires_at": "2026-12-09T00:00:00Z"}),
    );
    round_trip(
        &VolumePatch { expires_at: None },
        json!({"expires_at": null}),
    );
    round_trip(
        &TagRequest {
            digest: b3(),
            expires_at: None,
        },
        json!({"digest": b3(), "expires_at": null}),
    );
    round_trip(
        &ClaimRequest {
            holder: "ci".into(),
        },
        json!({"holder": "ci"}),
    );
    // The registry refuses fields it does not know in these bodies.
    assert!(serde_json::from_value::<TagRequest>(json!({"digest": b3(), "tag": "x"})).is_err());
    assert_eq!(
        serde_json::from_value::<VolumePatch>(json!({})).unwrap(),
        VolumePatch { expires_at: None }
    );
}

#[test]
fn tags_and_heads_always_name_a_version() {
    // SPEC.md §7.3: a tag on a manifest that is not a version is left out
    // of the record, so its digest is never null.
    let mut t = tag_json();
    t["digest"] = Value::Null;
    assert!(serde_json::from_value::<TagInfo>(t).is_err());
    let mut v = volume_json();
    v["head"]["digest"] = Value::Null;
    assert!(serde_json::from_value::<Volume>(v).is_err());
}

#[test]
fn sync_bodies_are_the_spec_json() {
    round_trip(&ready_job(), ready_job_json());
    let failed = SyncJob {
        id: "sync-00000000000000ff".into(),
        state: SyncState::Failed,
        source: "s3://b/p".into(),
        pinned_source: None,
        dest: SyncDest {
            name: "ns/vol".into(),
            tag: None,
        },
        include: vec![],
        exclude: vec![],
        secret: None,
        progress: SyncProgress::default(),
        attempts: 1,
        retries: 0,
        retrying: None,
        created_at: Some("2026-12-02T18:40:00Z".into()),
        started_at: None,
        finished_at: Some("2026-12-02T18:40:02Z".into()),
        version: None,
        error: Some(JobError {
            code: "SOURCE_DENIED".into(),
            message: "s3://b/p: access denied".into(),
        }),
        schedule: Some("sched-0123456789abcdef".into()),
    };
    let failed_json = json!({
        "id": "sync-00000000000000ff", "state": "FAILED", "source": "s3://b/p",
        "pinned_source": null, "dest": {"name": "ns/vol", "tag": null},
        "include": [], "exclude": [], "secret": null,
        "progress": {"files_done": 0, "files_total": 0, "bytes_done": 0,
                     "bytes_total": 0, "bytes_stored": 0, "files_reused": 0, "bytes_reused": 0},
        "attempts": 1, "retries": 0, "retrying": null,
        "created_at": "2026-12-02T18:40:00Z", "started_at": null,
        "finished_at": "2026-12-02T18:40:02Z", "version": null,
        "error": {"code": "SOURCE_DENIED", "message": "s3://b/p: access denied"},
        "schedule": "sched-0123456789abcdef"
    });
    round_trip(&failed, failed_json.clone());
    assert_eq!(
        failed.error.as_ref().unwrap().to_string(),
        "SOURCE_DENIED: s3://b/p: access denied"
    );
    round_trip(
        &SyncList {
            syncs: vec![ready_job(), failed.clone()],
        },
        json!({"syncs": [ready_job_json(), failed_json.clone()]}),
    );
    round_trip(
        &Canceled {
            changed: false,
            sync: failed,
        },
        json!({"changed": false, "sync": failed_json}),
    );
    round_trip(
        &SyncRequest {
            source: "hf://Qwen/Qwen3-8B".into(),
            dest: SyncDest {
                name: "weights/qwen3-8b".into(),
                tag: None,
            },
            include: vec!["*.json".into()],
            exclude: vec![],
            secret: Some("hf-token".parse().unwrap()),
        },
        json!({"source": "hf://Qwen/Qwen3-8B",
               "dest": {"name": "weights/qwen3-8b", "tag": null},
               "include": ["*.json"], "exclude": [], "secret": "hf-token"}),
    );
    round_trip(
        &SecretList {
            secrets: vec![SecretInfo {
                name: "hf-token".into(),
                for_sources: vec!["hf://Qwen".into()],
                dest: vec!["weights/**".into()],
            }],
        },
        json!({"secrets": [{"name": "hf-token", "for": ["hf://Qwen"], "dest": ["weights/**"]}]}),
    );
    for (s, state) in [
        ("QUEUED", SyncState::Queued),
        ("RUNNING", SyncState::Running),
        ("READY", SyncState::Ready),
        ("FAILED", SyncState::Failed),
        ("CANCELED", SyncState::Canceled),
    ] {
        round_trip(&state, json!(s));
        assert_eq!((state.as_str(), state.to_string()), (s, s.to_string()));
        assert_eq!(
            state.is_finished(),
            !matches!(state, SyncState::Queued | SyncState::Running)
        );
    }
    for (s, l) in [
        ("ALIVE", Lifecycle::Alive),
        ("TOMBSTONED", Lifecycle::Tombstoned),
    ] {
        round_trip(&l, json!(s));
        assert_eq!(l.to_string(), s);
    }
}

#[test]
fn answers_of_earlier_registries_still_read() {
    // Fields added since the first release of each endpoint default.
    let info: ApiInfo = serde_json::from_value(json!({"api": API})).unwrap();
    assert_eq!(
        (
            info.retention_seconds,
            info.gc_grace_seconds,
            info.claim_ttl_seconds
        ),
        (
            DEFAULT_RETENTION_SECONDS,
            DEFAULT_GC_GRACE_SECONDS,
            DEFAULT_CLAIM_TTL_SECONDS
        )
    );
    let r: GcReport = serde_json::from_value(json!({"dry_run": true, "blobs_deleted": 3})).unwrap();
    assert!(r.dry_run && r.blobs_deleted == 3 && r.blobs_in_grace == 0);
    let mut old = ready_job_json();
    for gone in ["pinned_source", "retries", "retrying"] {
        old.as_object_mut().unwrap().remove(gone);
    }
    for gone in ["bytes_stored", "files_reused", "bytes_reused"] {
        old["progress"].as_object_mut().unwrap().remove(gone);
    }
    let job: SyncJob = serde_json::from_value(old).unwrap();
    assert_eq!((job.retries, job.pinned_source), (0, None));
    assert_eq!(job.progress.bytes_stored, 0);
    assert_eq!(
        (job.progress.files_reused, job.progress.bytes_reused),
        (0, 0)
    );
}

#[test]
fn error_bodies_carry_the_codes_as_written() {
    round_trip(
        &ErrorBody::new(ErrorCode::PushInProgress, "another push"),
        json!({"errors": [{"code": "PUSH_IN_PROGRESS", "message": "another push",
                           "detail": null}]}),
    );
    for code in ErrorCode::ALL {
        // serde's spelling and `as_str` are one.
        assert_eq!(serde_json::to_value(code).unwrap(), json!(code.as_str()));
        assert_eq!(ErrorCode::parse(code.as_str()), Some(code));
    }
    assert_eq!(ErrorCode::TooManyRequests.as_str(), "TOOMANYREQUESTS");
    // Codes this release does not know still read, as they came.
    let body: ErrorBody =
        serde_json::from_value(json!({"errors": [{"code": "SOMETHING_NEW", "detail": {"x": 1}}]}))
            .unwrap();
    assert_eq!(body.errors[0].code, "SOMETHING_NEW");
    assert_eq!(body.errors[0].known_code(), None);
    assert_eq!(body.errors[0].message, "");
    // The volume API has no TAG_INVALID: a bad tag is INVALID (§7.2).
    assert_eq!(ErrorCode::parse("TAG_INVALID"), None);
}

#[test]
fn secret_names_follow_the_spec() {
    for ok in ["hf-token", "a", "AWS.prod_key-2", &"x".repeat(64)] {
        let name: SecretName = ok.parse().unwrap();
        assert_eq!(name.as_str(), ok);
        round_trip(&name, json!(ok));
    }
    for bad in ["", "..", ".", "a/b", "a b", "tök", "x=1", &"x".repeat(65)] {
        let e = bad.parse::<SecretName>().unwrap_err();
        assert!(e.to_string().contains("1 to 64"), "{e}");
        assert!(serde_json::from_value::<SecretName>(json!(bad)).is_err());
    }
    let request = json!({"source": "s3://b", "dest": {"name": "ns/vol"}, "secret": "a/b"});
    assert!(serde_json::from_value::<SyncRequest>(request).is_err());
    // A body written by hand may leave out what it does not use.
    let request: SyncRequest =
        serde_json::from_value(json!({"source": "s3://b", "dest": {"name": "ns/vol"}})).unwrap();
    assert_eq!(
        (request.include.len(), request.dest.tag, request.secret),
        (0, None, None)
    );
}

#[test]
fn destinations_are_a_volume_and_maybe_a_tag() {
    let dest = |s: &str| SyncDest::from_ref(&s.parse::<VolumeRef>().unwrap());
    let d = dest("bdn:weights/qwen3-8b:prod").unwrap();
    assert_eq!(d.name, "weights/qwen3-8b");
    assert_eq!(d.tag.as_deref(), Some("prod"));
    let d = dest("127.0.0.1:5000/weights/qwen3-8b").unwrap();
    assert_eq!((d.name.as_str(), d.tag), ("weights/qwen3-8b", None));
    let d = dest("registry.example.com/org/team/model:v2").unwrap();
    assert_eq!(d.name, "org/team/model");
    for bad in [
        "bdn:weights/qwen3-8b@b3:0123456789ab",
        "bdn:weights/qwen3-8b:prod/config.json",
        "bdn:weights/qwen3-8b/config.json",
        "bdn:weights/qwen3-8b:head",
    ] {
        let e = dest(bad).unwrap_err();
        assert!(e.to_string().starts_with(bad), "{bad}: {e}");
    }
    let digest_tag = format!("bdn:weights/qwen3-8b:b3-{}", "ab".repeat(32));
    assert!(dest(&digest_tag).is_err());
}

#[test]
fn schedule_bodies_are_the_spec_json() {
    let schedule = SyncSchedule {
        id: "sched-0123456789abcdef".into(),
        sync: SyncRequest {
            source: "s3://b/run-42/checkpoints/latest".into(),
            dest: SyncDest {
                name: "ckpt/run-42".into(),
                tag: Some("latest".into()),
            },
            include: vec![],
            exclude: vec![],
            secret: None,
        },
        every: "10m".into(),
        every_seconds: 600,
        paused: false,
        created_at: Some("2026-12-02T18:40:00Z".into()),
        next_run_at: Some("2026-12-02T18:50:00Z".into()),
        runs: 1,
        skipped: 0,
        last_run: Some(ready_job()),
    };
    let schedule_json = json!({
        "id": "sched-0123456789abcdef", "source": "s3://b/run-42/checkpoints/latest",
        "dest": {"name": "ckpt/run-42", "tag": "latest"},
        "include": [], "exclude": [], "secret": null,
        "every": "10m", "every_seconds": 600, "paused": false,
        "created_at": "2026-12-02T18:40:00Z", "next_run_at": "2026-12-02T18:50:00Z",
        "runs": 1, "skipped": 0, "last_run": ready_job_json()
    });
    round_trip(&schedule, schedule_json.clone());
    round_trip(
        &ScheduleList {
            schedules: vec![schedule.clone()],
        },
        json!({"schedules": [schedule_json.clone()]}),
    );
    round_trip(
        &ScheduleChanged {
            changed: true,
            schedule,
        },
        json!({"changed": true, "schedule": schedule_json}),
    );
    round_trip(
        &ScheduleRequest {
            sync: SyncRequest {
                source: "s3://b/run-42/checkpoints/latest".into(),
                dest: SyncDest {
                    name: "ckpt/run-42".into(),
                    tag: Some("latest".into()),
                },
                include: vec!["*.safetensors".into()],
                exclude: vec![],
                secret: None,
            },
            every: "10m".into(),
        },
        json!({"source": "s3://b/run-42/checkpoints/latest",
               "dest": {"name": "ckpt/run-42", "tag": "latest"},
               "include": ["*.safetensors"], "exclude": [], "secret": null, "every": "10m"}),
    );
}
