#!/usr/bin/env bash
# deploy/ checked offline, with no cluster and no container engine (ctest
# deploy_manifests):
#   run.sh CUBICLE_BINARY WORK_DIR
# 1. every manifest against the Kubernetes API's schema and types, and
#    against what cubicle needs of it (validate.mjs); the kustomizations
#    rendered by `kubectl kustomize` where kubectl is installed;
# 2. that the validator refuses a manifest with a misspelt field;
# 3. the ConfigMap's config.json and the Secret's keys.json, and the
#    image's own config, accepted by `cubicle serve --check-config`;
# 4. the image's entrypoint refusing a keys file that holds a placeholder;
# 5. the readiness probe (deploy/container/readyz.py) against a real
#    daemon: ready once its pools are warm, not ready with a wrong key.
# Exits 77 (skipped) without node and npm, or when npm cannot fetch the
# validator's packages; node_modules lives in WORK_DIR, never the sources.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
k8s=$(dirname "$here")
root=$(cd "$k8s/../.." && pwd)
bin=$1
work=$2

skip() {
  echo "SKIP: $*"
  exit 77
}
command -v node >/dev/null || skip "node is not installed (Debian: apt-get install nodejs npm)"
command -v npm >/dev/null || skip "npm is not installed (Debian: apt-get install npm)"
major=$(node -p 'process.versions.node.split(".")[0]')
((major >= 18)) || skip "node $major is older than 18, which the validator needs"

mkdir -p "$work"
# Installed again only when the lock file changed since the last run.
if ! cmp -s "$here/package-lock.json" "$work/package-lock.json" || [[ ! -d $work/node_modules ]]; then
  rm -rf "$work/node_modules" "$work/package-lock.json"
  cp "$here/package.json" "$work/"
  cp "$here/package-lock.json" "$work/package-lock.json.new"
  mv "$work/package-lock.json.new" "$work/package-lock.json"
  if ! (cd "$work" && timeout 300 npm ci --no-audit --no-fund --prefer-offline >"$work/npm.log" 2>&1); then
    rm -f "$work/package-lock.json"  # so that the next run tries again
    skip "npm ci could not install the validator's packages (no registry?): $(tail -n 3 "$work/npm.log" | tr '\n' ' ')"
  fi
fi
cp "$here/validate.mjs" "$work/"

tmp=$(mktemp -d)
daemon=
cleanup() {
  if [[ -n $daemon ]]; then
    kill -TERM "$daemon" 2>/dev/null || true
    wait "$daemon" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

echo "== 1. the manifests"
# The overlay's patch is a fragment, not an object: it is checked rendered.
node "$work/validate.mjs" --extract "$tmp" "$k8s"/base/*.yaml "$k8s"/overlays/shared-archives/archives-pvc.yaml
if command -v kubectl >/dev/null; then
  for k in base overlays/shared-archives; do
    out="$tmp/rendered-${k//\//-}.yaml"
    kubectl kustomize "$k8s/$k" >"$out"
    echo "kubectl kustomize $k:"
    node "$work/validate.mjs" "$out"
  done
else
  echo "note: kubectl is not installed: the kustomizations, and so the shared-archives patch, are not rendered and checked"
fi

echo "== 2. the validator refuses a misspelt field"
sed 's/readinessProbe:/readinesProbe:/' "$k8s/base/daemonset.yaml" >"$tmp/misspelt.yaml"
if node "$work/validate.mjs" "$tmp/misspelt.yaml" 2>"$tmp/misspelt.err"; then
  echo "FAIL: a DaemonSet with 'readinesProbe' passed" >&2
  exit 1
fi
grep -q readinesProbe "$tmp/misspelt.err" || { cat "$tmp/misspelt.err" >&2; exit 1; }
echo "refused: $(head -n 1 "$tmp/misspelt.err")"

echo "== 3. the configurations, as the daemon reads them"
"$bin" serve --check-config --config "$tmp/config.json" --keys-file "$tmp/keys.json" --listen 127.0.0.1:8080
"$bin" serve --check-config --config "$root/deploy/container/config.json"

echo "== 4. the entrypoint refuses placeholder keys"
if sh "$root/deploy/container/entrypoint.sh" serve --check-config --keys-file "$tmp/keys.json" 2>"$tmp/entry.err"; then
  echo "FAIL: the entrypoint accepted a keys file with placeholders" >&2
  exit 1
fi
grep -q "placeholder" "$tmp/entry.err" || { cat "$tmp/entry.err" >&2; exit 1; }
cat "$tmp/entry.err"

echo "== 5. the readiness probe against a daemon"
# Real keys for this one daemon, on loopback, with the built-in profiles.
key=$(python3 -c 'import secrets; print(secrets.token_hex(24))')
printf '{"keys": [{"name": "monitor", "key": "%s", "methods": ["health"]}]}' "$key" >"$tmp/probe-keys.json"
chmod 600 "$tmp/probe-keys.json"
printf '%s\n' "$key" >"$tmp/probe.key"
printf 'not-%s\n' "$key" >"$tmp/wrong.key"
"$bin" serve --listen 127.0.0.1:0 --listen-port-file "$tmp/port" --keys-file "$tmp/probe-keys.json" \
  </dev/null >/dev/null 2>"$tmp/daemon.log" &
daemon=$!
for _ in $(seq 300); do
  [[ -s $tmp/port ]] || ! kill -0 "$daemon" 2>/dev/null && break
  sleep 0.1
done
if [[ ! -s $tmp/port ]]; then
  echo "note: the daemon did not start here, so the probe is not checked: $(tail -n 2 "$tmp/daemon.log")"
  exit 0
fi
export CUBICLE_READYZ_URL="http://127.0.0.1:$(cat "$tmp/port")/readyz"
ready=1
for _ in $(seq 300); do  # until its pools are warm, or a bound for failures
  if CUBICLE_PROBE_KEY_FILE="$tmp/probe.key" python3 -I "$root/deploy/container/readyz.py" >"$tmp/ready.out" 2>&1; then
    ready=0
    break
  fi
  sleep 0.1
done
((ready == 0)) || { echo "FAIL: never ready: $(cat "$tmp/ready.out")" >&2; exit 1; }
echo "ready: $(cat "$tmp/ready.out")"
rc=0
CUBICLE_PROBE_KEY_FILE="$tmp/wrong.key" python3 -I "$root/deploy/container/readyz.py" >"$tmp/wrong.out" 2>&1 || rc=$?
((rc == 1)) || { echo "FAIL: a wrong key gave $rc, not 1: $(cat "$tmp/wrong.out")" >&2; exit 1; }
echo "not ready with a wrong key: $(cat "$tmp/wrong.out")"
echo "deploy checks passed"
