#!/usr/bin/env python3
"""A second, independent reading of SPEC.md: recomputes the version digest
(§3) and the binary tree encoding (§2.4) of every tree vector from the
entries alone, in Python, without the Rust crate. If SPEC.md and the crate
drift apart, this fails while the crate's own tests may still pass."""
import hashlib
import json
import pathlib
import struct
import sys

import blake3

HERE = pathlib.Path(__file__).parent
KINDS = {"dir": 1, "file": 2, "symlink": 3}


def canonical_key(path):
    return [c.encode() for c in path.split("/")]


def size_of(e):
    if e["kind"] == "file":
        return e["size"]
    if e["kind"] == "symlink":
        return len(e["target"].encode())
    return 0


def version_digest(entries):
    h = blake3.blake3(b"sealvol.version.v1\n")
    for e in entries:
        p = e["path"].encode()
        h.update(bytes([KINDS[e["kind"]]]) + struct.pack("<I", len(p)) + p)
        h.update(struct.pack("<IQ", e["mode"], size_of(e)))
        if e["kind"] == "file":
            h.update(bytes.fromhex(e["blake3"].removeprefix("b3:")))
        elif e["kind"] == "symlink":
            h.update(e["target"].encode())
    return "b3:" + h.hexdigest()


def encode(params, entries):
    out = b"SVTREE\x00\x01" + struct.pack("<IIIQ", params["min"], params["avg"], params["max"], len(entries))
    for e in entries:
        p = e["path"].encode()
        out += bytes([KINDS[e["kind"]]]) + struct.pack("<II", e["mode"], len(p)) + p
        if e["kind"] == "file":
            out += struct.pack("<Q", e["size"]) + bytes.fromhex(e["blake3"].removeprefix("b3:"))
            out += struct.pack("<I", len(e["chunks"]))
            for c in e["chunks"]:
                out += struct.pack("<QI", c["offset"], c["length"])
                out += bytes.fromhex(c["sha256"].removeprefix("sha256:")) + bytes.fromhex(c["blake3"].removeprefix("b3:"))
        elif e["kind"] == "symlink":
            t = e["target"].encode()
            out += struct.pack("<I", len(t)) + t
    return out


def main():
    trees = json.loads((HERE / "trees.json").read_text())
    total = failures = 0
    for name, case in trees.items():
        entries = sorted(case["entries"], key=lambda e: canonical_key(e["path"]))
        checks = [("version digest", version_digest(entries), case["version_digest"])]
        if "encoded_sha256" in case:
            enc = encode(case["params"], entries)
            checks.append(("encoding sha256", "sha256:" + hashlib.sha256(enc).hexdigest(), case["encoded_sha256"]))
        if name == "basic":
            checks.append(("basic.tree bytes", encode(case["params"], entries) == (HERE / "basic.tree").read_bytes(), True))
        for what, got, want in checks:
            total += 1
            if got != want:
                failures += 1
                print(f"FAIL: {name}: {what}: SPEC.md gives {got}, the vector says {want}")
    print(f"spec check: {total - failures} of {total} vector values recomputed from SPEC.md")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
