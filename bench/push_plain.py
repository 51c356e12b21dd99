#!/usr/bin/env python3
"""push_plain.py HOST REPO DIR: pushes an ordinary image of DIR's files to
http://HOST/v2/REPO:latest with the distribution API, one uncompressed
layer per file (the peer of a sealed version in bench/snapshotter and
bench/node: what an image of model files looks like without sealvol)."""
import hashlib, io, json, os, sys, tarfile, tempfile, urllib.request
host, repo, src = sys.argv[1:]
base = f"http://{host}/v2/{repo}"
def upload(path_or_bytes):
    data = path_or_bytes if isinstance(path_or_bytes, bytes) else None
    h = hashlib.sha256()
    if data is None:
        with open(path_or_bytes, "rb") as f:
            for b in iter(lambda: f.read(1 << 20), b""): h.update(b)
        size = os.path.getsize(path_or_bytes)
    else:
        h.update(data); size = len(data)
    digest = "sha256:" + h.hexdigest()
    r = urllib.request.urlopen(urllib.request.Request(base + "/blobs/uploads/", method="POST"))
    loc = r.headers["Location"]
    if loc.startswith("/"): loc = f"http://{host}{loc}"
    sep = "&" if "?" in loc else "?"
    body = data if data is not None else open(path_or_bytes, "rb")
    req = urllib.request.Request(f"{loc}{sep}digest={digest}", data=body, method="PUT",
        headers={"Content-Type": "application/octet-stream", "Content-Length": str(size)})
    urllib.request.urlopen(req)
    return digest, size
layers, diffs = [], []
tmp = tempfile.mkdtemp(dir=os.path.dirname(src))
for name in sorted(os.listdir(src)):
    t = os.path.join(tmp, name + ".tar")
    with tarfile.open(t, "w", format=tarfile.PAX_FORMAT) as tf:
        tf.add(os.path.join(src, name), arcname=name)
    d, s = upload(t)
    os.remove(t)
    layers.append({"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": d, "size": s})
    diffs.append(d)
os.rmdir(tmp)
config = json.dumps({"architecture": "amd64", "os": "linux",
    "rootfs": {"type": "layers", "diff_ids": diffs}, "config": {}}).encode()
cd, cs = upload(config)
manifest = json.dumps({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cs},
    "layers": layers}).encode()
urllib.request.urlopen(urllib.request.Request(f"{base}/manifests/latest", data=manifest, method="PUT",
    headers={"Content-Type": "application/vnd.oci.image.manifest.v1+json"}))
