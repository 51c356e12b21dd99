#!/usr/bin/env bash
# The main job on the embedded default, the whole promise in one go: start
# `sealvol serve`, publish a small model-like directory, publish a second
# version that changes one tensor, have the registry sync the same folder
# as a durable job (same digest), show what changed and what was sent,
# pull a version back by digest and check it is byte-identical, mount it by
# digest (FUSE; bytes stream in as they are read), list and read it,
# unmount, then stop the server. Cleans up on any exit: no mount, server or
# temporary folder is left behind.
set -euo pipefail
cd "$(dirname "$0")/.."
# The Go tools (containerd 2.x, oras, crane…) are the tests' peers.
SEALVOL_NO_GO_TOOLS=1 source scripts/deps.sh
cargo build --release --locked -p sealvol-cli
bin=$PWD/target/release/sealvol

work=$(mktemp -d)
mnt="$work/mnt"
server=
mounted() { grep -qsF " $mnt " /proc/self/mountinfo; }
cleanup() {
  # Detach the mount first (its process then exits), so that rm never
  # walks into it.
  if mounted; then "$bin" umount --lazy "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" 2>/dev/null || true; fi
  if [[ -n $server ]]; then kill "$server" 2>/dev/null && wait "$server" 2>/dev/null || true; fi
  if mounted; then
    echo "demo: $mnt is still mounted; unmount it with: fusermount3 -uz $mnt" >&2
  else
    rm -rf --one-file-system "$work"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM
export SEALVOL_CACHE_DIR="$work/cache"

model="$work/qwen-tiny"
# dir:// sync sources read only the folders registry.toml lists.
printf 'sync_dir_roots = ["%s"]\n' "$model" >"$work/registry.toml"

# Port 0: the registry picks a free port and prints it when it is ready.
"$bin" serve --config "$work/registry.toml" --addr 127.0.0.1:0 --root "$work/registry" >"$work/serve.out" &
server=$!
for _ in $(seq 100); do
  grep -q '^sealvol: serving' "$work/serve.out" 2>/dev/null && break
  sleep 0.1
done
addr=$(sed -n 's|^sealvol: serving OCI distribution on http://||p' "$work/serve.out")
[[ -n $addr ]] || { echo "demo: sealvol serve did not start" >&2; exit 1; }
export SEALVOL_REGISTRY=$addr
echo "== sealvol serve on $addr"

mkdir -p "$model/tokenizer"
printf '{"architectures":["Qwen3ForCausalLM"],"hidden_size":1024}\n' >"$model/config.json"
printf '{"version":"1.0"}\n' >"$model/tokenizer/tokenizer.json"
head -c $((64 << 20)) /dev/urandom >"$model/model-00001.safetensors"
head -c $((64 << 20)) /dev/urandom >"$model/model-00002.safetensors"
sleep 0.2 # files written within 100 ms are not trusted to the file-state cache

echo "== sealvol push $model bdn:weights/qwen-tiny --tag prod"
v1=$("$bin" push "$model" bdn:weights/qwen-tiny --tag prod)
echo "$v1"
echo "== push again, unchanged: nothing is sent"
"$bin" push "$model" bdn:weights/qwen-tiny --tag prod
echo "== change 1 MiB of one tensor file and push v2: only its chunks are sent"
head -c $((1 << 20)) /dev/urandom | dd of="$model/model-00002.safetensors" bs=1M seek=10 conv=notrunc status=none
v2=$("$bin" push "$model" bdn:weights/qwen-tiny)
echo "$v2"
echo "== sealvol sync start --source dir://$model --dest bdn:weights/qwen-synced:prod --wait"
echo "   (a durable job on the registry copies the folder itself: same bytes, same digest)"
synced=$("$bin" sync start --source "dir://$model" --dest bdn:weights/qwen-synced:prod --wait)
echo "$synced"
[[ ${synced##*@} == "${v2##*@}" ]] || { echo "demo: the synced version's digest differs from the pushed one" >&2; exit 1; }
echo "== sealvol diff bdn:weights/qwen-tiny:prod bdn:weights/qwen-tiny"
"$bin" diff bdn:weights/qwen-tiny:prod bdn:weights/qwen-tiny
echo "== sealvol versions bdn:weights/qwen-tiny"
"$bin" versions bdn:weights/qwen-tiny
echo "== sealvol ls $v2"
"$bin" ls "$v2" --recursive
echo "== sealvol pull $v2 (by digest) and compare"
"$bin" pull "$v2" "$work/pulled"
diff -r "$model" "$work/pulled" && echo "pulled tree is byte-identical"
echo "== sealvol cat ${v1}/config.json"
"$bin" cat "$v1/config.json"

# A fresh cache dir, as on a machine that never saw this volume: the bytes
# come from the registry as they are read.
echo "== sealvol mount $v2 $mnt --daemon (only the tree index is fetched)"
mkdir -p "$mnt"
"$bin" mount "$v2" "$mnt" --daemon --cache-dir "$work/mount-cache"
echo "== ls -la $mnt"
ls -la "$mnt"
echo "== cat $mnt/config.json"
cat "$mnt/config.json"
echo "== sha256sum of a tensor file, through the mount and at the source"
mounted_sum=$(sha256sum <"$mnt/model-00002.safetensors" | cut -d' ' -f1)
source_sum=$(sha256sum <"$model/model-00002.safetensors" | cut -d' ' -f1)
echo "mount:  $mounted_sum"
echo "source: $source_sum"
[[ $mounted_sum == "$source_sum" ]] || { echo "demo: the mounted file differs from the source" >&2; exit 1; }
diff -r "$model" "$mnt" && echo "mounted tree is byte-identical"
echo "== sealvol umount $mnt"
"$bin" umount "$mnt"
if mounted; then echo "demo: $mnt is still mounted after sealvol umount" >&2; exit 1; fi
echo "unmounted"
echo "== stop sealvol serve"
kill "$server" && wait "$server" 2>/dev/null || true
server=
echo "done"
