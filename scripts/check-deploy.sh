#!/usr/bin/env bash
# Checks deploy/: the systemd units with systemd-analyze verify. Run by
# test.sh after the build (it needs target/debug/sealvol).
set -euo pipefail
cd "$(dirname "$0")/.."
target=$(cargo metadata --format-version 1 --no-deps |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# systemd-analyze verify checks that ExecStart's program exists, so the
# units are checked with it pointing at the binary just built. It exits 0
# on an unknown key or section (a warning), so any word it prints fails.
for unit in deploy/systemd/*.service; do
  sed "s#/usr/local/bin/sealvol#$target/debug/sealvol#g" "$unit" >"$work/${unit##*/}"
  out=$(cd "$work" && systemd-analyze verify --man=no "${unit##*/}" 2>&1) || {
    echo "$unit: $out" >&2
    exit 1
  }
  if [[ -n $out ]]; then
    echo "$unit: $out" >&2
    exit 1
  fi
done
echo "deploy/systemd: $(ls deploy/systemd/*.service | wc -l) units verified"
