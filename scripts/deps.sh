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
APT_PACKAGES=(gcc libc6-dev pkg-config python3 python3-venv time curl openssl docker-registry skopeo fuse3 containerd postgresql chromium)
sealvol_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV="${SEALVOL_VENV:-$sealvol_root/.venv}"
# The sync tests read from emulated object stores: moto's server (S3; boto3
# comes with it) and gcp-storage-emulator (GCS) from the venv, azurite
# (Azure Blob) from npm into .deps/azurite. Azurite 3.35.0 is the newest
# whose package.json accepts Debian 12's nodejs 18 (3.36 wants node >= 21).
PIP_PACKAGES=(blake3==1.0.11 oras==0.2.43 bcrypt==5.0.0 "moto[server]==5.2.5" gcp-storage-emulator==2026.7.19)
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
export SEALVOL_VENV="$VENV"
export SEALVOL_BROWSER_DEPS="$BROWSER_DIR"
