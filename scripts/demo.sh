#!/usr/bin/env bash
# The main job on the embedded default, as far as it exists today: build
# sealvol, make a small model-like directory, seal it, and show that
# sealing is deterministic and that a re-seal of an unchanged tree reads
# nothing. Later parts extend this to serve + push + mount.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/deps.sh
cargo build --release --locked -p sealvol-cli
bin=target/release/sealvol

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
model="$work/qwen-tiny"
mkdir -p "$model/tokenizer"
printf '{"architectures":["Qwen3ForCausalLM"],"hidden_size":1024}\n' >"$model/config.json"
printf '{"version":"1.0"}\n' >"$model/tokenizer/tokenizer.json"
head -c $((64 << 20)) /dev/urandom >"$model/model.safetensors"
sleep 0.2 # files written within 100 ms are not trusted to the file-state cache

echo "== sealvol seal $model"
"$bin" seal "$model" --cache-dir "$work/cache"
echo "== again (file-state cache: no file data read)"
"$bin" seal "$model" --cache-dir "$work/cache" --output json
echo "== one byte changed"
printf 'x' | dd of="$model/model.safetensors" bs=1 seek=1000 conv=notrunc status=none
"$bin" seal "$model" --cache-dir "$work/cache"
