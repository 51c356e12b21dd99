#!/usr/bin/env bash
# Checks deploy/: the systemd units with systemd-analyze verify, and the
# Helm chart (helm lint, helm template, deploy/validate). Run by test.sh
# after the build (it needs target/debug/sealvol).
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

# Helm: deploy/helm/sealvol linted (--strict) with each values file of
# deploy/helm/ci, rendered, and every rendered document checked by
# deploy/validate (strict decoding into client-go's typed objects, then
# apimachinery's validation; ServiceMonitors only for shape). helm comes
# from scripts/deps.sh (.deps/go/bin/helm); without it this fails.
helm=${HELM:-$PWD/.deps/go/bin/helm}
if [[ ! -x $helm ]]; then
  echo "check-deploy.sh: no helm at $helm: run 'source scripts/deps.sh' (it builds helm v4 into .deps/go)" >&2
  exit 1
fi
# go.sum is complete: no -mod=mod, the build fails on a missing sum.
(cd deploy/validate && go build -buildvcs=false -o "$work/validate" .)
chart=deploy/helm/sealvol
for values in deploy/helm/ci/*.yaml; do
  out=$("$helm" lint --strict "$chart" -f "$values" 2>&1) || {
    echo "helm lint --strict $chart -f $values: $out" >&2
    exit 1
  }
  "$helm" template sealvol "$chart" --namespace sealvol -f "$values" >"$work/rendered.yaml" || {
    echo "helm template $chart -f $values failed" >&2
    exit 1
  }
  out=$("$work/validate" <"$work/rendered.yaml" 2>&1) || {
    echo "$values: $out" >&2
    exit 1
  }
  echo "$values: $out" | tr '\n' ' ' && echo
done
# The static pod alone, as the test suite renders it: one bare Pod.
out=$("$helm" template sealvol "$chart" --set registry.mode=StaticPod --set node.enabled=false \
  --set registry.image=registry.example.com/sealvol:test --set registry.staticPod.addr=127.0.0.1:5999 \
  --set registry.staticPod.dataDir=/tmp/sealvol-static | "$work/validate")
if [[ $out != "schema-checked (1): Pod/"* ]]; then
  echo "static pod mode rendered more than one Pod: $out" >&2
  exit 1
fi

# The example pods of deploy/examples, which the kubelet tests run.
for example in deploy/examples/*.yaml; do
  out=$("$work/validate" <"$example" 2>&1) || {
    echo "$example: $out" >&2
    exit 1
  }
done

# What rendering must refuse, each with the chart's message.
expect_fail() {
  local want=$1
  shift
  local out
  if out=$("$helm" template sealvol "$chart" "$@" 2>&1); then
    echo "helm template $chart $*: rendered, but must fail with: $want" >&2
    exit 1
  fi
  if [[ $out != *"$want"* ]]; then
    echo "helm template $chart $*: failed without \"$want\": $out" >&2
    exit 1
  fi
}
expect_fail "registry: TLS is required"
expect_fail "registry: [auth] is required" --set registry.tls.existingSecret=tls
expect_fail "needs shared storage" --set registry.tls.existingSecret=tls \
  --set registry.auth.htpasswd.existingSecret=htpasswd --set registry.replicas=3
expect_fail "is not a registry.toml key" --set registry.allowPlainHttp=true \
  --set registry.allowAnonymousWrites=true --set registry.settings.test_clock=true
expect_fail "set node.snapshotter.signatures.keys (PEM by name) or keysConfigMap" --set registry.allowPlainHttp=true \
  --set registry.allowAnonymousWrites=true \
  --set-json 'node.snapshotter.signatures.trust=[{"repositories":["weights/**"],"keys":["release.pub"]}]'
expect_fail "names the key \"other.pub\", not in node.snapshotter.signatures.keys" \
  --set registry.allowPlainHttp=true --set registry.allowAnonymousWrites=true \
  --set-json 'node.snapshotter.signatures={"trust":[{"repositories":["a/*"],"keys":["other.pub"]}],"keys":{"release.pub":"x"}}'
# The validator is strict: an unknown field fails.
"$helm" template sealvol "$chart" -f deploy/helm/ci/default-values.yaml |
  sed 's/readOnly: true/readonly: true/' >"$work/bad.yaml"
if out=$("$work/validate" <"$work/bad.yaml" 2>&1) || [[ $out != *'unknown field'* ]]; then
  echo "deploy/validate accepted an unknown field: $out" >&2
  exit 1
fi
echo "deploy/helm: chart linted, rendered and validated"
