#!/usr/bin/env bash
# The containerd 2.x tests (tests/tests/containerd2.rs) against another
# containerd release than the one CI runs: by default 2.2.9, the oldest
# 2.x with image-volume subPath. Builds it once into .deps/go (with
# SEALVOL_GO_EXTRA=compat, scripts/deps.sh) and points the tests at it with
# SEALVOL_CONTAINERD2_BIN; runc 1.5 and the rest are the CI set's. Not part
# of CI (it would build a second containerd on every clean clone); its
# result goes into the closing note of a change to the snapshotter.
#
# usage: scripts/containerd-compat.sh [cargo test filter...]
set -euo pipefail
cd "$(dirname "$0")/.."
export SEALVOL_GO_EXTRA=compat
source scripts/deps.sh
bin=$PWD/.deps/go/containerd-v2.2.9/bin
echo "== containerd2 tests with $("$bin/containerd" --version)"
cargo build --locked -p sealvol-cli
SEALVOL_CONTAINERD2_BIN=$bin cargo test --locked -p sealvol-tests --test containerd2 -- "$@"
