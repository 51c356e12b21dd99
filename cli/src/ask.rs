//! The flags several commands share: those of a command that asks one
//! registry ([`Ask`], and [`listing`] for one that lists what a `--dest`
//! names), and what a sync copies and where to ([`SourceArgs`]: `sync
//! start` and `sync schedule create`).

use anyhow::bail;
use sealvol_client::sync::{SyncDest, SyncRequest};
use sealvol_client::Remote;
use sealvol_spec::reference::VolumeRef;

use crate::output::Output;
use crate::volume::{parse_ref, Conn};

/// What a sync copies, and where to: a job's and a schedule's flags.
#[derive(clap::Args)]
pub struct SourceArgs {
    /// hf://ORG/REPO[@REV], hf://datasets/ORG/REPO[@REV], s3://BUCKET[/PREFIX],
    /// r2://…, cw://…, gs://BUCKET[/PREFIX], azure://ACCOUNT/CONTAINER[/PREFIX],
    /// dir:///PATH (on the registry's host), oci://HOST[:PORT]/REPO[:TAG|@DIGEST]
    #[arg(long, value_name = "URI")]
    source: String,
    /// The volume, and a tag to move: bdn:ns/vol[:tag] or host[:port]/ns/vol[:tag];
    /// the job runs on that registry
    #[arg(long, value_name = "REF")]
    dest: String,
    /// Only copy paths matching this glob (repeatable; `*` crosses `/`)
    #[arg(long = "include", value_name = "GLOB")]
    includes: Vec<String>,
    /// Leave out paths matching this glob (repeatable; wins over --include)
    #[arg(long = "exclude", value_name = "GLOB")]
    excludes: Vec<String>,
    /// Read the source with this secret, stored with `sealvol secret set NAME`
    #[arg(long, value_name = "NAME")]
    secret: Option<String>,
}

impl SourceArgs {
    /// The request, and the destination's ref.
    pub(crate) fn request(self) -> anyhow::Result<(SyncRequest, VolumeRef)> {
        let vref = parse_ref(&self.dest)?;
        let request = SyncRequest {
            source: self.source,
            dest: SyncDest::from_ref(&vref)?,
            include: self.includes,
            exclude: self.excludes,
            secret: self.secret.as_deref().map(str::parse).transpose()?,
        };
        Ok((request, vref))
    }
}

/// The flags of a command that asks one registry: which one, how to reach
/// it, how to print the answer.
#[derive(clap::Args)]
pub struct Ask {
    /// host[:port] (default: the default registry)
    #[arg(long, value_name = "HOST")]
    registry: Option<String>,
    #[command(flatten)]
    conn: Conn,
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

impl Ask {
    /// The registry `--registry` names, or the default one.
    fn registry(&self) -> String {
        self.registry
            .clone()
            .unwrap_or_else(VolumeRef::default_registry)
    }

    /// How to print the answer.
    pub fn output(&self) -> Output {
        self.output
    }

    /// The registry asked, and a connection to it.
    pub fn connect(&self) -> anyhow::Result<(String, Remote)> {
        let registry = self.registry();
        let remote = Remote::connect(&registry, self.conn.insecure)?;
        Ok((registry, remote))
    }
}

/// The registry a listing asks, a connection to it, and the destination
/// `--dest` names (whose registry wins when `--registry` agrees).
pub(crate) fn listing(
    dest: Option<&str>,
    ask: &Ask,
) -> anyhow::Result<(String, Remote, Option<SyncDest>)> {
    let (registry, dest) = match dest {
        Some(d) => {
            let vref = parse_ref(d)?;
            let dest = SyncDest::from_ref(&vref)?;
            let registry = match (vref.registry, &ask.registry) {
                (Some(a), Some(b)) if a != *b => {
                    bail!("--dest {d} is on registry {a}, not {b}; give one of them")
                }
                (Some(a), _) => a,
                (None, _) => ask.registry(),
            };
            (registry, Some(dest))
        }
        None => (ask.registry(), None),
    };
    let remote = Remote::connect(&registry, ask.conn.insecure)?;
    Ok((registry, remote, dest))
}
