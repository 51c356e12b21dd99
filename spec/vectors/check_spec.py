#!/usr/bin/env python3
"""A second, independent reading of SPEC.md: recomputes the version digest
(§3), the binary tree encoding (§2.4, format 2, and format 1 of §2.6) and
the verification chain (§2.5) of every vector from the entries and inputs
alone, in Python, without the Rust crate. If SPEC.md and the crate drift
apart, this fails while the crate's own tests may still pass.

The chain is checked with a BLAKE3 written here from the BLAKE3 paper (the
`blake3` package has no chaining-value API); it is first checked against
the package on small inputs.

Usage: check_spec.py [VECTORS_DIR]   (default: the directory of this script)
"""
import base64
import hashlib
import json
import pathlib
import struct
import sys

import blake3

HERE = pathlib.Path(__file__).parent
KINDS = {"dir": 1, "file": 2, "symlink": 3}
MAGIC_V2 = b"SVTREE\x00\x02"
MAGIC_V1 = b"SVTREE\x00\x01"
PIECE = 1 << 20  # §2.5: 1024 BLAKE3 chunks
CHAIN_CONTEXT = "sealvol chain vector"

# --- BLAKE3, from the paper: only what the chain needs (hash mode, 32-byte
# outputs, chunk and parent chaining values, root flag). ---

IV = (0x6A09E667, 0xBB67AE85, 0x3C6EF372, 0xA54FF53A, 0x510E527F, 0x9B05688C, 0x1F83D9AB, 0x5BE0CD19)
MSG_PERMUTATION = (2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8)
CHUNK_START, CHUNK_END, PARENT, ROOT = 1, 2, 4, 8
CHUNK_LEN, BLOCK_LEN = 1024, 64
M32 = 0xFFFFFFFF

# The message word order of each of the 7 rounds, precomputed.
SCHEDULE = [tuple(range(16))]
for _ in range(6):
    SCHEDULE.append(tuple(SCHEDULE[-1][i] for i in MSG_PERMUTATION))


def g(s, a, b, c, d, x, y):
    s[a] = (s[a] + s[b] + x) & M32
    t = s[d] ^ s[a]
    s[d] = ((t >> 16) | (t << 16)) & M32
    s[c] = (s[c] + s[d]) & M32
    t = s[b] ^ s[c]
    s[b] = ((t >> 12) | (t << 20)) & M32
    s[a] = (s[a] + s[b] + y) & M32
    t = s[d] ^ s[a]
    s[d] = ((t >> 8) | (t << 24)) & M32
    s[c] = (s[c] + s[d]) & M32
    t = s[b] ^ s[c]
    s[b] = ((t >> 7) | (t << 25)) & M32


def compress(cv, block, counter, block_len, flags):
    """The compression function; returns the first 8 output words (a
    chaining value, or the 32-byte hash when `flags` has ROOT)."""
    m = struct.unpack("<16I", block.ljust(BLOCK_LEN, b"\0"))
    s = list(cv) + list(IV[:4]) + [counter & M32, (counter >> 32) & M32, block_len, flags]
    for w in SCHEDULE:
        g(s, 0, 4, 8, 12, m[w[0]], m[w[1]])
        g(s, 1, 5, 9, 13, m[w[2]], m[w[3]])
        g(s, 2, 6, 10, 14, m[w[4]], m[w[5]])
        g(s, 3, 7, 11, 15, m[w[6]], m[w[7]])
        g(s, 0, 5, 10, 15, m[w[8]], m[w[9]])
        g(s, 1, 6, 11, 12, m[w[10]], m[w[11]])
        g(s, 2, 7, 8, 13, m[w[12]], m[w[13]])
        g(s, 3, 4, 9, 14, m[w[14]], m[w[15]])
    return tuple(s[i] ^ s[i + 8] for i in range(8))


def words_to_bytes(cv):
    return struct.pack("<8I", *cv)


def bytes_to_words(b):
    return struct.unpack("<8I", b)


def chunk_cv(data, counter, root=False):
    """Chaining value of one chunk (at most 1024 bytes) with chunk counter
    `counter`; the hash itself when `root`."""
    assert len(data) <= CHUNK_LEN
    blocks = [data[i:i + BLOCK_LEN] for i in range(0, len(data), BLOCK_LEN)] or [b""]
    cv = IV
    for i, block in enumerate(blocks):
        flags = (CHUNK_START if i == 0 else 0) | (CHUNK_END if i == len(blocks) - 1 else 0)
        if root and i == len(blocks) - 1:
            flags |= ROOT
        cv = compress(cv, block, counter, len(block), flags)
    return cv


def parent_cv(left, right, root=False):
    return compress(IV, words_to_bytes(left) + words_to_bytes(right), 0, BLOCK_LEN, PARENT | (ROOT if root else 0))


def left_len(n):
    """Bytes in the left subtree of an n-byte subtree (n > 1024): the
    largest power of two of whole chunks strictly less than n."""
    full_chunks = (n - 1) // CHUNK_LEN
    return CHUNK_LEN << (full_chunks.bit_length() - 1)


def subtree_cv(data, counter, root=False):
    """Chaining value of the subtree of `data` whose first chunk has chunk
    counter `counter` (the hash itself when `root`)."""
    if len(data) <= CHUNK_LEN:
        return chunk_cv(data, counter, root)
    n = left_len(len(data))
    return parent_cv(subtree_cv(data[:n], counter), subtree_cv(data[n:], counter + n // CHUNK_LEN), root)


def merge_pieces(cvs, size):
    """§2.5: the file's BLAKE3 from the chaining values of its pieces, by
    BLAKE3's own tree (left subtrees of at least a piece hold whole pieces)."""

    def sub(cvs, n, root):
        if len(cvs) == 1:
            assert not root
            return cvs[0]
        ln = left_len(n)
        k = ln // PIECE
        return parent_cv(sub(cvs[:k], ln, False), sub(cvs[k:], n - ln, False), root)

    assert size > PIECE and len(cvs) == -(-size // PIECE)
    return sub(cvs, size, True)


def piece_count(size):
    return -(-size // PIECE) if size > PIECE else 0


def piece_cv_of(data, index):
    """The chaining value of piece `index` of a file larger than a piece,
    from the whole file's bytes."""
    return subtree_cv(data[index * PIECE:(index + 1) * PIECE], index * (PIECE // CHUNK_LEN))


def must(ok, what):
    """An assertion that `python -O` keeps."""
    if not ok:
        raise AssertionError(what)


def self_test():
    """Fails loudly if the BLAKE3 above disagrees with the package."""
    src = bytes(blake3.blake3(b"check_spec self test").digest(length=5000))
    for n in (0, 1, 63, 64, 65, 1000, 1024):
        want = blake3.blake3(src[:n]).digest()
        must(words_to_bytes(chunk_cv(src[:n], 0, root=True)) == want, f"one-chunk BLAKE3 of {n} bytes")
    # Two chunks, merged by hand: the second chunk has counter 1.
    for n in (1025, 2048):
        left, right = chunk_cv(src[:1024], 0), chunk_cv(src[1024:n], 1)
        must(words_to_bytes(parent_cv(left, right, root=True)) == blake3.blake3(src[:n]).digest(), f"two-chunk BLAKE3 of {n} bytes")
    for n in (3000, 4096, 4097, 5000):
        must(words_to_bytes(subtree_cv(src[:n], 0, root=True)) == blake3.blake3(src[:n]).digest(), f"tree BLAKE3 of {n} bytes")
    must(left_len(1025) == 1024 and left_len(2048) == 1024 and left_len(2049) == 2048, "left_len")
    must(left_len(3 * PIECE + 12345) == 2 * PIECE and left_len(4 * PIECE) == 2 * PIECE, "left_len")


# --- The tree index (§2.4) and version digest (§3). ---


def canonical_key(path):
    return [c.encode() for c in path.split("/")]


def size_of(e):
    if e["kind"] == "file":
        return e["size"]
    if e["kind"] == "symlink":
        return len(e["target"].encode())
    return 0


def b3(s):
    return bytes.fromhex(s.removeprefix("b3:"))


def version_digest(entries):
    h = blake3.blake3(b"sealvol.version.v1\n")
    for e in entries:
        p = e["path"].encode()
        h.update(bytes([KINDS[e["kind"]]]) + struct.pack("<I", len(p)) + p)
        h.update(struct.pack("<IQ", e["mode"], size_of(e)))
        if e["kind"] == "file":
            h.update(b3(e["blake3"]))
        elif e["kind"] == "symlink":
            h.update(e["target"].encode())
    return "b3:" + h.hexdigest()


def encode(params, entries, version, chunk_blake3=None):
    """Format 2 (§2.4) or format 1 (§2.6). Format 1 records carry each
    chunk's BLAKE3, which `chunk_blake3(entry, chunk)` gives."""
    magic = MAGIC_V2 if version == 2 else MAGIC_V1
    out = magic + struct.pack("<IIIQ", params["min"], params["avg"], params["max"], len(entries))
    for e in entries:
        p = e["path"].encode()
        out += bytes([KINDS[e["kind"]]]) + struct.pack("<II", e["mode"], len(p)) + p
        if e["kind"] == "file":
            out += struct.pack("<Q", e["size"]) + b3(e["blake3"])
            out += struct.pack("<I", len(e["chunks"]))
            for c in e["chunks"]:
                out += struct.pack("<QI", c["offset"], c["length"])
                out += bytes.fromhex(c["sha256"].removeprefix("sha256:"))
                if version == 1:
                    out += chunk_blake3(e, c)
            if version == 2:
                for cv in e.get("pieces", []):
                    out += bytes.fromhex(cv)
        elif e["kind"] == "symlink":
            t = e["target"].encode()
            out += struct.pack("<I", len(t)) + t
    return out


def validation_error(params, entries):
    """The first rule of §2.3 (1-6, 9; 7 and 8 are checked above) that
    `entries`, in the order given, break, or None."""
    seen, kinds, lengths = [], {}, {}
    for e in entries:
        path = e["path"]
        parts = path.split("/")
        if (not path or "\0" in path or path.startswith("/") or len(path.encode()) > 4096
                or any(c in ("", ".", "..") or len(c.encode()) > 255 for c in parts)):
            return 1
        if seen and canonical_key(seen[-1]) >= canonical_key(path):
            return 2
        if len(parts) > 1 and kinds.get("/".join(parts[:-1])) != "dir":
            return 3
        if e["mode"] > 0o7777:
            return 4
        seen.append(path)
        kinds[path] = e["kind"]
    for e in entries:
        if e["kind"] == "symlink" and not symlink_ok(e["path"], e["target"], kinds):
            return 5
        if e["kind"] == "file":
            offset = 0
            for c in e["chunks"]:
                if c["offset"] != offset or not 1 <= c["length"] <= params["max"]:
                    return 6
                offset += c["length"]
                if lengths.setdefault(c["sha256"], c["length"]) != c["length"]:
                    return 9
            if offset != e["size"]:
                return 6
    return None


def symlink_ok(link, target, kinds):
    """Rule 5: walked lexically from the link's directory, the target never
    climbs above the root, and no `..` follows a component that names one
    of the tree's symlinks."""
    if not target or target.startswith("/") or "\0" in target:
        return False
    at = link.split("/")[:-1]
    through = False
    for c in target.split("/"):
        if c in ("", "."):
            continue
        if c == "..":
            if through or not at:
                return False
            at.pop()
        else:
            at.append(c)
            through = through or kinds.get("/".join(at)) == "symlink"
    return True


def xof(context, length):
    return blake3.blake3(derive_key_context=context).digest(length=length)


def chain_checks(label, size, blake3_hex, pieces):
    """The chain rule of §2.3: the piece count, and that the pieces merge to
    the file's BLAKE3 (parent nodes only)."""
    checks = [(f"{label}: piece count", len(pieces), piece_count(size))]
    if pieces and len(pieces) == piece_count(size):
        cvs = [bytes_to_words(bytes.fromhex(p)) for p in pieces]
        checks.append((f"{label}: pieces merge to its blake3", "b3:" + words_to_bytes(merge_pieces(cvs, size)).hex(), blake3_hex))
    return checks


def file_data_checks(label, data, e, full_pieces):
    """Recomputes a file's BLAKE3, chunk sha256s and, for the pieces
    `full_pieces` plus the last one, chaining values from its bytes."""
    checks = [
        (f"{label}: size", len(data), e["size"]),
        (f"{label}: blake3 of the data", "b3:" + blake3.blake3(data).hexdigest(), e["blake3"]),
        (
            f"{label}: chunk sha256s of the data",
            [hashlib.sha256(data[c["offset"]:c["offset"] + c["length"]]).hexdigest() for c in e["chunks"]],
            [c["sha256"].removeprefix("sha256:") for c in e["chunks"]],
        ),
    ]
    pieces = e.get("pieces", [])
    n = piece_count(len(data))
    for i in sorted(set(full_pieces) | ({n - 1} if n else set())):
        got = words_to_bytes(piece_cv_of(data, i)).hex()
        checks.append((f"{label}: piece {i} from the data", got, pieces[i] if i < len(pieces) else None))
    return checks



def prefetch_list(version, reads):
    """§5.8: a recording's (path, piece) reads as a list: repeats dropped,
    files in order of first read, consecutive pieces of one file merged."""
    files, index, seen, runs = [], {}, set(), []
    for path, piece in reads:
        if path not in index:
            index[path] = len(files)
            files.append(path)
        f = index[path]
        if (f, piece) in seen:
            continue
        seen.add((f, piece))
        if runs and runs[-1][0] == f and runs[-1][1] + runs[-1][2] == piece:
            runs[-1][2] += 1
        else:
            runs.append([f, piece, 1])
    return {"schemaVersion": 1, "version": version, "files": files, "runs": runs}


def canonical(value):
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def prefetch_error(list_bytes, version, entries):
    """§5.8's reader checks; None when the list is accepted, else the rule."""
    if len(list_bytes) > 4 << 20:
        return "size"
    lst = json.loads(list_bytes)
    if lst.get("schemaVersion") != 1:
        return "schema"
    if lst["version"] != version:
        return "version"
    if len(lst["files"]) > 65536 or len(lst["runs"]) > 131072:
        return "count"
    sizes = {e["path"]: e["size"] for e in entries if e["kind"] == "file"}
    if len(set(lst["files"])) != len(lst["files"]):
        return "duplicate"
    if any(f not in sizes for f in lst["files"]):
        return "path"
    named = set()
    for f, first, count in lst["runs"]:
        if not 0 <= f < len(lst["files"]):
            return "file"
        path = lst["files"][f]
        if count < 1 or first + count > -(-sizes[path] // PIECE):
            return "range"
        for p in range(first, first + count):
            if (path, p) in named:
                return "repeat"
            named.add((path, p))
    return None


def prefetch_checks(vectors, trees):
    case = json.loads((vectors / "prefetch.json").read_text())
    tree = trees[case["tree"]]
    entries = sorted(tree["entries"], key=lambda e: canonical_key(e["path"]))
    version = version_digest(entries)
    lst = case["list"].encode()
    out = [
        ("list bytes", canonical(prefetch_list(version, case["reads"])), lst),
        ("list accepted", prefetch_error(lst, version, entries), None),
    ]
    for bad in case["invalid"]:
        out.append((f"invalid: {bad['name']}", prefetch_error(bad["list"].encode(), version, entries), bad["rule"]))
    manifest = case["manifest"].encode()
    m = json.loads(manifest)
    out += [
        ("manifest is canonical JSON", canonical(m), manifest),
        ("manifest digest", "sha256:" + hashlib.sha256(manifest).hexdigest(), case["manifest_digest"]),
        ("artifactType", m.get("artifactType"), "application/vnd.sealvol.prefetch.v1"),
        ("config", m["config"], {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2,
                                 "digest": "sha256:" + hashlib.sha256(b"{}").hexdigest()}),
        ("layer", m["layers"], [{"mediaType": "application/vnd.sealvol.prefetch.v1+json", "size": len(lst),
                                 "digest": "sha256:" + hashlib.sha256(lst).hexdigest()}]),
        ("subject", m["subject"], {"mediaType": "application/vnd.oci.image.index.v1+json",
                                   "digest": case["index_digest"], "size": case["index_size"]}),
        ("version annotation", m["annotations"]["dev.sealvol.version"], version),
        ("created annotation", "org.opencontainers.image.created" in m["annotations"], True),
    ]
    return out


def oms_files(entries):
    """§5.9: files, and links that lead (lexically, within the tree) to a
    file, under their own name with that file's BLAKE3; canonical order."""
    by_path = {e["path"]: e for e in entries}

    def lead(path):
        for _ in range(40):
            e = by_path.get(path)
            if e is None or e["kind"] == "dir":
                return None
            if e["kind"] == "file":
                return e["blake3"]
            if e["target"].startswith("/"):
                return None
            parts = path.split("/")[:-1]
            for p in e["target"].split("/"):
                if p in ("", "."):
                    continue
                if p == "..":
                    if not parts:
                        return None
                    parts.pop()
                else:
                    parts.append(p)
            path = "/".join(parts)
        return None

    out = []
    for e in entries:
        if e["kind"] == "file":
            out.append((e["path"], e["blake3"]))
        elif e["kind"] == "symlink" and lead(e["path"]) is not None:
            out.append((e["path"], lead(e["path"])))
    return out


def oms_statement(version, entries):
    files = oms_files(entries)
    resources = [{"name": p, "algorithm": "blake3", "digest": d.removeprefix("b3:")} for p, d in files]
    subject = hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in resources)).hexdigest()
    links = any(e["kind"] == "symlink" for e in entries if e["path"] in dict(files))
    return {
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": version, "digest": {"sha256": subject}}],
        "predicateType": "https://model_signing/signature/v1.0",
        "predicate": {"resources": resources,
                      "serialization": {"method": "files", "hash_type": "blake3", "allow_symlinks": links}},
    }


def oms_error(statement_bytes, version, entries):
    """The rule of §5.9 a statement breaks for this version, or None."""
    s = json.loads(statement_bytes)
    resources = s["predicate"]["resources"]
    if any(r["algorithm"] != "blake3" for r in resources):
        return "algorithm"
    subject = s["subject"][0]
    if hashlib.sha256(b"".join(bytes.fromhex(r["digest"]) for r in resources)).hexdigest() != subject["digest"]["sha256"]:
        return "subject"
    if subject.get("name", "").startswith("b3:") and subject["name"] != version:
        return "version"
    ignore = [i.rstrip("/") for i in s["predicate"]["serialization"].get("ignore_paths", []) if i.rstrip("/")]

    def ignored(path):
        return any(path == i or path.startswith(i + "/") for i in ignore)

    if not s["predicate"]["serialization"].get("allow_symlinks", False) and any(
            e["kind"] == "symlink" and not ignored(e["path"]) for e in entries):
        return "symlinks"
    listed = {r["name"]: r["digest"] for r in resources}
    have = {p: d.removeprefix("b3:") for p, d in oms_files(entries)}
    if set(have) - set(listed):
        return "missing"
    if set(listed) - set(have):
        return "extra"
    if any(listed[p] != have[p] for p in have):
        return "changed"
    return None


def signature_checks(vectors, trees):
    case = json.loads((vectors / "signature.json").read_text())
    entries = sorted(trees[case["tree"]]["entries"], key=lambda e: canonical_key(e["path"]))
    version = version_digest(entries)
    statement = case["statement"].encode()
    bundle_bytes = case["bundle"].encode()
    bundle = json.loads(bundle_bytes)
    env = bundle["dsseEnvelope"]
    pem = case["public_key_pem"]
    der = base64.b64decode("".join(pem.splitlines()[1:-1]))
    manifest = case["manifest"].encode()
    m = json.loads(manifest)
    out = [
        ("statement bytes", canonical(oms_statement(version, entries)), statement),
        ("statement accepted", oms_error(statement, version, entries), None),
        ("oms hint: sha256 of the PEM text", hashlib.sha256(pem.encode()).hexdigest(), case["oms_hint"]),
        ("cosign hint: base64 sha256 of the DER", base64.b64encode(hashlib.sha256(der).digest()).decode(), case["cosign_hint"]),
        ("bundle mediaType", bundle["mediaType"], "application/vnd.dev.sigstore.bundle.v0.3+json"),
        ("bundle hint", bundle["verificationMaterial"]["publicKey"]["hint"], case["oms_hint"]),
        ("payloadType", env["payloadType"], "application/vnd.in-toto+json"),
        ("payload", base64.b64decode(env["payload"]), statement),
        ("Ed25519 signature length", len(base64.b64decode(env["signatures"][0]["sig"])), 64),
        ("manifest is canonical JSON", canonical(m), manifest),
        ("manifest digest", "sha256:" + hashlib.sha256(manifest).hexdigest(), case["manifest_digest"]),
        ("artifactType", m.get("artifactType"), "application/vnd.dev.sigstore.bundle.v0.3+json"),
        ("config", m["config"], {"mediaType": "application/vnd.oci.empty.v1+json", "size": 2,
                                 "digest": "sha256:" + hashlib.sha256(b"{}").hexdigest()}),
        ("layer", m["layers"], [{"mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
                                 "size": len(bundle_bytes),
                                 "digest": "sha256:" + hashlib.sha256(bundle_bytes).hexdigest()}]),
        ("subject", m["subject"], {"mediaType": "application/vnd.oci.image.index.v1+json",
                                   "digest": case["index_digest"], "size": case["index_size"]}),
        ("annotations", {k: v for k, v in m["annotations"].items() if k != "org.opencontainers.image.created"},
         {"dev.sealvol.version": version, "dev.sigstore.bundle.content": "dsse-envelope",
          "dev.sigstore.bundle.predicateType": "https://model_signing/signature/v1.0"}),
    ]
    for bad in case["invalid"]:
        out.append((f"invalid: {bad['name']}", oms_error(bad["statement"].encode(), version, entries), bad["rule"]))
    return out


def main(argv):
    vectors = pathlib.Path(argv[1]) if len(argv) > 1 else HERE
    self_test()
    trees = json.loads((vectors / "trees.json").read_text())
    must({"basic", "chained"} <= trees.keys(), "trees.json has the basic and chained cases")
    checks = []
    for name, case in trees.items():
        entries = sorted(case["entries"], key=lambda e: canonical_key(e["path"]))
        checks.append((name, "version digest", version_digest(entries), case["version_digest"]))
        enc = encode(case["params"], entries, 2)
        if "encoded_sha256" in case:
            checks.append((name, "encoding sha256", "sha256:" + hashlib.sha256(enc).hexdigest(), case["encoded_sha256"]))
            checks.append((name, "encoding length", len(enc), case["encoded_len"]))
        for e in entries:
            if e["kind"] == "file":
                for what, got, want in chain_checks(e["path"], e["size"], e["blake3"], e.get("pieces", [])):
                    checks.append((name, what, got, want))
        if name == "basic":
            checks.append((name, "basic.tree bytes", enc == (vectors / "basic.tree").read_bytes(), True))
            # basic's files are of at most one chunk, so a chunk's BLAKE3
            # is its file's.
            must(all(len(e["chunks"]) <= 1 for e in entries if e["kind"] == "file"), "basic has one-chunk files")
            v1 = encode(case["params"], entries, 1, chunk_blake3=lambda e, c: b3(e["blake3"]))
            checks.append((name, "basic.v1.tree bytes", v1 == (vectors / "basic.v1.tree").read_bytes(), True))
        if name == "chained":
            files = {e["path"]: e for e in entries}
            data = xof(CHAIN_CONTEXT, (3 << 20) + 12345)
            for what, got, want in file_data_checks("weights.bin", data, files["weights.bin"], [0, 1, 2]):
                checks.append((name, what, got, want))
            one = xof(CHAIN_CONTEXT + " one piece", 1 << 20)
            for what, got, want in file_data_checks("piece.bin", one, files["piece.bin"], []):
                checks.append((name, what, got, want))
    # The view layer (SPEC.md §5.4, §5.5): version and tree under
    # sealvol's keys and again under containerd's snapshot prefix, and the
    # view manifest is the one the version index lists for linux/amd64.
    basic = trees["basic"]
    view_bytes = (vectors / "basic.view.json").read_bytes()
    index = json.loads((vectors / "basic.index.json").read_text())
    amd64 = [m for m in index["manifests"]
             if m.get("annotations", {}).get("dev.sealvol.role") == "view"
             and m.get("platform", {}).get("architecture") == "amd64"]
    must(len(amd64) == 1, "basic.index.json lists one linux/amd64 view manifest")
    checks.append(("oci", "view manifest digest", "sha256:" + hashlib.sha256(view_bytes).hexdigest(), amd64[0]["digest"]))
    layer = json.loads(view_bytes)["layers"][0]["annotations"]
    entries = sorted(basic["entries"], key=lambda e: canonical_key(e["path"]))
    tree_digest = "sha256:" + hashlib.sha256(encode(basic["params"], entries, 2)).hexdigest()
    for key in ("dev.sealvol.version", "containerd.io/snapshot/sealvol.version"):
        checks.append(("oci", f"view layer {key}", layer.get(key), version_digest(entries)))
    for key in ("dev.sealvol.tree", "containerd.io/snapshot/sealvol.tree"):
        checks.append(("oci", f"view layer {key}", layer.get(key), tree_digest))
    for i, case in enumerate(json.loads((vectors / "chunking.json").read_text())):
        name = f"chunking[{i}]"
        inp = case["input"]
        data = xof(inp["blake3_derive_key_context"], inp["length"])
        e = {"size": len(data), "blake3": case["file_blake3"], "chunks": case["chunks"], "pieces": case["pieces"]}
        for what, got, want in chain_checks("f", e["size"], e["blake3"], e["pieces"]):
            checks.append((name, what, got, want))
        for what, got, want in file_data_checks("f", data, e, []):
            checks.append((name, what, got, want))
    # The recorded prefetch list (§5.8) and the referrer that carries it.
    for what, got, want in prefetch_checks(vectors, trees):
        checks.append(("prefetch", what, got, want))
    # A signature (§5.9): the statement, its bundle and referrer.
    for what, got, want in signature_checks(vectors, trees):
        checks.append(("signature", what, got, want))
    # Validation (§2.3): what it accepts and what it refuses, by rule.
    validation = json.loads((vectors / "validation.json").read_text())
    for case in validation["valid"]:
        entries = sorted(case["entries"], key=lambda e: canonical_key(e["path"]))
        checks.append(("validation", f"valid: {case['name']}", validation_error(validation["params"], entries), None))
    for case in validation["invalid"]:
        entries = sorted(case["entries"], key=lambda e: canonical_key(e["path"]))
        checks.append(("validation", f"invalid: {case['name']}", validation_error(validation["params"], entries), case["rule"]))
    failures = 0
    for name, what, got, want in checks:
        if got != want:
            failures += 1
            print(f"FAIL: {name}: {what}: SPEC.md gives {got}, the vector says {want}")
    total = len(checks)
    print(f"spec check: {total - failures} of {total} vector values recomputed from SPEC.md")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
