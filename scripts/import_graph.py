#!/usr/bin/env python3
"""File-level import graph of one Rust crate, and the import circles in it.

Usage: python3 scripts/import_graph.py client/src

Reads every .rs file under the given src directory and draws an edge from a
file to the file that defines each `crate::...`, `super::...` or `self::...`
path it names, in `use` items (grouped forms such as
`use crate::{a::X, b::{Y, Z}}` included) and in code, and each path that
starts with the plain name of one of the file's child modules (`admin::run()`
in a main.rs that declares `mod admin;`). Comments and string literals are
ignored, and so is test code: everything after a line that starts (column 0)
with `#[cfg(test)]`. A main.rs beside a lib.rs is a crate of its own and has
no edges.

A path maps to the file of the deepest module it names that exists as a file
(`a/b.rs` or `a/b/mod.rs`, else `a.rs` or `a/mod.rs`, ..., else the crate
root, `lib.rs` or `main.rs`); see `Crate.module_file`. When the name after
that module is brought in by a `use` item of the module's file (`pub use
remote::Remote;` in lib.rs, or a private `use` a descendant can see), the
path follows it to the file that defines the name, so `crate::Remote`
counts as an import of remote.rs. A `pub use`
of a file's own submodules (that same line in lib.rs) is not an edge:
re-exporting is fine, defining is what counts. A private `use` of a child
module by its plain name (`use remote::Remote;` in lib.rs) is an edge.

Prints each file's imports, then every circle: strongly connected components
of more than one file, and each pair of files that import each other, with
the paths that make each edge. Exits 1 if there is a circle, 0 if not.
"""

import argparse
import os
import re
import signal
import sys
from collections import defaultdict

CFG_TEST = re.compile(r"^#\[cfg\(test\)\]")
IDENT = r"[A-Za-z_][A-Za-z0-9_]*"
# A path in code that may start with a child module's plain name
# (`admin::run(...)` in main.rs); it counts only if that child exists.
BARE_PATH = re.compile(r"(?<![\w:$.'])(%s)((?:\s*::\s*%s)+)" % (IDENT, IDENT))
# A `use` item: optional visibility, `use`, the tree, `;`.
USE_ITEM = re.compile(
    r"(?<![\w:])((?:pub(?:\s*\([^)]*\))?\s+)?)use\s+([^;]*);", re.S
)


def strip_comments_and_strings(text):
    """`text` with comments removed and string/char literals emptied.

    Line structure is kept (newlines stay), so a `#[cfg(test)]` cut can run
    on the result.
    """
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        nxt = text[i + 1] if i + 1 < n else ""
        if c == "/" and nxt == "/":
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif c == "/" and nxt == "*":
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    if text[i] == "\n":
                        out.append("\n")
                    i += 1
        elif c == "r" and re.match(r'r#*"', text[i:i + 260]) and not (
            ident_before(text, i) and not (text[i - 1] == "b" and not ident_before(text, i - 1))
        ):
            m = re.match(r'r(#*)"', text[i:])
            end = text.find('"' + m.group(1), i + len(m.group(0)))
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif c == "'":
            # A char literal ('a', '\n', '\u{1F600}'), else a lifetime.
            m = re.match(r"'(\\(u\{[0-9a-fA-F]+\}|x[0-9a-fA-F]{2}|.)|[^\\'])'", text[i:i + 12])
            if m:
                out.append("' '")
                i += len(m.group(0))
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def ident_before(text, i):
    """Whether the character before `text[i]` belongs to an identifier."""
    return i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_")


def non_test_part(text):
    """The lines of `text` before the first column-0 `#[cfg(test)]`."""
    lines = text.split("\n")
    for k, line in enumerate(lines):
        if CFG_TEST.match(line):
            return "\n".join(lines[:k])
    return text


def split_top(s):
    """Split `s` on commas that are not inside braces."""
    parts, depth, start = [], 0, 0
    for k, ch in enumerate(s):
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(s[start:k])
            start = k + 1
    parts.append(s[start:])
    return parts


class Crate:
    """The .rs files under one src directory and their module paths."""

    def __init__(self, src):
        self.src = os.path.normpath(src)
        # path relative to src -> its text without comments, strings, tests
        self.files = {}
        for dirpath, _, names in os.walk(self.src):
            for name in sorted(names):
                if name.endswith(".rs"):
                    path = os.path.join(dirpath, name)
                    rel = os.path.relpath(path, self.src)
                    with open(path, encoding="utf-8") as f:
                        clean = strip_comments_and_strings(f.read())
                    self.files[rel] = non_test_part(clean)
        if "lib.rs" in self.files:
            self.root = "lib.rs"
        elif "main.rs" in self.files:
            self.root = "main.rs"
        else:
            sys.exit(f"{src}: neither lib.rs nor main.rs")
        self._imported = {}

    def module_of(self, rel):
        """The module path (list of names) that file `rel` holds."""
        if rel in ("lib.rs", "main.rs"):
            return []
        parts = rel[:-3].split(os.sep)
        if parts[-1] == "mod":
            parts = parts[:-1]
        return parts

    def module_file(self, segments):
        """The file of the deepest module named by a prefix of `segments`
        (the crate-relative path, without `crate`), and how many segments
        that module used: `a::b::Thing` is `a/b.rs` or `a/b/mod.rs` (2),
        else `a.rs` or `a/mod.rs` (1), else the crate root (0)."""
        for k in range(len(segments), 0, -1):
            base = os.path.join(*segments[:k])
            for cand in (base + ".rs", os.path.join(base, "mod.rs")):
                if cand in self.files:
                    return cand, k
        return self.root, 0

    def imported_names(self, rel):
        """Names the `use` items of file `rel` bring into its module, public
        or not (a private one is visible to the module's descendants):
        name -> absolute path (list)."""
        if rel not in self._imported:
            found = {}
            module = self.module_of(rel)
            for m in USE_ITEM.finditer(self.files[rel]):
                for path, alias in expand_use_tree(m.group(2)):
                    absolute = self.absolute(path, module, relative_ok=True)
                    if absolute is not None and path[-1] != "*":
                        found[alias or path[-1]] = absolute
            self._imported[rel] = found
        return self._imported[rel]

    def absolute(self, path, module, relative_ok=False):
        """`path` as crate-relative segments, from a file of module `module`,
        or None when it leaves the crate. With `relative_ok`, a path that
        starts with a plain name is taken as relative to `module` if such a
        child module exists (2018 `use child::Item;`)."""
        path = list(path)
        if not path:
            return None
        if path[0] == "crate":
            return path[1:]
        if path[0] in ("self", "super"):
            base = list(module)
            while path and path[0] in ("self", "super"):
                if path.pop(0) == "super":
                    if not base:
                        return None
                    base.pop()
            return base + path
        if relative_ok:
            _, used = self.module_file(module + path[:1])
            if used == len(module) + 1:
                return module + path
        return None

    def resolve(self, segments, seen=None):
        """The file that defines crate path `segments`, following the `use`
        items (re-exports) of the module file the path stops in."""
        rel, used = self.module_file(segments)
        rest = segments[used:]
        if rest and rest[0] != "*":
            seen = seen or set()
            key = (rel, rest[0])
            target = self.imported_names(rel).get(rest[0])
            if target is not None and key not in seen:
                seen.add(key)
                return self.resolve(target + rest[1:], seen)
        return rel

    def imports(self, rel):
        """file -> set of paths (as written) that import it, for `rel`."""
        text = self.files[rel]
        module = self.module_of(rel)
        out = defaultdict(set)
        if rel == "main.rs" and self.root == "lib.rs":
            return out  # a main.rs beside lib.rs is a crate of its own

        def add(path):
            absolute = self.absolute(path, module, relative_ok=True)
            if absolute is None:
                return
            target = self.resolve(absolute)
            if target != rel:
                out[target].add("::".join(path))

        for m in USE_ITEM.finditer(text):
            public = bool(m.group(1).strip())
            for path, _ in expand_use_tree(m.group(2)):
                absolute = self.absolute(path, module, relative_ok=True)
                if absolute is None:
                    continue
                if public and absolute[: len(module)] == module:
                    continue  # re-exporting from one's own submodules is fine
                add(path)
        code = USE_ITEM.sub(" ", text)
        for m in BARE_PATH.finditer(code):
            path = [m.group(1)] + [p for p in re.split(r"\s*::\s*", m.group(2)) if p]
            add(path)
        return out


def expand_use_tree(tree):
    """Every full path in a use tree, with its `as` name or None:
    `a::{b, c::{self as e, *}}` gives `a::b`, `a::c` (as e), `a::c::*`."""
    tree = re.sub(r"\s+as\s+", " as ", tree.strip())
    tree = re.sub(r"\s*(::|,|\{|\})\s*", r"\1", tree)
    result = []

    def walk(prefix, s):
        brace = s.find("{")
        if brace < 0:
            alias = None
            if " as " in s:
                s, alias = s.split(" as ", 1)
            full = prefix + [p for p in s.split("::") if p]
            if full and full[-1] == "self":
                full = full[:-1]
            if full:
                result.append((full, alias))
            return
        head = [p for p in s[:brace].split("::") if p]
        inner = s[brace + 1:s.rindex("}")]
        for part in split_top(inner):
            if part.strip():
                walk(prefix + head, part.strip())

    walk([], tree)
    return result


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan)."""
    index, low, on, stack, comps = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(comps)


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under `| head`
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("src", help="a crate's src directory, e.g. client/src")
    args = ap.parse_args()

    crate = Crate(args.src)
    edges = {rel: crate.imports(rel) for rel in sorted(crate.files)}
    graph = {rel: set(e) for rel, e in edges.items()}

    print(f"# imports in {args.src}")
    for rel in sorted(graph):
        targets = ", ".join(sorted(graph[rel])) or "-"
        print(f"{rel} -> {targets}")

    comps = cycles(graph)
    pairs = sorted(
        (a, b) for a in graph for b in graph[a] if a < b and a in graph.get(b, ())
    )
    if not comps:
        print("\nno cycles")
        return 0
    print(f"\n# {len(comps)} cycle(s) (strongly connected components)")
    for comp in comps:
        print("cycle: " + " ".join(comp))
        for a in comp:
            for b in sorted(graph[a] & set(comp)):
                print(f"  {a} -> {b}: {', '.join(sorted(edges[a][b]))}")
    print(f"\n# {len(pairs)} pair(s) importing each other")
    for a, b in pairs:
        print(f"pair: {a} <-> {b}")
        print(f"  {a} -> {b}: {', '.join(sorted(edges[a][b]))}")
        print(f"  {b} -> {a}: {', '.join(sorted(edges[b][a]))}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
