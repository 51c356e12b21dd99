#!/usr/bin/env python3
"""Writes fuzz/corpus/<target>/ seeds from spec/vectors/ and hand-made
requests: known-good shapes the fuzzers start from. Run again after the
vectors change; the files are checked in."""
import hashlib
import json
import os
import struct

here = os.path.dirname(os.path.abspath(__file__))
vectors = os.path.join(here, "..", "spec", "vectors")
corpus = os.path.join(here, "corpus")


def read(name):
    with open(os.path.join(vectors, name), "rb") as f:
        return f.read()


def write(target, name, data):
    d = os.path.join(corpus, target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def sha256(b):
    return "sha256:" + hashlib.sha256(b).hexdigest()


# tree_decode: both formats, and the empty tree.
write("tree_decode", "basic.tree", read("basic.tree"))
write("tree_decode", "basic.v1.tree", read("basic.v1.tree"))
write("tree_decode", "header-only", read("basic.tree")[:28])

# manifests: the version index, a view (image) manifest, and a tree and a
# chunks manifest of the shape the index names.
index = read("basic.index.json")
write("manifests", "basic.index.json", index)
write("manifests", "basic.view.json", read("basic.view.json"))
tree = read("basic.tree")


def artifact(artifact_type, layers):
    return json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": artifact_type,
            "config": {
                "mediaType": "application/vnd.oci.empty.v1+json",
                "digest": sha256(b"{}"),
                "size": 2,
                "data": "e30=",
            },
            "layers": layers,
        },
        separators=(",", ":"),
        sort_keys=True,
    )


tree_manifest = artifact(
    "application/vnd.sealvol.tree.v1",
    [{"mediaType": "application/vnd.sealvol.tree.index.v2", "digest": sha256(tree), "size": len(tree)}],
)
write("manifests", "tree.manifest.json", tree_manifest)
chunks_manifest = artifact(
    "application/vnd.sealvol.chunks.v1",
    [
        {"mediaType": "application/vnd.sealvol.chunk.v1", "digest": sha256(b"hello\n"), "size": 6},
        {"mediaType": "application/vnd.sealvol.chunk.v1", "digest": sha256(b"world\n"), "size": 6},
    ],
)
write("manifests", "chunks.manifest.json", chunks_manifest)

# refs: every ref of refs.json, valid, aliased and invalid, and digests.
refs = json.loads(read("refs.json"))
n = 0
for v in refs["valid"]:
    write("refs", f"valid-{n}", v["input"]); n += 1
for v in refs["aliases"]:
    write("refs", f"alias-{n}", v["input"]); n += 1
for v in refs["invalid"]:
    write("refs", f"invalid-{n}", v); n += 1
write("refs", "sha256", sha256(b""))
write("refs", "b3", "b3:9e78e57303cde76ee55e9c5cb8416e11b0be2cdb39e1dd707cbd61aa41431401")
write("refs", "b3-prefix", "b3:9e78e57303cd")

# ranges: arbitrary's layout of (u64 size, &[u8] value): the size's 8
# bytes, then the value (the last field takes the rest).
for i, (size, value) in enumerate(
    [(100, "bytes=0-9"), (100, "bytes=-5"), (100, "bytes=90-"), (100, "0-99"),
     (1 << 40, "bytes 0-1023/2048"), (0, "bytes=0-0"), (100, "bytes=0-1,5-9")]
):
    write("ranges", f"seed-{i}", struct.pack("<Q", size) + value.encode())

# auth: arbitrary's enum tag is a u32 (little-endian) scaled to the
# variants' count, (u32 * count) >> 32: 0 htpasswd, 1 Basic, 2 scope,
# 3 bearer, 5 session (the last field takes the rest). Tampered (4) is
# left to the fuzzer.
def variant(i, count):
    """The u32 that arbitrary reads as variant `i` of `count`."""
    tag = -((-i << 32) // count)  # ceil(i * 2^32 / count)
    assert (tag * count) >> 32 == i
    return tag


bcrypt = "$2y$05$" + "a" * 53
for i, (tag, text) in enumerate(
    [(0, f"# users\nalice:{bcrypt}\nbob:{bcrypt}\n"),
     (0, "carol:plain\n"),
     (1, "Basic YWxpY2U6c2VjcmV0"),
     (1, "basic Ym9iOjo6"),
     (2, "repository:weights/qwen3-8b:pull,push"),
     (2, "registry:catalog:*"),
     (3, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2ln"),
     (3, "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0."),
     (5, "eyJhbGciOiJIUzI1NiJ9.e30.")]
):
    write("auth", f"seed-{i}", struct.pack("<I", variant(tag, 6)) + text.encode())


# app: requests as text (fuzz_targets/app.rs), the OCI push and pull
# flows and the volume API.
def req(method, path, headers=(), body=""):
    head = "\n".join([f"{method} {path}", *headers])
    return head + "\n\n" + body


config = "{}"
requests = {
    "v2": req("GET", "/v2/"),
    "catalog": req("GET", "/v2/_catalog?n=10"),
    "monolithic": req("POST", "/v2/w/a/blobs/uploads/?digest={d}", ["Content-Type: application/octet-stream"], config),
    "open-session": req("POST", "/v2/w/a/blobs/uploads/"),
    "patch": req("PATCH", "/v2/w/a/blobs/uploads/{u}", ["Content-Range: 0-4", "Content-Type: application/octet-stream"], "hello"),
    "put": req("PUT", "/v2/w/a/blobs/uploads/{u}?digest={d}", [], "hello"),
    "status": req("GET", "/v2/w/a/blobs/uploads/{u}"),
    "cancel": req("DELETE", "/v2/w/a/blobs/uploads/{u}"),
    "mount": req("POST", "/v2/w/b/blobs/uploads/?mount={b}&from=w/a"),
    "head-blob": req("HEAD", "/v2/w/a/blobs/{b}"),
    "get-blob-range": req("GET", "/v2/w/a/blobs/{b}", ["Range: bytes=1-3"]),
    "delete-blob": req("DELETE", "/v2/w/a/blobs/{b}"),
    "put-manifest": req(
        "PUT", "/v2/w/a/manifests/v1", ["Content-Type: application/vnd.oci.image.manifest.v1+json"],
        json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                               "digest": sha256(config.encode()), "size": 2},
                    "layers": []}),
    ),
    "put-index": req("PUT", "/v2/w/a/manifests/latest", ["Content-Type: application/vnd.oci.image.index.v1+json"], index.decode()),
    "put-tree-manifest": req("PUT", "/v2/w/a/manifests/tree", ["Content-Type: application/vnd.oci.image.manifest.v1+json"], tree_manifest),
    "get-manifest": req("GET", "/v2/w/a/manifests/v1", ["Accept: application/vnd.oci.image.manifest.v1+json"]),
    "tags": req("GET", "/v2/w/a/tags/list?n=2&last=a"),
    "referrers": req("GET", "/v2/w/a/referrers/{b}?artifactType=application/vnd.sealvol.version.v1"),
    "delete-manifest": req("DELETE", "/v2/w/a/manifests/v1"),
    "api": req("GET", "/api/v1/"),
    "volumes": req("GET", "/api/v1/volumes?prefix=w&n=5"),
    "versions": req("GET", "/api/v1/volumes/w/a/-/versions"),
    "entries": req("GET", "/api/v1/volumes/w/a/-/versions/b3:9e78e57303cde76ee55e9c5cb8416e11b0be2cdb39e1dd707cbd61aa41431401/entries?path=a"),
    "tag-put": req("PUT", "/api/v1/volumes/w/a/-/tags/prod", ["Content-Type: application/json"], '{"digest":"b3:9e78e57303cde76ee55e9c5cb8416e11b0be2cdb39e1dd707cbd61aa41431401"}'),
    "claim": req("POST", "/api/v1/volumes/w/a/-/claim", ["Content-Type: application/json"], '{"ttl_seconds":60}'),
    "keys": req("POST", "/api/v1/keys", ["Content-Type: application/json"], '{"name":"ci"}'),
    "gc": req("POST", "/api/v1/gc?dry_run=true"),
    "token": req("GET", "/token?service=registry&scope=repository:w/a:pull"),
    "ui": req("GET", "/ui/"),
    "ui-volume": req("GET", "/ui/w/a"),
    "login": req("POST", "/ui/login", ["Content-Type: application/x-www-form-urlencoded", "Origin: http://127.0.0.1:5000"], "user=a&password=b"),
    "metrics": req("GET", "/metrics"),
}
for name, text in requests.items():
    write("app", name, text)

# uploads: arbitrary's layout of a Vec<Op> is not worth writing by hand;
# one seed of zeroes, and the found-* files next to it are a few of the
# fuzzer's own early finds (sessions opened, patched and completed),
# checked in as they are.
write("uploads", "zeroes", bytes(16))
