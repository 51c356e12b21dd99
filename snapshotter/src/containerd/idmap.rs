//! User namespaces (`remap-ids`): a pod with its own user namespace has
//! its snapshots prepared with `containerd.io/snapshot/uidmapping` and
//! `gidmapping` labels (`CTR:HOST:SIZE[,…]`, containerd's
//! `userns.IDMap.Marshal`). A snapshotter whose proxy plugin declares the
//! `remap-ids` capability must then present the snapshot owned by the
//! mapped ids itself; otherwise containerd copies the image and chowns
//! every file.
//!
//! As containerd's overlayfs snapshotter does for ordinary layers: the
//! upper dir is owned by the pod's root (the host ids container id 0 maps
//! to), and the overlay mount carries `uidmap=`/`gidmap=`, from which
//! containerd idmaps the lower dirs when it mounts. A sealed version is
//! instead mounted once more by the fuse manager, every entry presented as
//! owned by the pod's root (FUSE getattr): no copy, no chown, and no
//! idmapped mount of a FUSE file system, which the kernel allows only for
//! servers that opt in.

use std::collections::BTreeMap;

/// The label holding the uid mapping.
pub const LABEL_UID_MAPPING: &str = "containerd.io/snapshot/uidmapping";
/// The label holding the gid mapping.
pub const LABEL_GID_MAPPING: &str = "containerd.io/snapshot/gidmapping";

/// Mappings longer than this are refused: labels come from containerd's
/// clients, and a pod has a handful of ranges at most.
const MAX_RANGES: usize = 64;

/// One `CTR:HOST:SIZE` range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    container: u32,
    host: u32,
    size: u32,
}

/// A snapshot's id mapping, as its labels give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdMap {
    /// The labels' values, verbatim: containerd's mount options take them
    /// as they are.
    pub uid_label: String,
    pub gid_label: String,
    /// The host ids of the container's root: who owns the snapshot.
    pub root: (u32, u32),
}

impl IdMap {
    /// The mapping `labels` ask for: none without either label, an error
    /// for one that does not parse or does not map root (containerd
    /// requires root to be mapped, and the owner comes from it).
    pub fn from_labels(labels: &BTreeMap<String, String>) -> Result<Option<IdMap>, String> {
        let uid = labels.get(LABEL_UID_MAPPING);
        let gid = labels.get(LABEL_GID_MAPPING);
        let (uid, gid) = match (uid, gid) {
            (None, None) => return Ok(None),
            (Some(u), Some(g)) => (u, g),
            _ => {
                return Err(format!(
                    "{LABEL_UID_MAPPING} and {LABEL_GID_MAPPING} come together; one is missing"
                ))
            }
        };
        let root = |label: &str, value: &str| -> Result<u32, String> {
            let ranges = parse(value).map_err(|e| format!("{label} {value:?}: {e}"))?;
            to_host(0, &ranges)
                .ok_or_else(|| format!("{label} {value:?} does not map the container's root (0)"))
        };
        Ok(Some(IdMap {
            root: (root(LABEL_UID_MAPPING, uid)?, root(LABEL_GID_MAPPING, gid)?),
            uid_label: uid.clone(),
            gid_label: gid.clone(),
        }))
    }

    /// The overlay options from which containerd idmaps the lower dirs.
    pub fn mount_options(&self) -> [String; 2] {
        [
            format!("uidmap={}", self.uid_label),
            format!("gidmap={}", self.gid_label),
        ]
    }
}

fn parse(value: &str) -> Result<Vec<Range>, String> {
    let mut out = Vec::new();
    for part in value.split(',') {
        if out.len() == MAX_RANGES {
            return Err(format!("more than {MAX_RANGES} ranges"));
        }
        let fields: Vec<&str> = part.split(':').collect();
        let [c, h, s] = fields.as_slice() else {
            return Err(format!("{part:?} is not CONTAINER:HOST:SIZE"));
        };
        let n = |f: &str| {
            f.parse::<u32>()
                .ok()
                .filter(|&v| v != u32::MAX)
                .ok_or_else(|| format!("{f:?} in {part:?} is not an id"))
        };
        out.push(Range {
            container: n(c)?,
            host: n(h)?,
            size: n(s)?,
        });
    }
    Ok(out)
}

/// The host id container id `id` maps to (containerd's `toHost`).
fn to_host(id: u32, ranges: &[Range]) -> Option<u32> {
    ranges.iter().find_map(|r| {
        let end = r.container.checked_add(r.size)?;
        if id >= r.container && id < end {
            r.host
                .checked_add(id - r.container)
                .filter(|&h| h != u32::MAX)
        } else {
            None
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(uid: Option<&str>, gid: Option<&str>) -> BTreeMap<String, String> {
        let mut l = BTreeMap::new();
        if let Some(u) = uid {
            l.insert(LABEL_UID_MAPPING.to_string(), u.to_string());
        }
        if let Some(g) = gid {
            l.insert(LABEL_GID_MAPPING.to_string(), g.to_string());
        }
        l
    }

    #[test]
    fn the_owner_is_the_host_ids_of_the_containers_root() {
        let m = IdMap::from_labels(&labels(Some("0:65536:65536"), Some("0:131072:65536")))
            .unwrap()
            .unwrap();
        assert_eq!(m.root, (65536, 131072));
        assert_eq!(
            m.mount_options(),
            ["uidmap=0:65536:65536", "gidmap=0:131072:65536"]
        );
        // Several ranges: root is found in whichever holds 0.
        let m = IdMap::from_labels(&labels(Some("1:2000:10,0:1000:1"), Some("0:1000:11")))
            .unwrap()
            .unwrap();
        assert_eq!(m.root, (1000, 1000));
        assert_eq!(IdMap::from_labels(&labels(None, None)), Ok(None));
    }

    #[test]
    fn bad_mappings_are_refused() {
        for (uid, gid) in [
            (Some("0:1000:65536"), None),
            (Some("1:1000:65536"), Some("0:1000:65536")),
            (Some("0:1000"), Some("0:1000:1")),
            (Some("0:x:1"), Some("0:1000:1")),
            (Some("0:4294967295:1"), Some("0:1000:1")),
            (Some("4294967294:0:5"), Some("0:1000:1")),
            (Some(""), Some("0:1000:1")),
        ] {
            assert!(
                IdMap::from_labels(&labels(uid, gid)).is_err(),
                "{uid:?} {gid:?}"
            );
        }
        let many = vec!["0:1000:1"; MAX_RANGES + 1].join(",");
        assert!(IdMap::from_labels(&labels(Some(&many), Some("0:1:1"))).is_err());
    }
}
