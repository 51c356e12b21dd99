#!/usr/bin/env bash
# Builds the OCI image of sealvol without a container engine and pushes it.
#
#   deploy/image/build.sh REF [BINARY]
#
# REF is where it goes (registry.example.com/sealvol/sealvol:0.1.0; a
# loopback registry is reached over plain HTTP). BINARY is the sealvol to
# put in it, target/release/sealvol by default (build it with `cargo build
# --release -p sealvol-cli`). Prints the pushed image's digest.
#
# The image is one layer assembled here, on no base image: the binary
# (debug info stripped) at /usr/local/bin/sealvol, the shared libraries it
# links as ldd resolves them on this machine (a musl-static binary brings
# none), the CA bundle (for S3, Azure, Hugging Face and upstream registries
# over TLS), and /etc/passwd and /etc/group naming root and nobody. Its
# entrypoint is sealvol, so `args` pick the command (serve, snapshotter).
# The layer is reproducible: sorted names, owner 0, mtime 0, gzip without a
# name or time, so the same binary gives the same layer digest.
#
# Pushing uses crane (built into .deps/go by scripts/deps.sh): `crane
# append` onto the empty OCI base, then `crane mutate` for the entrypoint,
# platform and labels.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
ref=${1:?usage: deploy/image/build.sh REF [BINARY]}
binary=${2:-$root/target/release/sealvol}
crane=${CRANE:-$root/.deps/go/bin/crane}
[[ -x $binary ]] || { echo "build.sh: no sealvol binary at $binary (cargo build --release -p sealvol-cli)" >&2; exit 1; }
[[ -x $crane ]] || { echo "build.sh: no crane at $crane (source scripts/deps.sh)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rootfs=$work/rootfs
mkdir -p "$rootfs"/{usr/local/bin,etc/ssl/certs,tmp,var/lib/sealvol,run/sealvol}
chmod 1777 "$rootfs/tmp"

strip --strip-debug -o "$rootfs/usr/local/bin/sealvol" "$binary"
chmod 0755 "$rootfs/usr/local/bin/sealvol"

# The libraries the dynamic loader would load, at the paths it would load
# them from (the loader itself by its absolute PT_INTERP path). ldd prints
# "not a dynamic executable" and exits 1 for a static binary.
if ldd "$binary" >"$work/ldd" 2>&1; then
  if grep -q "not found" "$work/ldd"; then
    echo "build.sh: $binary needs libraries this machine lacks:" >&2
    grep "not found" "$work/ldd" >&2
    exit 1
  fi
  while read -r lib; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
  done < <(awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}' "$work/ldd")
elif ! grep -q "not a dynamic executable\|statically linked" "$work/ldd"; then
  cat "$work/ldd" >&2
  exit 1
fi

cp -L /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/usr/local/bin/sealvol\nnobody:x:65534:65534:nobody:/nonexistent:/usr/local/bin/sealvol\n' >"$rootfs/etc/passwd"
printf 'root:x:0:\nnogroup:x:65534:\n' >"$rootfs/etc/group"

tar --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner --format=posix \
  --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
  -C "$rootfs" -cf "$work/layer.tar" .
gzip -n -9 "$work/layer.tar"

insecure=()
case $ref in
  127.* | localhost:* | localhost/* | \[::1\]*) insecure=(--insecure) ;;
esac
version=$("$binary" --version | awk '{print $NF}')
"$crane" append "${insecure[@]}" --oci-empty-base -f "$work/layer.tar.gz" -t "$ref" >/dev/null
"$crane" mutate "${insecure[@]}" "$ref" -t "$ref" \
  --set-platform linux/amd64 \
  --entrypoint /usr/local/bin/sealvol \
  --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
  --label org.opencontainers.image.title=sealvol \
  --label "org.opencontainers.image.version=$version" >/dev/null
"$crane" digest "${insecure[@]}" "$ref"
