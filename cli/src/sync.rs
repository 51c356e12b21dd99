//! `sealvol sync …` and `sealvol secret …`: durable sync jobs that the
//! registry runs (SPEC.md §8), and the secrets they read credentials from.
//! Each command calls `sealvol_client::sync` and prints text (or one JSON
//! document with `--output json`); following a job is the client's
//! [`sync::wait`], with a progress bar when stderr is a terminal.
//!
//! Secret values come from standard input only, never from arguments,
//! where they would land in shell history and `ps`.

use std::io::{IsTerminal as _, Read as _};

use anyhow::bail;
use clap::Subcommand;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use sealvol_client::sync::{self, registry_flag, SecretName, SyncJob, SyncProgress, SyncState};
use sealvol_client::Remote;
use serde::Serialize;

use crate::ask::{listing, Ask, SourceArgs};
use crate::output::{columns, Output};
use crate::volume::{connect, human, print_json, read_hidden_line, runtime, Conn};

#[derive(Subcommand)]
pub enum SyncAction {
    /// Start a job on the registry that copies SOURCE into a new version of DEST
    Start(StartArgs),
    /// Show a job: state, progress, the version it sealed or why it failed
    Describe {
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        ask: Ask,
    },
    /// List jobs, newest first
    List {
        /// Only jobs into this volume (and tag, when given); its registry is the one asked
        #[arg(long, value_name = "REF")]
        dest: Option<String>,
        #[command(flatten)]
        ask: Ask,
    },
    /// Cancel a queued or running job; it seals nothing (a finished job is left as it is)
    Cancel {
        #[arg(value_name = "ID")]
        id: String,
        #[command(flatten)]
        ask: Ask,
    },
    /// Schedules on the registry that start a sync every interval, such as a training run's checkpoints
    Schedule {
        #[command(subcommand)]
        action: crate::schedule::ScheduleAction,
    },
}

#[derive(clap::Args)]
pub struct StartArgs {
    #[command(flatten)]
    sync: SourceArgs,
    /// Follow the job until it ends; Ctrl+C stops waiting, not the job
    #[arg(long)]
    wait: bool,
    #[command(flatten)]
    conn: Conn,
    #[arg(long, value_enum, default_value_t = Output::Text)]
    output: Output,
}

#[derive(Subcommand)]
pub enum SecretAction {
    /// Store a credential on the registry for sync jobs, bound to the sources it may be sent to; the value is read from standard input
    Set {
        /// 1 to 64 of A-Z a-z 0-9 . _ -
        #[arg(value_name = "NAME")]
        name: String,
        #[command(flatten)]
        binding: Binding,
        #[command(flatten)]
        ask: Ask,
    },
    /// Bind a stored secret anew, keeping its value
    Bind {
        #[arg(value_name = "NAME")]
        name: String,
        #[command(flatten)]
        binding: Binding,
        #[command(flatten)]
        ask: Ask,
    },
    /// List the registry's secrets and what each is bound to (values are never shown)
    List {
        #[command(flatten)]
        ask: Ask,
    },
    /// Delete a secret from the registry
    Rm {
        #[arg(value_name = "NAME")]
        name: String,
        #[command(flatten)]
        ask: Ask,
    },
}

/// Where a secret may be used (SPEC.md §8.3).
#[derive(clap::Args)]
pub struct Binding {
    /// A source the secret may be sent to: a bucket or a prefix in it, a Hub organization or repository, a registry host (s3://bucket/prefix, hf://org, oci://host); repeatable
    #[arg(long = "for", value_name = "URI", required = true)]
    for_sources: Vec<String>,
    /// Only jobs into volumes matching this glob may use it (weights/**); repeatable; default any
    #[arg(long, value_name = "GLOB")]
    dest: Vec<String>,
}

impl Binding {
    fn wire(&self) -> sync::SecretBinding {
        sync::SecretBinding {
            for_sources: self.for_sources.clone(),
            dest: self.dest.clone(),
        }
    }
}

/// A job as the sync commands print it with `--output json`: the
/// registry's SyncJob (SPEC.md §8.2) with the full ref of the version it
/// sealed first (`null` until `READY`):
///
/// ```json
/// {"ref":"bdn:ns/vol@b3:<hex>"|null,"id":"sync-<16 hex>","state":"READY",
///  "source":"hf://…","dest":{"name":"ns/vol","tag":"prod"|null},
///  "include":[…],"exclude":[…],"secret":"NAME"|null,
///  "progress":{"files_done":N,"files_total":N,"bytes_done":N,"bytes_total":N,"bytes_stored":N,
///               "files_reused":N,"bytes_reused":N},
///  "attempts":N,"retries":N,"retrying":"…"|null,"created_at":T,"started_at":T,"finished_at":T,
///  "version":{"digest":"b3:…","index_digest":"sha256:…"}|null,
///  "error":{"code":"…","message":"…"}|null}
/// ```
#[derive(Serialize)]
struct JobOut {
    #[serde(rename = "ref")]
    reference: Option<String>,
    #[serde(flatten)]
    job: SyncJob,
    /// The destination as a ref (`bdn:ns/vol:prod`), for text.
    #[serde(skip)]
    dest: String,
}

impl JobOut {
    fn new(remote: &Remote, job: SyncJob) -> JobOut {
        JobOut {
            reference: sync::version_ref(remote, &job),
            dest: sync::dest_ref(remote, &job.dest),
            job,
        }
    }
}

/// What `sync cancel` prints with `--output json`:
/// `{"changed":bool,"sync":JobOut}`.
#[derive(Serialize)]
struct CancelOut {
    changed: bool,
    sync: JobOut,
}

pub fn run(action: SyncAction) -> anyhow::Result<()> {
    match action {
        SyncAction::Start(args) => start(args),
        SyncAction::Describe { id, ask } => describe(&id, &ask),
        SyncAction::List { dest, ask } => list(dest.as_deref(), &ask),
        SyncAction::Cancel { id, ask } => cancel(&id, &ask),
        SyncAction::Schedule { action } => crate::schedule::run(action),
    }
}

pub fn run_secret(action: SecretAction) -> anyhow::Result<()> {
    match action {
        SecretAction::Set { name, binding, ask } => secret_set(&name, &binding, &ask),
        SecretAction::Bind { name, binding, ask } => secret_bind(&name, &binding, &ask),
        SecretAction::List { ask } => secret_list(&ask),
        SecretAction::Rm { name, ask } => secret_rm(&name, &ask),
    }
}

fn start(args: StartArgs) -> anyhow::Result<()> {
    let StartArgs {
        sync: what,
        wait,
        conn,
        output,
    } = args;
    let (request, vref) = what.request()?;
    let remote = connect(&vref, &conn)?;
    let rt = runtime()?;
    let job = rt.block_on(sync::start_sync(&remote, &request))?;
    let id = job.id.clone();
    let flag = registry_flag(remote.registry());
    if !wait {
        let out = JobOut::new(&remote, job);
        match output {
            Output::Json => print_json(&out)?,
            Output::Text => {
                println!("{id}");
                eprintln!(
                    "sync {id} {}: {} into {}. Follow it: sealvol sync describe {id}{flag}",
                    out.job.state.as_str().to_lowercase(),
                    out.job.source,
                    out.dest
                );
            }
        }
        return Ok(());
    }

    let mut view = Watch::new(output == Output::Text && std::io::stderr().is_terminal());
    view.show(Ok(&job));
    let ended = rt.block_on(async {
        tokio::select! {
            r = sync::wait(&remote, &id, sync::POLL_INTERVAL, |seen| view.show(seen)) => Some(r),
            Ok(()) = tokio::signal::ctrl_c() => None,
        }
    });
    view.finish();
    let Some(ended) = ended else {
        eprintln!(
            "stopped waiting; sync {id} goes on. Follow it: sealvol sync describe {id}{flag} — stop it: sealvol sync cancel {id}{flag}"
        );
        drop(rt);
        std::process::exit(130);
    };
    let out = JobOut::new(&remote, ended?);
    if output == Output::Json {
        print_json(&out)?;
    }
    let job = &out.job;
    match job.state {
        SyncState::Ready => {
            if output == Output::Text {
                match &out.reference {
                    Some(r) => println!("{r}"),
                    None => bail!("sync {id} is READY but the registry named no version"),
                }
                let p = &job.progress;
                eprintln!(
                    "{} files, {} ({} new, {} unchanged since an earlier sync, not read) from {} into {}",
                    p.files_total,
                    human(p.bytes_total),
                    human(p.bytes_stored),
                    human(p.bytes_reused),
                    job.source,
                    out.dest
                );
            }
            Ok(())
        }
        SyncState::Failed => match &job.error {
            Some(e) => bail!("sync {id} failed: {e}"),
            None => bail!("sync {id} failed"),
        },
        SyncState::Canceled => bail!("sync {id} was canceled"),
        // `wait` returns finished jobs only.
        state => bail!("sync {id} is {state}"),
    }
}

/// The progress bar of `sync start --wait`: bytes done of the total,
/// files in the message; nothing when nobody watches.
struct Watch {
    bar: Option<ProgressBar>,
    bytes_style: bool,
    retrying: Option<String>,
}

impl Watch {
    fn new(visible: bool) -> Watch {
        let bar = visible.then(|| {
            let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            bar.set_style(ProgressStyle::with_template("{spinner} {msg}").expect("valid template"));
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        });
        Watch {
            bar,
            bytes_style: false,
            retrying: None,
        }
    }

    fn show(&mut self, seen: Result<&SyncJob, &sealvol_client::Error>) {
        let Some(bar) = &self.bar else { return };
        let job = match seen {
            Ok(job) => job,
            Err(e) => {
                bar.set_message(format!("cannot reach the registry, still trying ({e})"));
                return;
            }
        };
        let p = &job.progress;
        if p.bytes_total > 0 {
            if !self.bytes_style {
                bar.set_style(
                    ProgressStyle::with_template(
                        "{msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} eta {eta}",
                    )
                    .expect("valid template")
                    .progress_chars("=> "),
                );
                self.bytes_style = true;
            }
            bar.set_length(p.bytes_total);
            bar.set_position(p.bytes_done);
        }
        bar.set_message(format!(
            "{} {}/{} files",
            job.state, p.files_done, p.files_total
        ));
        if job.retrying != self.retrying {
            if let Some(r) = &job.retrying {
                bar.println(format!("retrying: {r}"));
            }
            self.retrying = job.retrying.clone();
        }
    }

    fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

fn describe(id: &str, ask: &Ask) -> anyhow::Result<()> {
    sync::check_sync_id(id)?;
    let (_, remote) = ask.connect()?;
    let job = runtime()?.block_on(sync::sync_job(&remote, id))?;
    let out = JobOut::new(&remote, job);
    match ask.output() {
        Output::Json => print_json(&out)?,
        Output::Text => print!("{}", describe_text(&out)),
    }
    Ok(())
}

fn list(dest: Option<&str>, ask: &Ask) -> anyhow::Result<()> {
    let (registry, remote, dest) = listing(dest, ask)?;
    let mut jobs = runtime()?.block_on(sync::list_syncs(
        &remote,
        dest.as_ref().map(|d| d.name.as_str()),
    ))?;
    // The API filters by volume; a tag in --dest narrows further.
    if let Some(tag) = dest.as_ref().and_then(|d| d.tag.as_ref()) {
        jobs.retain(|j| j.dest.tag.as_ref() == Some(tag));
    }
    let jobs: Vec<JobOut> = jobs.into_iter().map(|j| JobOut::new(&remote, j)).collect();
    match ask.output() {
        Output::Json => {
            #[derive(Serialize)]
            struct Out {
                syncs: Vec<JobOut>,
            }
            print_json(&Out { syncs: jobs })?
        }
        Output::Text if jobs.is_empty() => match dest {
            Some(d) => eprintln!(
                "no sync jobs into {} on registry {registry}",
                sync::dest_ref(&remote, &d)
            ),
            None => eprintln!("no sync jobs on registry {registry}"),
        },
        Output::Text => print!("{}", table(&jobs)),
    }
    Ok(())
}

fn cancel(id: &str, ask: &Ask) -> anyhow::Result<()> {
    sync::check_sync_id(id)?;
    let (_, remote) = ask.connect()?;
    let c = runtime()?.block_on(sync::cancel_sync(&remote, id))?;
    let out = CancelOut {
        changed: c.changed,
        sync: JobOut::new(&remote, c.sync),
    };
    match ask.output() {
        Output::Json => print_json(&out)?,
        Output::Text if out.changed => println!("canceled sync {id}"),
        Output::Text => println!("sync {id} already {}; nothing changed", out.sync.job.state),
    }
    Ok(())
}

/// `3/7 files, 1.2 GiB of 15.3 GiB`.
fn progress_text(p: &SyncProgress) -> String {
    format!(
        "{}/{} files, {} of {}",
        p.files_done,
        p.files_total,
        human(p.bytes_done),
        human(p.bytes_total)
    )
}

/// `sync describe`: aligned `key: value` lines.
fn describe_text(out: &JobOut) -> String {
    let job = &out.job;
    let or_dash = |t: &Option<String>| t.clone().unwrap_or_else(|| "-".into());
    let mut rows: Vec<(&str, String)> = vec![
        ("id", job.id.clone()),
        ("state", job.state.to_string()),
        ("source", job.source.clone()),
        ("dest", out.dest.clone()),
    ];
    if let Some(p) = &job.pinned_source {
        rows.insert(3, ("pinned", p.clone()));
    }
    if !job.include.is_empty() {
        rows.push(("include", job.include.join(" ")));
    }
    if !job.exclude.is_empty() {
        rows.push(("exclude", job.exclude.join(" ")));
    }
    if let Some(s) = &job.secret {
        rows.push(("secret", s.clone()));
    }
    if let Some(s) = &job.schedule {
        rows.push(("schedule", s.clone()));
    }
    rows.extend([
        ("progress", progress_text(&job.progress)),
        ("stored", human(job.progress.bytes_stored)),
        (
            "reused",
            format!(
                "{} files, {} (unchanged since an earlier sync, not read)",
                job.progress.files_reused,
                human(job.progress.bytes_reused)
            ),
        ),
        ("attempts", job.attempts.to_string()),
        ("retries", job.retries.to_string()),
        ("created", or_dash(&job.created_at)),
        ("started", or_dash(&job.started_at)),
        ("finished", or_dash(&job.finished_at)),
    ]);
    if let Some(r) = &out.reference {
        rows.push(("version", r.clone()));
    }
    if let Some(e) = &job.error {
        rows.push(("error", e.to_string()));
    }
    if let Some(r) = &job.retrying {
        rows.push(("retrying", r.clone()));
    }
    let mut text = String::new();
    for (key, value) in rows {
        text.push_str(&format!("{:<10}{value}\n", format!("{key}:")));
    }
    text
}

/// `sync list`: one row per job under a header.
fn table(jobs: &[JobOut]) -> String {
    let header = ["ID", "STATE", "SOURCE", "DEST", "PROGRESS", "CREATED"].map(String::from);
    let mut rows = vec![header];
    for j in jobs {
        let p = &j.job.progress;
        rows.push([
            j.job.id.clone(),
            j.job.state.to_string(),
            j.job.source.clone(),
            j.dest.clone(),
            format!(
                "{}/{} files, {}/{}",
                p.files_done,
                p.files_total,
                human(p.bytes_done),
                human(p.bytes_total)
            ),
            j.job.created_at.clone().unwrap_or_else(|| "-".into()),
        ]);
    }
    columns(&rows)
}

/// The secret's value from standard input: everything piped in, or one
/// line typed without echo on a terminal; one trailing newline removed.
fn read_secret(name: &SecretName) -> anyhow::Result<Vec<u8>> {
    let stdin = std::io::stdin();
    let value = if stdin.is_terminal() {
        read_hidden_line(&format!("Value of secret {name} (not shown): "))?.into_bytes()
    } else {
        // A little more than the limit, to tell "too long" from "at the
        // limit plus a newline".
        let mut value = Vec::new();
        stdin
            .lock()
            .take(sync::SECRET_MAX_BYTES as u64 + 3)
            .read_to_end(&mut value)?;
        value
    };
    let value = strip_newline(value);
    if value.is_empty() {
        bail!(
            "the value of secret {name} is empty: give it on standard input, e.g. `sealvol secret set {name} < token.txt`"
        );
    }
    if value.len() > sync::SECRET_MAX_BYTES {
        bail!(
            "the value of secret {name} is longer than {} bytes, the most a registry keeps",
            sync::SECRET_MAX_BYTES
        );
    }
    Ok(value)
}

/// Removes one trailing `\n` (or `\r\n`).
fn strip_newline(mut v: Vec<u8>) -> Vec<u8> {
    if v.last() == Some(&b'\n') {
        v.pop();
        if v.last() == Some(&b'\r') {
            v.pop();
        }
    }
    v
}

fn secret_set(name: &str, binding: &Binding, ask: &Ask) -> anyhow::Result<()> {
    let name: SecretName = name.parse()?;
    let (registry, remote) = ask.connect()?;
    let rt = runtime()?;
    // A registry without secrets says so before anyone types a value.
    rt.block_on(sealvol_client::api::require(
        &remote,
        "secrets for sync jobs",
    ))?;
    let value = read_secret(&name)?;
    rt.block_on(sync::set_secret(&remote, &name, &value, &binding.wire()))?;
    secret_stored(&name, &registry, binding, ask, "stored")
}

fn secret_bind(name: &str, binding: &Binding, ask: &Ask) -> anyhow::Result<()> {
    let name: SecretName = name.parse()?;
    let (registry, remote) = ask.connect()?;
    runtime()?.block_on(sync::bind_secret(&remote, &name, &binding.wire()))?;
    secret_stored(&name, &registry, binding, ask, "bound")
}

fn secret_stored(
    name: &SecretName,
    registry: &str,
    binding: &Binding,
    ask: &Ask,
    done: &str,
) -> anyhow::Result<()> {
    match ask.output() {
        Output::Json => print_json(&serde_json::json!({
            "secret": name.as_str(),
            "registry": registry,
            "for": binding.for_sources,
            "dest": binding.dest,
        }))?,
        Output::Text => {
            println!(
                "{done} secret {name} on registry {registry}, for {}",
                binding.for_sources.join(", ")
            );
            eprintln!("use it with: sealvol sync start --source URI --dest REF --secret {name}");
        }
    }
    Ok(())
}

fn secret_list(ask: &Ask) -> anyhow::Result<()> {
    let (registry, remote) = ask.connect()?;
    let secrets = runtime()?.block_on(sync::list_secrets(&remote))?;
    match ask.output() {
        Output::Json => print_json(&serde_json::json!({ "secrets": secrets }))?,
        Output::Text if secrets.is_empty() => eprintln!("no secrets on registry {registry}"),
        Output::Text => {
            for s in secrets {
                let bound = if s.for_sources.is_empty() {
                    "bound to no source (admins only until `sealvol secret bind`)".to_string()
                } else {
                    format!("for {}", s.for_sources.join(", "))
                };
                let dest = if s.dest.is_empty() {
                    String::new()
                } else {
                    format!("; dest {}", s.dest.join(", "))
                };
                println!("{}\t{bound}{dest}", s.name);
            }
        }
    }
    Ok(())
}

fn secret_rm(name: &str, ask: &Ask) -> anyhow::Result<()> {
    let name: SecretName = name.parse()?;
    let (registry, remote) = ask.connect()?;
    runtime()?.block_on(sync::delete_secret(&remote, &name))?;
    match ask.output() {
        Output::Json => print_json(&serde_json::json!({
            "deleted": name.as_str(),
            "registry": registry,
        }))?,
        Output::Text => println!("deleted secret {name} from registry {registry}"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn job(v: serde_json::Value) -> SyncJob {
        serde_json::from_value(v).unwrap()
    }

    fn running() -> JobOut {
        JobOut {
            reference: None,
            dest: "bdn:weights/qwen3-8b:prod".into(),
            job: job(json!({
                "id": "sync-0123456789abcdef", "state": "RUNNING",
                "source": "hf://Qwen/Qwen3-8B",
                "dest": {"name": "weights/qwen3-8b", "tag": "prod"},
                "include": ["*.safetensors", "*.json"], "exclude": [], "secret": "hf-token",
                "progress": {"files_done": 3, "files_total": 7, "bytes_done": 1_288_490_189u64,
                             "bytes_total": 16_428_249_907u64, "bytes_stored": 838_860_800u64,
                             "files_reused": 2, "bytes_reused": 419_430_400u64},
                "attempts": 1, "retrying": "hf://Qwen/Qwen3-8B: HTTP 503, retrying in 4s",
                "created_at": "2026-12-02T18:40:00Z", "started_at": "2026-12-02T18:40:01Z",
                "finished_at": null, "version": null, "error": null
            })),
        }
    }

    fn ready() -> JobOut {
        let hex = "ab".repeat(32);
        JobOut {
            reference: Some(format!("bdn:weights/qwen3-8b@b3:{hex}")),
            dest: "bdn:weights/qwen3-8b".into(),
            job: job(json!({
                "id": "sync-00000000000000ff", "state": "READY",
                "source": "s3://bucket/models/x",
                "dest": {"name": "weights/qwen3-8b", "tag": null},
                "include": [], "exclude": [], "secret": null,
                "progress": {"files_done": 2, "files_total": 2, "bytes_done": 2048,
                             "bytes_total": 2048, "bytes_stored": 0},
                "attempts": 2, "retrying": null,
                "created_at": "2026-12-01T10:00:00Z", "started_at": "2026-12-01T10:00:01Z",
                "finished_at": "2026-12-01T10:00:09Z",
                "version": {"digest": format!("b3:{hex}"),
                            "index_digest": format!("sha256:{}", "cd".repeat(32))},
                "error": null
            })),
        }
    }

    #[test]
    fn describe_prints_aligned_lines() {
        let text = describe_text(&running());
        assert_eq!(
            text,
            "id:       sync-0123456789abcdef\n\
             state:    RUNNING\n\
             source:   hf://Qwen/Qwen3-8B\n\
             dest:     bdn:weights/qwen3-8b:prod\n\
             include:  *.safetensors *.json\n\
             secret:   hf-token\n\
             progress: 3/7 files, 1.2 GiB of 15.3 GiB\n\
             stored:   800.0 MiB\n\
             reused:   2 files, 400.0 MiB (unchanged since an earlier sync, not read)\n\
             attempts: 1\n\
             retries:  0\n\
             created:  2026-12-02T18:40:00Z\n\
             started:  2026-12-02T18:40:01Z\n\
             finished: -\n\
             retrying: hf://Qwen/Qwen3-8B: HTTP 503, retrying in 4s\n"
        );
        let text = describe_text(&ready());
        assert!(
            text.contains(&format!(
                "\nversion:  bdn:weights/qwen3-8b@b3:{}\n",
                "ab".repeat(32)
            )),
            "{text}"
        );
        assert!(
            !text.contains("include:") && !text.contains("secret:"),
            "{text}"
        );
        let mut failed = running();
        failed.job.state = SyncState::Failed;
        failed.job.retrying = None;
        failed.job.error = Some(sync::JobError {
            code: "SOURCE_DENIED".into(),
            message: "hf://Qwen/Qwen3-8B: gated repository".into(),
        });
        let text = describe_text(&failed);
        assert!(
            text.ends_with("error:    SOURCE_DENIED: hf://Qwen/Qwen3-8B: gated repository\n"),
            "{text}"
        );
        let mut scheduled = ready();
        scheduled.job.schedule = Some("sched-0123456789abcdef".into());
        let text = describe_text(&scheduled);
        assert!(
            text.contains("\nschedule: sched-0123456789abcdef\n"),
            "{text}"
        );
    }

    #[test]
    fn list_is_a_table_newest_first_as_given() {
        let text = table(&[running(), ready()]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("ID                     STATE    SOURCE"));
        assert!(lines[1].starts_with("sync-0123456789abcdef  RUNNING  hf://Qwen/Qwen3-8B"));
        assert!(lines[2].starts_with("sync-00000000000000ff  READY    s3://bucket/models/x"));
        // Columns line up: CREATED starts at the same place everywhere.
        let at = lines[0].find("CREATED").unwrap();
        assert_eq!(&lines[1][at..], "2026-12-02T18:40:00Z");
        assert_eq!(&lines[2][at..], "2026-12-01T10:00:00Z");
        assert!(lines[1].contains("3/7 files, 1.2 GiB/15.3 GiB"), "{text}");
    }

    #[test]
    fn json_is_the_job_with_its_ref_first() {
        let v = serde_json::to_value(ready()).unwrap();
        assert_eq!(
            v["ref"],
            json!(format!("bdn:weights/qwen3-8b@b3:{}", "ab".repeat(32)))
        );
        assert_eq!(v["state"], json!("READY"));
        assert_eq!(v["dest"], json!({"name": "weights/qwen3-8b", "tag": null}));
        assert!(v.get("version").is_some() && v.get("error").is_some());
        let v = serde_json::to_value(running()).unwrap();
        assert_eq!(v["ref"], json!(null));
    }

    #[test]
    fn one_trailing_newline_is_stripped() {
        assert_eq!(strip_newline(b"tok\n".to_vec()), b"tok");
        assert_eq!(strip_newline(b"tok\r\n".to_vec()), b"tok");
        assert_eq!(strip_newline(b"tok\n\n".to_vec()), b"tok\n");
        assert_eq!(strip_newline(b"a:b".to_vec()), b"a:b");
        assert_eq!(strip_newline(b"\n".to_vec()), b"");
    }
}
