//! The web view's pages, as `maud` templates: every value a pusher chose
//! (names, tags, paths, sources) is escaped by `maud`, and no page holds
//! an inline script or style (`CSP` in `reply`).

use maud::{html, Markup, DOCTYPE};
use sealvol_spec::api::{self, Action, Lifecycle, SyncState};
use sealvol_spec::diff::Diff;
use sealvol_spec::TreeStats;

use crate::auth::Caller;

/// Who is looking, and what they may do to the repository of the page.
pub(crate) struct Who {
    pub subject: String,
    pub anonymous: bool,
    /// Whether the registry has users to log in as.
    pub logins: bool,
    pub actions: Vec<Action>,
}

impl Who {
    pub fn of(caller: &Caller, repository: Option<&str>) -> Who {
        Who {
            subject: caller.subject.name().to_string(),
            anonymous: matches!(caller.subject, crate::auth::policy::Subject::Anonymous),
            logins: caller.registry_authenticates(),
            actions: match repository {
                Some(r) => Action::ALL
                    .into_iter()
                    .filter(|a| caller.may(r, *a))
                    .collect(),
                None => Vec::new(),
            },
        }
    }

    fn may(&self, a: Action) -> bool {
        self.actions.contains(&a)
    }
}

/// A volume page's path.
fn volume_href(name: &str) -> String {
    format!("/ui/volumes/{}", crate::http::query::encode(name))
}

fn version_href(name: &str, digest: &str) -> String {
    format!(
        "{}/-/versions/{}",
        volume_href(name),
        crate::http::query::encode(digest)
    )
}

/// `b3:9f3c2a1b0d4e`: a digest short enough to read, the full one in a
/// tooltip and in every link.
fn short(digest: &str) -> &str {
    let end = digest.find(':').map_or(0, |i| i + 1) + 12;
    digest.get(..end).unwrap_or(digest)
}

/// Bytes as people read them.
pub(crate) fn human(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// The frame of every page.
fn layout(who: &Who, title: &str, body: Markup) -> Markup {
    framed(who, title, false, body)
}

/// The frame, reloading itself every 2 s with `refresh` (a running sync:
/// live progress without a script).
fn framed(who: &Who, title: &str, refresh: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                @if refresh { meta http-equiv="refresh" content="2"; }
                title { (title) " · sealvol" }
                link rel="icon" href="/ui/static/icon.svg" type="image/svg+xml";
                link rel="stylesheet" href="/ui/static/app.css";
                script type="module" src="/ui/static/app.js" {}
            }
            body {
                header.top {
                    nav aria-label="Main" {
                        a.brand href="/ui/" { "sealvol" }
                        a href="/ui/" { "Volumes" }
                        a href="/ui/syncs" { "Sync jobs" }
                    }
                    div.who {
                        @if who.anonymous {
                            @if who.logins {
                                a href="/ui/login" { "Log in" }
                            } @else {
                                span { "Open registry (no login)" }
                            }
                        } @else {
                            span { "Signed in as " strong { (who.subject) } }
                            form method="post" action="/ui/logout" {
                                button type="submit" { "Log out" }
                            }
                        }
                    }
                }
                main id="main" { (body) }
            }
        }
    }
}

pub(crate) fn error(who: &Who, status: axum::http::StatusCode, message: &str) -> Markup {
    layout(
        who,
        "Error",
        html! {
            h1 { (status.as_u16()) " " (status.canonical_reason().unwrap_or("")) }
            p.error role="alert" { (message) }
            p { a href="/ui/" { "Back to the volumes" } }
        },
    )
}

pub(crate) fn login(who: &Who, next: &str, message: Option<&str>) -> Markup {
    layout(
        who,
        "Log in",
        html! {
            h1 { "Log in" }
            @if let Some(m) = message {
                p.error role="alert" { (m) }
            }
            form.login method="post" action="/ui/login" {
                input type="hidden" name="next" value=(next);
                label for="username" { "User or API key id" }
                input id="username" name="username" type="text" autocomplete="username" required;
                label for="password" { "Password or API key secret" }
                input id="password" name="password" type="password" autocomplete="current-password" required;
                button type="submit" { "Log in" }
            }
        },
    )
}

pub(crate) fn volumes(
    who: &Who,
    filter: &str,
    namespaces: &[String],
    volumes: &[api::Volume],
    next: Option<&str>,
) -> Markup {
    layout(
        who,
        "Volumes",
        html! {
            h1 { "Volumes" }
            form.filter method="get" action="/ui/" role="search" {
                label for="q" { "Filter by name" }
                input id="q" name="q" type="search" value=(filter);
                button type="submit" { "Filter" }
            }
            @if !namespaces.is_empty() {
                nav.namespaces aria-label="Namespaces" {
                    "Namespaces: "
                    @for ns in namespaces {
                        a href={ "/ui/?q=" (crate::http::query::encode(&format!("{ns}/"))) } { (ns) } " "
                    }
                }
            }
            @if volumes.is_empty() {
                p { "No volume to show." @if who.anonymous && who.logins { " " a href="/ui/login" { "Log in" } " to see yours." } }
            } @else {
                table {
                    caption.visually-hidden { "Volumes you may pull" }
                    thead { tr {
                        th scope="col" { "Volume" } th scope="col" { "Head" } th scope="col" { "Tags" }
                        th scope="col" { "Versions" } th scope="col" { "Updated" }
                    } }
                    tbody {
                        @for v in volumes {
                            tr {
                                th scope="row" { a href=(volume_href(&v.name)) { (v.name) } }
                                td { @if let Some(h) = &v.head { code title=(h.digest) { (short(&h.digest.to_string())) } } @else { "–" } }
                                td { @for t in &v.tags { span.tag { (t.tag) } " " } }
                                td { (v.alive) " alive" @if v.tombstoned > 0 { ", " (v.tombstoned) " deleted" } @if v.untagged > 0 { ", " (v.untagged) " untagged" } }
                                td { (v.updated_at.as_deref().unwrap_or("")) }
                            }
                        }
                    }
                }
            }
            @if let Some(last) = next {
                p { a rel="next" href={ "/ui/?q=" (crate::http::query::encode(filter)) "&last=" (crate::http::query::encode(last)) } { "Next page" } }
            }
        },
    )
}

/// Seconds as "3 d 4 h" for the time left to restore.
fn left(secs: u64) -> String {
    let (d, h, m) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60);
    if d > 0 {
        format!("{d} d {h} h")
    } else if h > 0 {
        format!("{h} h {m} min")
    } else {
        format!("{m} min")
    }
}

fn unix_of(t: Option<&str>) -> Option<u64> {
    let at = humantime::parse_rfc3339_weak(t?).ok()?;
    Some(at.duration_since(std::time::UNIX_EPOCH).ok()?.as_secs())
}

pub(crate) fn volume(
    who: &Who,
    v: &api::Volume,
    stats: &api::VolumeStats,
    versions: &[api::Version],
    next: Option<&str>,
    now: u64,
) -> Markup {
    let saved = stats.logical_bytes.saturating_sub(stats.stored_bytes);
    layout(
        who,
        &v.name,
        html! {
            h1 { (v.name) }
            dl.facts {
                dt { "Head" } dd { @if let Some(h) = &v.head { a href=(version_href(&v.name, &h.digest.to_string())) { code { (h.digest) } } } @else { "none" } }
                dt { "Versions" } dd { (v.alive) " alive, " (v.tombstoned) " deleted, " (v.untagged) " untagged" }
                @if let Some(e) = &v.expires_at { dt { "Expires" } dd { (e) } }
            }
            @if !v.tags.is_empty() {
                h2 { "Tags" }
                table {
                    thead { tr { th scope="col" { "Tag" } th scope="col" { "Version" } th scope="col" { "Expires" } } }
                    tbody { @for t in &v.tags { tr {
                        th scope="row" { span.tag { (t.tag) } }
                        td { a href=(version_href(&v.name, &t.digest.to_string())) { code title=(t.digest) { (short(&t.digest.to_string())) } } }
                        td { (t.expires_at.as_deref().unwrap_or("never")) }
                    } } }
                }
            }
            h2 { "Storage" }
            p {
                (stats.versions) " kept versions hold " (human(stats.logical_bytes)) "; the registry stores "
                (human(stats.stored_bytes)) " of chunks for them (" (stats.chunks) " distinct)"
                @if stats.logical_bytes > 0 { ": deduplication saves " (human(saved)) "." }
            }
            div.bar {
                label for="stored" { "Stored / logical bytes" }
                meter id="stored" min="0" max=(stats.logical_bytes.max(1)) value=(stats.stored_bytes) {
                    (human(stats.stored_bytes)) " of " (human(stats.logical_bytes))
                }
            }
            h2 { "Versions" }
            @if versions.len() >= 2 {
                form.diff method="get" action={ (volume_href(&v.name)) "/-/diff" } {
                    label for="diff-a" { "Compare" }
                    select id="diff-a" name="a" { @for x in versions.iter().skip(1) { option value=(x.digest) { (x.sequence) " · " (short(&x.digest.to_string())) } } }
                    label for="diff-b" { "with" }
                    select id="diff-b" name="b" { @for x in versions { option value=(x.digest) { (x.sequence) " · " (short(&x.digest.to_string())) } } }
                    button type="submit" { "Show the diff" }
                }
            }
            ol.timeline {
                @for x in versions {
                    li class=(if x.lifecycle == Lifecycle::Tombstoned { "deleted" } else { "alive" }) {
                        a href=(version_href(&v.name, &x.digest.to_string())) { "#" (x.sequence) " " code title=(x.digest) { (short(&x.digest.to_string())) } }
                        " · " (x.created_at.as_deref().unwrap_or(""))
                        " · " (x.files.unwrap_or(0)) " files, " (human(x.size.unwrap_or(0)))
                        @if x.is_head { " " span.tag.head { "head" } }
                        @for t in &x.tags { " " span.tag { (t) } }
                        @if x.lifecycle == Lifecycle::Tombstoned {
                            @let until = unix_of(x.restorable_until.as_deref());
                            " · deleted"
                            @if let Some(u) = until.filter(|u| *u > now) {
                                ", restorable for " (left(u - now))
                                @if who.may(Action::Delete) {
                                    form.inline method="post" action={ (version_href(&v.name, &x.digest.to_string())) "/restore" } {
                                        button type="submit" { "Restore" }
                                    }
                                }
                            } @else { ", no longer restorable" }
                        }
                    }
                }
            }
            @if let Some(last) = next {
                p { a rel="next" href={ (volume_href(&v.name)) "?last=" (crate::http::query::encode(last)) } { "Older versions" } }
            }
        },
    )
}

/// What a version page shows.
pub(crate) struct VersionView<'a> {
    pub who: &'a Who,
    /// The registry as the browser reached it (`HOST[:PORT]`).
    pub host: &'a str,
    pub name: &'a str,
    pub version: &'a api::Version,
    pub stats: &'a TreeStats,
    pub dir: &'a str,
    pub entries: &'a [api::EntryInfo],
    pub next: Option<&'a str>,
    /// The volume's other alive versions, to compare with.
    pub others: &'a [api::Version],
}

/// A command with its copy button.
fn command(label: &str, id: &str, text: &str) -> Markup {
    html! {
        div.command {
            span id={ (id) "-label" } { (label) }
            pre { code id=(id) { (text) } }
            button.copy type="button" data-copy=(id) aria-describedby={ (id) "-label" } { "Copy" }
        }
    }
}

pub(crate) fn version(v: &VersionView<'_>) -> Markup {
    let digest = v.version.digest.to_string();
    let reference = format!("{}/{}@{}", v.host, v.name, digest);
    let oci = format!("{}/{}@{}", v.host, v.name, v.version.index_digest);
    let mount_at = format!("/mnt/{}", v.name);
    let yaml = format!("bdn:\n  mounts:\n    - source: {reference}\n      path: {mount_at}\n");
    let k8s = format!(
        "volumes:\n  - name: {vol}\n    image:\n      reference: {oci}\n      pullPolicy: IfNotPresent\n",
        vol = v.name.rsplit('/').next().unwrap_or("weights")
    );
    let here = version_href(v.name, &digest);
    let deleted = v.version.lifecycle == Lifecycle::Tombstoned;
    layout(
        v.who,
        &format!("{} {}", v.name, short(&digest)),
        html! {
            p.crumbs { a href=(volume_href(v.name)) { (v.name) } " / version #" (v.version.sequence) }
            h1 { "Version " code { (short(&digest)) } }
            dl.facts {
                dt { "Pinned ref" } dd { code id="pinned" { (reference) } }
                dt { "OCI index" } dd { code { (v.version.index_digest) } }
                dt { "Created" } dd { (v.version.created_at.as_deref().unwrap_or("")) }
                dt { "Content" } dd { (v.stats.files) " files, " (v.stats.dirs) " directories, " (human(v.stats.bytes)) "; " (v.stats.unique_chunks) " distinct chunks" }
                @if !v.version.tags.is_empty() { dt { "Tags" } dd { @for t in &v.version.tags { span.tag { (t) } " " } } }
                @if deleted { dt { "State" } dd { "deleted (restore it from the volume's page)" } }
            }
            h2 { "Use it" }
            (command("Pull into a folder", "cmd-pull", &format!("sealvol pull {reference} ./{}", v.name.rsplit('/').next().unwrap_or("out"))))
            (command("Mount read-only", "cmd-mount", &format!("sealvol mount {reference} {mount_at}")))
            (command("config.yaml of a deployment", "cmd-yaml", &yaml))
            (command("Kubernetes image volume (the OCI index)", "cmd-k8s", &k8s))
            @if !deleted && (v.who.may(Action::Push) || v.who.may(Action::Delete)) {
                h2 { "Actions" }
                @if v.who.may(Action::Push) {
                    form.inline method="post" action={ (volume_href(v.name)) "/-/tags" } {
                        input type="hidden" name="digest" value=(digest);
                        label for="tag" { "Point tag" }
                        input id="tag" name="tag" type="text" required pattern="[A-Za-z0-9_][A-Za-z0-9._\\-]{0,127}";
                        button type="submit" { "at this version" }
                    }
                }
                @if v.who.may(Action::Delete) {
                    p { a.button.danger href={ (here) "/delete" } { "Delete this version…" } }
                }
            }
            @if !v.others.is_empty() {
                h2 { "Compare" }
                ul { @for o in v.others.iter().take(5) {
                    li { a href={ (volume_href(v.name)) "/-/diff?a=" (crate::http::query::encode(&o.digest.to_string())) "&b=" (crate::http::query::encode(&digest)) } {
                        "What changed since #" (o.sequence) " " code { (short(&o.digest.to_string())) }
                    } }
                } }
            }
            h2 { "Files" @if !v.dir.is_empty() { " in " code { (v.dir) } } }
            @if !v.dir.is_empty() {
                @let up = v.dir.rsplit_once('/').map_or("", |(p, _)| p);
                p { a href={ (here) "?path=" (crate::http::query::encode(up)) } { "↑ Parent folder" } }
            }
            table.files {
                thead { tr { th scope="col" { "Name" } th scope="col" { "Kind" } th scope="col" { "Mode" } th scope="col" { "Size" } } }
                tbody {
                    @for e in v.entries {
                        @let name = e.path.rsplit('/').next().unwrap_or(&e.path);
                        tr {
                            th scope="row" {
                                @if e.kind == api::EntryKind::Dir {
                                    a href={ (here) "?path=" (crate::http::query::encode(&e.path)) } { (name) "/" }
                                } @else {
                                    (name)
                                    @if let Some(t) = &e.target { " → " (t) }
                                }
                            }
                            td { (e.kind) }
                            td { code { (e.mode) } }
                            td { @if e.kind == api::EntryKind::File { (human(e.size)) } }
                        }
                    }
                }
            }
            @if let Some(last) = v.next {
                p { a rel="next" href={ (here) "?path=" (crate::http::query::encode(v.dir)) "&last=" (crate::http::query::encode(last)) } { "More files" } }
            }
        },
    )
}

pub(crate) fn confirm_delete(who: &Who, name: &str, v: &api::Version, retention: u64) -> Markup {
    let digest = v.digest.to_string();
    layout(
        who,
        "Delete a version",
        html! {
            h1 { "Delete version " code { (short(&digest)) } " of " (name) "?" }
            p {
                "Its tags are removed and it leaves the OCI view; "
                @if v.is_head { "head moves to the newest version left. " }
                "It can be restored for " (left(retention)) "."
            }
            form method="post" action={ (version_href(name, &digest)) "/delete" } {
                button.danger type="submit" { "Delete the version" }
                " "
                a href=(version_href(name, &digest)) { "Cancel" }
            }
        },
    )
}

fn entry_list(title: &str, entries: &[api::EntryInfo]) -> Markup {
    html! {
        @if !entries.is_empty() {
            h2 { (title) " (" (entries.len()) ")" }
            ul.paths { @for e in entries.iter().take(1000) { li { code { (e.path) } " " (e.kind) @if e.kind == api::EntryKind::File { ", " (human(e.size)) } } } }
            @if entries.len() > 1000 { p { "… and " (entries.len() - 1000) " more" } }
        }
    }
}

pub(crate) fn diff(who: &Who, name: &str, a: &str, b: &str, d: &Diff) -> Markup {
    let shared = format!("{:.1}", d.shared_chunk_fraction * 100.0);
    let fraction = format!("{:.6}", d.shared_chunk_fraction);
    layout(
        who,
        "Diff",
        html! {
            p.crumbs { a href=(volume_href(name)) { (name) } " / diff" }
            h1 { "From " a href=(version_href(name, a)) { code { (short(a)) } } " to " a href=(version_href(name, b)) { code { (short(b)) } } }
            p.summary {
                (d.added.len()) " added (" (human(d.bytes_added)) "), "
                (d.removed.len()) " removed (" (human(d.bytes_removed)) "), "
                (d.changed.len()) " changed, " (d.unchanged_files) " files unchanged."
            }
            div.bar {
                label for="shared" { "Chunk bytes in common" }
                meter id="shared" min="0" max="1" value=(fraction) { (shared) "%" }
                span { " " (shared) "% of the second version's chunk bytes are in the first; " (human(d.new_chunk_bytes)) " are new." }
            }
            @if !d.changed.is_empty() {
                h2 { "Changed (" (d.changed.len()) ")" }
                table {
                    thead { tr { th scope="col" { "Path" } th scope="col" { "Before" } th scope="col" { "After" } } }
                    tbody { @for c in d.changed.iter().take(1000) { tr {
                        th scope="row" { code { (c.path) } }
                        td { (c.from.kind) " " (c.from.mode) " " (human(c.from.size)) }
                        td { (c.to.kind) " " (c.to.mode) " " (human(c.to.size)) }
                    } } }
                }
            }
            (entry_list("Added", &d.added))
            (entry_list("Removed", &d.removed))
        },
    )
}

fn state_class(s: SyncState) -> &'static str {
    match s {
        SyncState::Ready => "ok",
        SyncState::Failed => "failed",
        SyncState::Canceled => "canceled",
        SyncState::Queued | SyncState::Running => "running",
    }
}

fn finished(s: SyncState) -> bool {
    matches!(
        s,
        SyncState::Ready | SyncState::Failed | SyncState::Canceled
    )
}

fn progress(p: &api::SyncProgress) -> Markup {
    html! {
        (p.files_done) " / " (p.files_total) " files, " (human(p.bytes_done)) " / " (human(p.bytes_total))
    }
}

/// A schedule's last run, as one cell: its job, state and when it ended.
fn last_run(s: &api::SyncSchedule) -> Markup {
    html! {
        @if let Some(j) = &s.last_run {
            a href={ "/ui/syncs/" (crate::http::query::encode(&j.id)) } { (j.id) }
            " " span class={ "state " (state_class(j.state)) } { (j.state.as_str()) }
            @if let Some(f) = &j.finished_at { " " (f) }
        } @else {
            "none yet"
        }
    }
}

pub(crate) fn syncs(who: &Who, schedules: &[api::SyncSchedule], jobs: &[api::SyncJob]) -> Markup {
    layout(
        who,
        "Sync jobs",
        html! {
            h1 { "Sync jobs" }
            @if !schedules.is_empty() {
                h2 { "Schedules" }
                table.schedules {
                    thead { tr { th scope="col" { "Schedule" } th scope="col" { "Source" } th scope="col" { "Destination" } th scope="col" { "Every" } th scope="col" { "Next run" } th scope="col" { "Last run" } } }
                    tbody { @for s in schedules { tr {
                        th scope="row" { (s.id) }
                        td { code { (s.sync.source) } }
                        td { a href=(volume_href(&s.sync.dest.name)) { (s.sync.dest.name) } @if let Some(t) = &s.sync.dest.tag { ":" (t) } }
                        td { (s.every) }
                        td { @if s.paused { "paused" } @else { (s.next_run_at.as_deref().unwrap_or("")) } }
                        td { (last_run(s)) }
                    } } }
                }
                h2 { "Jobs" }
            }
            @if !who.anonymous || !who.logins {
                details {
                    summary { "Start a sync" }
                    form.sync method="post" action="/ui/syncs" {
                        label for="source" { "Source (hf://, s3://, gs://, az://, dir://, oci://)" }
                        input id="source" name="source" type="text" required placeholder="hf://Qwen/Qwen3-8B";
                        label for="dest" { "Destination volume" }
                        input id="dest" name="dest" type="text" required placeholder="weights/qwen3-8b";
                        label for="dest-tag" { "Tag (optional)" }
                        input id="dest-tag" name="tag" type="text";
                        label for="secret" { "Secret (optional)" }
                        input id="secret" name="secret" type="text";
                        button type="submit" { "Start" }
                    }
                }
            }
            @if jobs.is_empty() {
                p { "No sync job to show." }
            } @else {
                table {
                    thead { tr { th scope="col" { "Job" } th scope="col" { "State" } th scope="col" { "Source" } th scope="col" { "Destination" } th scope="col" { "Progress" } th scope="col" { "Created" } } }
                    tbody { @for j in jobs { tr {
                        th scope="row" { a href={ "/ui/syncs/" (crate::http::query::encode(&j.id)) } { (j.id) } }
                        td { span class={ "state " (state_class(j.state)) } { (j.state.as_str()) } }
                        td { code { (j.source) } }
                        td { a href=(volume_href(&j.dest.name)) { (j.dest.name) } @if let Some(t) = &j.dest.tag { ":" (t) } }
                        td { (progress(&j.progress)) }
                        td { (j.created_at.as_deref().unwrap_or("")) }
                    } } }
                }
            }
        },
    )
}

pub(crate) fn sync(who: &Who, j: &api::SyncJob) -> Markup {
    let done = finished(j.state);
    framed(
        who,
        &j.id,
        !done,
        html! {
                p.crumbs { a href="/ui/syncs" { "Sync jobs" } " / " (j.id) }
                h1 { "Sync " (j.id) }
                p { span class={ "state " (state_class(j.state)) } role="status" id="state" { (j.state.as_str()) } }
                dl.facts {
                    dt { "Source" } dd { code { (j.source) } }
                    @if let Some(p) = &j.pinned_source { dt { "Pinned" } dd { code { (p) } } }
                    @if let Some(s) = &j.schedule { dt { "Schedule" } dd { (s) } }
                    dt { "Destination" } dd { a href=(volume_href(&j.dest.name)) { (j.dest.name) } @if let Some(t) = &j.dest.tag { ":" (t) } }
                    dt { "Progress" } dd { (progress(&j.progress)) }
                    @if let Some(r) = &j.retrying { dt { "Retrying" } dd { (r) } }
                    @if let Some(v) = &j.version { dt { "Version" } dd { a href=(version_href(&j.dest.name, &v.digest.to_string())) { code { (v.digest) } } } }
                    @if let Some(e) = &j.error { dt { "Error" } dd.error { code { (e.code) } " " (e.message) } }
                    dt { "Created" } dd { (j.created_at.as_deref().unwrap_or("")) }
                    @if let Some(f) = &j.finished_at { dt { "Finished" } dd { (f) } }
                }
                div.bar {
                    label for="sync-progress" { "Bytes copied" }
                    progress id="sync-progress" max=(j.progress.bytes_total.max(1)) value=(j.progress.bytes_done) { (human(j.progress.bytes_done)) }
                }
                @if !done && who.may(Action::Push) {
                    form method="post" action={ "/ui/syncs/" (crate::http::query::encode(&j.id)) "/cancel" } {
                        button.danger type="submit" { "Cancel the sync" }
                    }
                }
        },
    )
}
