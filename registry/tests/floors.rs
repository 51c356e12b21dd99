//! The registry's floors hold: imports run one way, and no files import
//! each other (`../shared/design/registry.md`, "The rule").
//!
//! ```text
//! server, migrate, config, lib   the assembly: may use every floor
//! http     → service, auth, state
//! service  → auth, state, store
//! auth     → store
//! state    → store
//! store    → (nothing above)
//! error, clock                   under all of them
//! ```
//!
//! The check reads `crate::`, `super::` and child-module paths in every
//! file of `registry/src` outside its `#[cfg(test)]` module, resolves each
//! to the file that defines the module, and fails on an arrow that points
//! up (or sideways where the rule has none) and on any cycle of files.
//! `cargo test -p sealvol-registry --test floors -- --nocapture` prints
//! the graph's summary.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// A file of the crate: its module path (`["http", "oci"]`) and its text
/// with the test module cut off.
struct File {
    module: Vec<String>,
    rel: String,
    code: String,
}

fn files() -> Vec<File> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(read(&root, &path));
            }
        }
    }
    out.sort_by(|a, b| a.rel.cmp(&b.rel));
    out
}

fn read(root: &Path, path: &PathBuf) -> File {
    let rel = path
        .strip_prefix(root)
        .unwrap()
        .to_string_lossy()
        .into_owned();
    let mut module: Vec<String> = rel
        .trim_end_matches(".rs")
        .split('/')
        .map(str::to_owned)
        .collect();
    if matches!(module.last().map(String::as_str), Some("mod" | "lib")) {
        module.pop();
    }
    let text = std::fs::read_to_string(path).unwrap();
    // Test modules sit at the end of their file; what they import is
    // theirs, not the floor's.
    let code = match text.find("\n#[cfg(test)]\nmod tests") {
        Some(at) => text[..at].to_owned(),
        None => text,
    };
    let code = code
        .lines()
        .map(|l| match l.find("//") {
            Some(at) => &l[..at],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    File { module, rel, code }
}

/// The floor a module belongs to, by its first segment.
fn floor(module: &[String]) -> &'static str {
    match module.first().map(String::as_str) {
        None | Some("server" | "migrate" | "config") => "assembly",
        Some("http") => "http",
        Some("service") => "service",
        Some("auth") => "auth",
        Some("state") => "state",
        Some("store") => "store",
        Some("error" | "clock") => "base",
        Some(other) => panic!("registry/src/{other}: a file outside the floors"),
    }
}

fn may_import(from: &str, to: &str) -> bool {
    from == to
        || to == "base"
        || matches!(
            (from, to),
            ("assembly", _)
                | ("http", "service" | "auth" | "state")
                | ("service", "auth" | "state" | "store")
                | ("auth", "store")
                | ("state", "store")
        )
}

/// Every path the file names, as module segments from the crate root.
fn paths(file: &File, modules: &BTreeSet<Vec<String>>) -> BTreeSet<Vec<String>> {
    let mut out = BTreeSet::new();
    let code = &file.code;
    // `use` trees, expanded: `use crate::{a::X, b::{c, d}}`.
    let mut rest = code.as_str();
    while let Some(at) = find_use(rest) {
        let tail = &rest[at..];
        let end = tail.find(';').unwrap_or(tail.len());
        let tree: String = tail[..end]
            .replace(" as ", "@")
            .split_whitespace()
            .collect();
        // `pub use child::Item` re-exports what a child defines: the
        // parent's code does not depend on it.
        let before = rest[..at - 4].trim_end();
        let public = before.ends_with("pub") || before.ends_with("pub(crate)");
        expand(&tree, &mut Vec::new(), &mut |p| {
            if let Some(abs) = absolute(file, p, modules) {
                let child = abs.len() > file.module.len() && abs.starts_with(&file.module);
                if !(public && child) {
                    out.insert(abs);
                }
            }
        });
        rest = &tail[end..];
    }
    // Paths written inline: `crate::a::b::f(..)`, `super::x`, and
    // `child::f(..)` for a module this file declares.
    let children: Vec<String> = modules
        .iter()
        .filter(|m| m.len() == file.module.len() + 1 && m.starts_with(&file.module))
        .map(|m| format!("{}::", m[m.len() - 1]))
        .collect();
    let starts = ["crate::".to_owned(), "super::".to_owned()];
    // `use` items were read above; blank them so their paths are not
    // read again as inline ones (a `pub use child::X` is no import).
    let mut code = code.clone();
    let mut from = 0;
    while let Some(at) = find_use(&code[from..]) {
        let at = from + at;
        let end = code[at..].find(';').map_or(code.len(), |e| at + e);
        code.replace_range(at..end, &" ".repeat(end - at));
        from = end;
    }
    for start in starts.iter().chain(&children) {
        let mut from = 0;
        while let Some(at) = code[from..].find(start) {
            let at = from + at;
            from = at + start.len();
            if code[from..].starts_with('{') {
                continue; // a `use` tree, read above
            }
            let before = code[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue; // the tail of a longer path or name
            }
            let segs: Vec<String> = code[at..]
                .split(|c: char| !(c.is_alphanumeric() || c == '_' || c == ':'))
                .next()
                .unwrap()
                .split("::")
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .collect();
            if let Some(abs) = absolute(file, segs, modules) {
                out.insert(abs);
            }
        }
    }
    out
}

/// The offset of the next `use` item's path in `s`.
fn find_use(s: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(at) = s[from..].find("use ") {
        let at = from + at;
        let before = s[..at].chars().next_back();
        if before.is_none_or(|c| c.is_whitespace() || c == '{' || c == ';') {
            return Some(at + 4);
        }
        from = at + 4;
    }
    None
}

fn expand(tree: &str, prefix: &mut Vec<String>, emit: &mut dyn FnMut(Vec<String>)) {
    let tree = tree
        .trim_start_matches("pub(crate)")
        .trim_start_matches("pub");
    let (head, group) = match tree.find("::{") {
        Some(at) if tree.ends_with('}') => (&tree[..at], Some(&tree[at + 3..tree.len() - 1])),
        _ => (tree, None),
    };
    let head = head.split('@').next().unwrap();
    let depth = prefix.len();
    if head.len() > 1 && head.starts_with('{') && head.ends_with('}') && group.is_none() {
        // `use {a, b}`: a bare group.
        for item in split_top(&head[1..head.len() - 1]) {
            expand(item, prefix, emit);
        }
        return;
    }
    prefix.extend(
        head.split("::")
            .filter(|s| !s.is_empty() && *s != "self" && *s != "*")
            .map(str::to_owned),
    );
    match group {
        Some(g) => {
            for item in split_top(g) {
                expand(item, prefix, emit);
            }
        }
        None => emit(prefix.clone()),
    }
    prefix.truncate(depth);
}

fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out.into_iter().filter(|s| !s.is_empty()).collect()
}

/// Resolves a path to the deepest module it names, or `None` when it
/// leaves the crate (another crate, std, a local item).
fn absolute(
    file: &File,
    segs: Vec<String>,
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let mut segs = segs.into_iter();
    let mut base = match segs.next()?.as_str() {
        "crate" => Vec::new(),
        "super" => {
            let mut m = file.module.clone();
            m.pop();
            m
        }
        first => {
            // A child module declared in this file: `use postgres::Pg`.
            let mut m = file.module.clone();
            m.push(first.to_owned());
            if !modules.contains(&m) {
                return None;
            }
            m
        }
    };
    for s in segs {
        if s == "super" {
            base.pop();
            continue;
        }
        base.push(s);
        if !modules.contains(&base) {
            base.pop();
            break;
        }
    }
    Some(base)
}

struct Graph {
    edges: BTreeMap<String, BTreeSet<String>>,
    up: Vec<String>,
}

fn graph() -> Graph {
    let files = files();
    let modules: BTreeSet<Vec<String>> = files.iter().map(|f| f.module.clone()).collect();
    let by_module: BTreeMap<&Vec<String>, &File> = files.iter().map(|f| (&f.module, f)).collect();
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut up = Vec::new();
    for file in &files {
        let targets = edges.entry(file.rel.clone()).or_default();
        for target in paths(file, &modules) {
            if target == file.module {
                continue;
            }
            let to = by_module[&target];
            targets.insert(to.rel.clone());
            let (a, b) = (floor(&file.module), floor(&to.module));
            if !may_import(a, b) {
                up.push(format!(
                    "{} → {} ({a} may not import {b})",
                    file.rel, to.rel
                ));
            }
        }
    }
    up.sort();
    up.dedup();
    Graph { edges, up }
}

/// Strongly connected components with more than one file (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let n = t.index.len();
        t.index.insert(v, n);
        t.low.insert(v, n);
        t.stack.push(v);
        t.on.insert(v);
        for w in t.edges.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !t.index.contains_key(w) {
                visit(t, w);
                let l = t.low[w].min(t.low[v]);
                t.low.insert(v, l);
            } else if t.on.contains(w) {
                let l = t.index[w].min(t.low[v]);
                t.low.insert(v, l);
            }
        }
        if t.low[v] == t.index[v] {
            let mut scc = Vec::new();
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                scc.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if scc.len() > 1 {
                scc.sort();
                t.out.push(scc);
            }
        }
    }
    let mut t = T {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out.sort();
    t.out
}

#[test]
fn imports_run_one_way_and_no_files_import_each_other() {
    let g = graph();
    let circles = cycles(&g.edges);
    let arrows: usize = g.edges.values().map(BTreeSet::len).sum();
    let root = g.edges.keys().filter(|f| !f.contains('/')).count();
    println!(
        "{} files ({root} at the root), {arrows} arrows, {} up, {} circles",
        g.edges.len(),
        g.up.len(),
        circles.len()
    );
    for a in &g.up {
        println!("up: {a}");
    }
    for c in &circles {
        println!("circle: {}", c.join(" ⇄ "));
    }
    assert!(
        g.up.is_empty() && circles.is_empty(),
        "the registry's floors are broken: {} arrows up, {} circles (listed above)",
        g.up.len(),
        circles.len()
    );
}

#[test]
fn the_check_sees_what_it_must() {
    // The parser itself: a grouped use, an inline path, a child module.
    let file = File {
        module: vec!["store".into(), "meta".into()],
        rel: "store/meta/mod.rs".into(),
        code: "use crate::{http::{access, oci::Route}, error::X};\nuse engine::g;\nfn f() { crate::state::app::App::f(); }\nfn h() { engine::k(); }"
            .into(),
    };
    let modules: BTreeSet<Vec<String>> = [
        vec![],
        vec!["http".into()],
        vec!["http".into(), "access".into()],
        vec!["http".into(), "oci".into()],
        vec!["error".into()],
        vec!["state".into()],
        vec!["state".into(), "app".into()],
        vec!["store".into(), "meta".into()],
        vec!["store".into(), "meta".into(), "engine".into()],
    ]
    .into_iter()
    .collect();
    let got: Vec<String> = paths(&file, &modules)
        .into_iter()
        .map(|m| m.join("::"))
        .collect();
    assert_eq!(
        got,
        [
            "error",
            "http::access",
            "http::oci",
            "state::app",
            "store::meta::engine"
        ]
    );
    assert!(!may_import("store", "http") && !may_import("auth", "state"));
    assert!(may_import("http", "service") && may_import("service", "store"));
    let edges: BTreeMap<String, BTreeSet<String>> = [
        ("a".to_owned(), ["b".to_owned()].into()),
        ("b".to_owned(), ["a".to_owned()].into()),
        ("c".to_owned(), BTreeSet::new()),
    ]
    .into_iter()
    .collect();
    assert_eq!(cycles(&edges), vec![vec!["a".to_owned(), "b".to_owned()]]);
}
