#!/usr/bin/env bash
# Runs every test of sealvol, installing first what they need (Debian
# packages, a Python venv in .venv). Works on a fresh Debian 12 machine with
# only the Rust toolchain; run as root or with the packages already there.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh

# A second reading of SPEC.md, independent of the Rust crate.
"$SEALVOL_VENV/bin/python" spec/vectors/check_spec.py

# No two files of these crates import each other (issue 31); the
# registry's floors are checked by registry/tests/floors.rs as well.
for src in client/src sync/src cli/src conformance/src registry/src; do
	python3 scripts/import_graph.py "$src" >/dev/null || {
		python3 scripts/import_graph.py "$src" >&2
		echo "import circle in $src (scripts/import_graph.py $src)" >&2
		exit 1
	}
done

# The end-to-end tests run the real binaries, so build them first.
cargo build --workspace --locked

# deploy/: systemd units, the Helm chart (issue 30).
bash scripts/check-deploy.sh

# The OCI conformance runner against sealvol serve (gating) and CNCF
# distribution 2.8 (reported).
bash scripts/conformance.sh

cargo test --workspace --locked

# The suites that mount run with the FUSE engine above; run them again with
# the fanotify engine (issue 32: both engines pass the mount, trust, record
# and snapshotter tests; the snapshotter's engine comes from its
# snapshotter.toml, which the tests write). tests/tests/fanotify.rs ran
# above, naming its engine. --workspace, not -p sealvol-tests: the same
# feature set as above, so nothing is built again.
SEALVOL_TEST_ENGINE=fanotify cargo test --workspace --locked \
	--test mount --test trust --test record \
	--test containerd --test containerd2 --test kubelet

# Fuzzing (issue 28): each cargo fuzz target of fuzz/ for 20 s, two at a
# time, from the checked-in seeds (copied, the repository is left as it
# was); any crash, timeout or OOM fails the run, its reproducer in
# fuzz/artifacts/. bench/fuzz installs cargo-fuzz (pinned) into
# .deps/cargo once, and builds every target in one cargo invocation,
# without a sanitizer (safe Rust: panics, hangs, OOMs and overflow under
# debug assertions are what there is to find), into fuzz/target.
# 20 s, not 30, since issue 29's Go tools (about 3 minutes to build on a
# clean clone) joined CI: a smoke run, longer runs are bench/fuzz's.
JOBS=2 bench/fuzz 20
