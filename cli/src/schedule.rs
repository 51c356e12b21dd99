//! `sealvol sync schedule …`: schedules the registry keeps, each starting
//! a sync job every interval (SPEC.md §8.6), such as a training run's
//! latest checkpoint published to a tag. Each command calls
//! `sealvol_client::sync` and prints text, or the registry's schedule as
//! one JSON document with `--output json`.

use sealvol_client::sync::{self, registry_flag, ScheduleRequest, SyncSchedule};
use sealvol_client::Remote;
use serde::Serialize;

use clap::Subcommand;

use crate::ask::{listing, Ask, SourceArgs};
use crate::output::{columns, Output};
use crate::volume::{connect, print_json, runtime, Conn};

#[derive(Subcommand)]
pub enum ScheduleAction {
    /// Store a schedule that syncs SOURCE into DEST now and then every interval; an unchanged source seals nothing new
    Create(ScheduleArgs),
    /// List schedules with their next and last runs
    List {
        /// Only schedules into this volume (and tag, when given); its registry is the one asked
        #[arg(long, value_name = "REF")]
        dest: Option<String>,
        #[command(flatten)]
        ask: Ask,
    },
    /// Show a schedule and its last run
    Describe {
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        ask: Ask,
    },
    /// Start no more runs until resumed (a running job goes on)
    Pause {
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        ask: Ask,
    },
    /// Run again: once now, then every interval
    Resume {
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        ask: Ask,
    },
    /// Delete a schedule; the jobs it started stay listed, and a running one goes on
    Delete {
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        ask: Ask,
    },
}

#[derive(clap::Args)]
pub struct ScheduleArgs {
    #[command(flatten)]
    pub(crate) sync: SourceArgs,
    /// How often: 10m, 1h, 1d (from 1m unless the registry allows less, to 30d)
    #[arg(long, value_name = "DURATION")]
    pub(crate) every: String,
    #[command(flatten)]
    pub(crate) conn: Conn,
    #[arg(long, value_enum, default_value_t = Output::Text)]
    pub(crate) output: Output,
}

pub fn run(action: ScheduleAction) -> anyhow::Result<()> {
    match action {
        ScheduleAction::Create(args) => create(args),
        ScheduleAction::List { dest, ask } => list(dest.as_deref(), &ask),
        ScheduleAction::Describe { id, ask } => describe(&id, &ask),
        ScheduleAction::Pause { id, ask } => pause(&id, true, &ask),
        ScheduleAction::Resume { id, ask } => pause(&id, false, &ask),
        ScheduleAction::Delete { id, ask } => delete(&id, &ask),
    }
}

/// A schedule as these commands print it with `--output json`: the
/// registry's SyncSchedule (SPEC.md §8.6) with its destination as a ref
/// first:
///
/// ```json
/// {"dest_ref":"bdn:ckpt/run-42:latest","id":"sched-<16 hex>","source":"s3://…",
///  "dest":{"name":"ckpt/run-42","tag":"latest"},"include":[…],"exclude":[…],
///  "secret":NAME|null,"every":"10m","every_seconds":600,"paused":false,
///  "created_at":T,"next_run_at":T|null,"runs":N,"skipped":N,"last_run":SyncJob|null}
/// ```
#[derive(Serialize)]
struct ScheduleOut {
    dest_ref: String,
    #[serde(flatten)]
    schedule: SyncSchedule,
}

impl ScheduleOut {
    fn new(remote: &Remote, schedule: SyncSchedule) -> ScheduleOut {
        ScheduleOut {
            dest_ref: sync::dest_ref(remote, &schedule.sync.dest),
            schedule,
        }
    }
}

fn create(args: ScheduleArgs) -> anyhow::Result<()> {
    let ScheduleArgs {
        sync: what,
        every,
        conn,
        output,
    } = args;
    let (request, vref) = what.request()?;
    let request = ScheduleRequest {
        sync: request,
        every,
    };
    let remote = connect(&vref, &conn)?;
    let s = runtime()?.block_on(sync::create_schedule(&remote, &request))?;
    let out = ScheduleOut::new(&remote, s);
    match output {
        Output::Json => print_json(&out)?,
        Output::Text => {
            let s = &out.schedule;
            println!("{}", s.id);
            eprintln!(
                "schedule {} syncs {} into {} every {}, first now. Follow it: sealvol sync schedule describe {}{}",
                s.id,
                s.sync.source,
                out.dest_ref,
                s.every,
                s.id,
                registry_flag(remote.registry())
            );
        }
    }
    Ok(())
}

fn list(dest: Option<&str>, ask: &Ask) -> anyhow::Result<()> {
    let (registry, remote, dest) = listing(dest, ask)?;
    let mut all = runtime()?.block_on(sync::list_schedules(
        &remote,
        dest.as_ref().map(|d| d.name.as_str()),
    ))?;
    if let Some(tag) = dest.as_ref().and_then(|d| d.tag.as_ref()) {
        all.retain(|s| s.sync.dest.tag.as_ref() == Some(tag));
    }
    let all: Vec<ScheduleOut> = all
        .into_iter()
        .map(|s| ScheduleOut::new(&remote, s))
        .collect();
    match ask.output() {
        Output::Json => {
            #[derive(Serialize)]
            struct Out {
                schedules: Vec<ScheduleOut>,
            }
            print_json(&Out { schedules: all })?
        }
        Output::Text if all.is_empty() => eprintln!("no sync schedules on registry {registry}"),
        Output::Text => print!("{}", table(&all)),
    }
    Ok(())
}

fn describe(id: &str, ask: &Ask) -> anyhow::Result<()> {
    let (_, remote) = ask.connect()?;
    let s = runtime()?.block_on(sync::schedule(&remote, id))?;
    let out = ScheduleOut::new(&remote, s);
    match ask.output() {
        Output::Json => print_json(&out)?,
        Output::Text => print!("{}", describe_text(&remote, &out)),
    }
    Ok(())
}

fn pause(id: &str, paused: bool, ask: &Ask) -> anyhow::Result<()> {
    let (_, remote) = ask.connect()?;
    let c = runtime()?.block_on(sync::pause_schedule(&remote, id, paused))?;
    match ask.output() {
        Output::Json => {
            #[derive(Serialize)]
            struct Out {
                changed: bool,
                schedule: ScheduleOut,
            }
            print_json(&Out {
                changed: c.changed,
                schedule: ScheduleOut::new(&remote, c.schedule),
            })?
        }
        Output::Text => match (paused, c.changed) {
            (true, true) => println!("paused schedule {id}; a running job goes on"),
            (false, true) => println!(
                "resumed schedule {id}; it runs now, then every {}",
                c.schedule.every
            ),
            (true, false) => println!("schedule {id} was already paused; nothing changed"),
            (false, false) => println!("schedule {id} was not paused; nothing changed"),
        },
    }
    Ok(())
}

fn delete(id: &str, ask: &Ask) -> anyhow::Result<()> {
    let (_, remote) = ask.connect()?;
    runtime()?.block_on(sync::delete_schedule(&remote, id))?;
    if ask.output() == Output::Text {
        println!("deleted schedule {id}");
    } else {
        print_json(&serde_json::json!({ "deleted": id }))?;
    }
    Ok(())
}

/// A schedule's last run in a few words: `sync-… READY b3:… 2026-…`.
fn last_run_text(remote: &Remote, s: &SyncSchedule) -> String {
    let Some(j) = &s.last_run else {
        return "-".into();
    };
    let mut text = format!("{} {}", j.id, j.state);
    if let Some(r) = sync::version_ref(remote, j) {
        text.push_str(&format!(" {r}"));
    }
    if let Some(e) = &j.error {
        text.push_str(&format!(" ({e})"));
    }
    if let Some(f) = &j.finished_at {
        text.push_str(&format!(" at {f}"));
    }
    text
}

fn next_run_text(s: &SyncSchedule) -> String {
    if s.paused {
        "paused".into()
    } else {
        s.next_run_at.clone().unwrap_or_else(|| "-".into())
    }
}

/// `schedule describe`: aligned `key: value` lines.
fn describe_text(remote: &Remote, out: &ScheduleOut) -> String {
    let s = &out.schedule;
    let mut rows: Vec<(&str, String)> = vec![
        ("id", s.id.clone()),
        ("source", s.sync.source.clone()),
        ("dest", out.dest_ref.clone()),
        ("every", s.every.clone()),
    ];
    if !s.sync.include.is_empty() {
        rows.push(("include", s.sync.include.join(" ")));
    }
    if !s.sync.exclude.is_empty() {
        rows.push(("exclude", s.sync.exclude.join(" ")));
    }
    if let Some(secret) = &s.sync.secret {
        rows.push(("secret", secret.to_string()));
    }
    rows.extend([
        ("next run", next_run_text(s)),
        (
            "runs",
            format!(
                "{} started, {} skipped while the last still ran",
                s.runs, s.skipped
            ),
        ),
        ("last run", last_run_text(remote, s)),
        (
            "created",
            s.created_at.clone().unwrap_or_else(|| "-".into()),
        ),
    ]);
    let mut text = String::new();
    for (key, value) in rows {
        text.push_str(&format!("{:<10}{value}\n", format!("{key}:")));
    }
    text
}

/// `schedule list`: one row per schedule under a header.
fn table(all: &[ScheduleOut]) -> String {
    let mut rows =
        vec![["ID", "EVERY", "SOURCE", "DEST", "NEXT RUN", "LAST RUN"].map(String::from)];
    for out in all {
        let s = &out.schedule;
        let last = match &s.last_run {
            Some(j) => format!("{} {}", j.id, j.state),
            None => "-".into(),
        };
        rows.push([
            s.id.clone(),
            s.every.clone(),
            s.sync.source.clone(),
            out.dest_ref.clone(),
            next_run_text(s),
            last,
        ]);
    }
    columns(&rows)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote() -> Remote {
        let registry = sealvol_spec::reference::VolumeRef::default_registry();
        Remote::connect(&registry, false).unwrap()
    }

    fn schedule(paused: bool) -> SyncSchedule {
        serde_json::from_value(serde_json::json!({
            "id": "sched-0123456789abcdef", "source": "s3://b/run-42/checkpoints/latest",
            "dest": {"name": "ckpt/run-42", "tag": "latest"},
            "include": ["*.safetensors"], "exclude": [], "secret": null,
            "every": "10m", "every_seconds": 600, "paused": paused,
            "created_at": "2026-12-02T18:40:00Z",
            "next_run_at": if paused { None } else { Some("2026-12-02T18:50:00Z") },
            "runs": 3, "skipped": 1,
            "last_run": {
                "id": "sync-00000000000000aa", "state": "READY", "source": "s3://b/run-42/checkpoints/latest",
                "dest": {"name": "ckpt/run-42", "tag": "latest"},
                "created_at": "2026-12-02T18:40:00Z", "finished_at": "2026-12-02T18:41:00Z",
                "version": {"digest": format!("b3:{}", "ab".repeat(32)),
                            "index_digest": format!("sha256:{}", "cd".repeat(32))},
                "schedule": "sched-0123456789abcdef"
            }
        }))
        .unwrap()
    }

    #[test]
    fn describe_prints_aligned_lines_with_the_last_run() {
        let r = remote();
        let text = describe_text(&r, &ScheduleOut::new(&r, schedule(false)));
        assert_eq!(
            text,
            format!(
                "id:       sched-0123456789abcdef\n\
                 source:   s3://b/run-42/checkpoints/latest\n\
                 dest:     bdn:ckpt/run-42:latest\n\
                 every:    10m\n\
                 include:  *.safetensors\n\
                 next run: 2026-12-02T18:50:00Z\n\
                 runs:     3 started, 1 skipped while the last still ran\n\
                 last run: sync-00000000000000aa READY bdn:ckpt/run-42@b3:{} at 2026-12-02T18:41:00Z\n\
                 created:  2026-12-02T18:40:00Z\n",
                "ab".repeat(32)
            )
        );
        let text = describe_text(&r, &ScheduleOut::new(&r, schedule(true)));
        assert!(text.contains("\nnext run: paused\n"), "{text}");
    }

    #[test]
    fn list_is_a_table_with_next_and_last_runs() {
        let r = remote();
        let text = table(&[
            ScheduleOut::new(&r, schedule(false)),
            ScheduleOut::new(&r, schedule(true)),
        ]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        assert!(
            lines[0].starts_with("ID  ") && lines[0].ends_with("LAST RUN"),
            "{text}"
        );
        assert!(lines[1].contains("2026-12-02T18:50:00Z"), "{text}");
        assert!(lines[2].contains(" paused "), "{text}");
        assert!(lines[1].ends_with("sync-00000000000000aa READY"), "{text}");
    }
}
