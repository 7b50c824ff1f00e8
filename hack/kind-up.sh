#!/usr/bin/env bash
# kind path for users with a Docker engine: a kind cluster, kwok fake GPU nodes
# (the kwok controller runs on the host against the kind API server), and a
# kubeconfig the e2e suite can target:
#
#   make kind-up                          create it
#   RLIX_E2E_KUBECONFIG=$(hack/kind-up.sh --kubeconfig) make test-cluster
#   hack/kind-up.sh --down                delete it
#
# Without a running Docker engine it prints why and exits 0 (this tier may skip).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
source "$here/versions.env"
KIND_VERSION=${KIND_VERSION:-0.33.0}
name=${KIND_CLUSTER:-rlix}
cache=${RLIX_CACHE:-$HOME/.cache/rlix}
kubeconfig="$cache/kind/$name.kubeconfig"

if [[ "${1:-}" == "--kubeconfig" ]]; then echo "$kubeconfig"; exit 0; fi
check_only=false; [[ "${1:-}" == "--check" ]] && check_only=true

if ! command -v docker >/dev/null 2>&1; then
  echo "kind tier skipped: no docker client on this machine"; exit 0
fi
if ! reason=$(docker info --format '{{.ServerVersion}}' 2>&1); then
  echo "kind tier skipped: no Docker engine answers (docker info: ${reason##*$'\n'})"; exit 0
fi

if $check_only; then echo "kind tier available: Docker engine $reason answers (run make kind-up)"; exit 0; fi

export GOTOOLCHAIN=local
bin=$("$here/toolchain.sh")
kind="$cache/bin/kind-v$KIND_VERSION/kind"
if [[ ! -x "$kind" ]]; then
  echo "==> building kind v$KIND_VERSION"
  GOBIN="$(dirname "$kind")" go install "sigs.k8s.io/kind@v$KIND_VERSION"
fi

if [[ "${1:-}" == "--down" ]]; then
  [[ -f "$cache/kind/$name.kwok.pid" ]] && kill "$(cat "$cache/kind/$name.kwok.pid")" 2>/dev/null || true
  "$kind" delete cluster --name "$name"; rm -f "$kubeconfig"; exit 0
fi

mkdir -p "$cache/kind"
if ! "$kind" get clusters 2>/dev/null | grep -qx "$name"; then
  echo "==> creating kind cluster $name"
  "$kind" create cluster --name "$name" --kubeconfig "$kubeconfig" --wait 120s
fi
"$kind" get kubeconfig --name "$name" >"$kubeconfig"

echo "==> starting the kwok controller on the host for fake GPU nodes"
if [[ -f "$cache/kind/$name.kwok.pid" ]] && kill -0 "$(cat "$cache/kind/$name.kwok.pid")" 2>/dev/null; then
  echo "    already running"
else
  nohup "$bin/kwok" --kubeconfig "$kubeconfig" \
    --manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake \
    >"$cache/kind/$name.kwok.log" 2>&1 &
  echo $! >"$cache/kind/$name.kwok.pid"
fi

echo "==> applying fake GPU nodes"
"$root/.venv/bin/python" - "$kubeconfig" "$bin/kubectl" <<'PY'
import subprocess, sys, yaml
from rlix.devcluster.manifests import gpu_nodes
subprocess.run([sys.argv[2], "--kubeconfig", sys.argv[1], "apply", "-f", "-"],
               input=yaml.safe_dump_all(gpu_nodes(4)), text=True, check=True)
PY
echo
echo "kind cluster '$name' is up. Use it:"
echo "  export KUBECONFIG=$kubeconfig"
echo "  RLIX_E2E_KUBECONFIG=$kubeconfig make test-cluster   # the e2e suite against kind"
