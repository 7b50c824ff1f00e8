#!/usr/bin/env bash
# Builds the local control-plane toolchain from the Go module proxy and caches it
# by version outside the checkout, so a fresh clone (and CI) reuse earlier builds.
#
#   hack/toolchain.sh            build whatever is missing, print the bin directory
#   hack/toolchain.sh --print    only print the bin directory (builds nothing)
#
# Binaries land in $RLIX_CACHE/bin/<version>/ (default ~/.cache/rlix).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=versions.env
source "$here/versions.env"

cache=${RLIX_CACHE:-$HOME/.cache/rlix}
bin="$cache/bin/k8s-v$K8S_VERSION-etcd-v$ETCD_VERSION-kwok-v$KWOK_VERSION-helm-v$HELM_VERSION"
if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi

export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
mkdir -p "$bin" "$cache/build"
start=$SECONDS
log() { printf '[toolchain %4ds] %s\n' $((SECONDS - start)) "$*" >&2; }

# Go prints one line per package with -v; turn that into a heartbeat every 200.
progress() { awk -v what="$1" '{n++; if (n % 200 == 0) { printf "[toolchain]   %s: %d packages compiled\n", what, n > "/dev/stderr"; fflush("/dev/stderr") } }'; }

have() { local f; for f in "$@"; do [[ -x "$bin/$f" ]] || return 1; done; }

build_kubernetes() {
  have kube-apiserver kube-controller-manager kube-scheduler kubectl && return 0
  local dir="$cache/build/k8s-v$K8S_VERSION"
  mkdir -p "$dir"
  # k8s.io/kubernetes carries replace directives to ./staging, which `go install
  # pkg@version` refuses; a wrapper module replaces each staging module with its
  # published twin instead.
  {
    echo "module rlix.local/k8sbuild"
    echo
    echo "go 1.25.0"
    echo
    echo "godebug default=go1.25"
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo
    echo "replace ("
    for m in api apiextensions-apiserver apimachinery apiserver cli-runtime client-go \
      cloud-provider cluster-bootstrap code-generator component-base component-helpers \
      controller-manager cri-api cri-client csi-translation-lib dynamic-resource-allocation \
      endpointslice externaljwt kms kube-aggregator kube-controller-manager kube-proxy \
      kube-scheduler kubectl kubelet metrics mount-utils pod-security-admission \
      sample-apiserver sample-cli-plugin sample-controller; do
      echo "	k8s.io/$m => k8s.io/$m v$K8S_STAGING_VERSION"
    done
    echo ")"
  } >"$dir/go.mod"
  local minor=${K8S_VERSION#*.}; minor=${minor%%.*}
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  local ld="-s -w"
  # Tools (kwokctl, kubectl) parse the server version: stamp it like the release build does.
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    ld+=" -X $p.gitTreeState=clean -X $p.buildDate=$date -X $p.gitCommit=v$K8S_VERSION"
  done
  log "resolving k8s.io/kubernetes v$K8S_VERSION modules (first run downloads ~1 GiB)"
  (cd "$dir" && go mod download k8s.io/kubernetes && go get k8s.io/kubernetes@v$K8S_VERSION >/dev/null 2>&1 || true)
  log "compiling kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (cold: 15-30 min on 2 cores)"
  (cd "$dir" && go build -mod=mod -v -ldflags "$ld" -o "$bin/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl 2>&1 | progress kubernetes)
  have kube-apiserver kube-controller-manager kube-scheduler kubectl || { log "kubernetes build failed"; return 1; }
  log "kubernetes binaries ready"
}

build_etcd() {
  have etcd && return 0
  local dir="$cache/build/etcd-v$ETCD_VERSION"
  mkdir -p "$dir"
  # etcd's own go.mod has replace directives too: wrap etcdmain.Main in a one-line main.
  cat >"$dir/main.go" <<'GO'
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
GO
  printf 'module rlix.local/etcdbuild\n\ngo 1.26.0\n\nrequire go.etcd.io/etcd/server/v3 v%s\n' "$ETCD_VERSION" >"$dir/go.mod"
  log "compiling etcd v$ETCD_VERSION"
  (cd "$dir" && go mod tidy >/dev/null 2>&1 && go build -v -ldflags "-s -w" -o "$bin/etcd" . 2>&1 | progress etcd)
  have etcd || { log "etcd build failed"; return 1; }
  log "etcd ready"
}

build_kwok() {
  have kwok kwokctl && return 0
  log "compiling kwok and kwokctl v$KWOK_VERSION"
  local ld="-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=v$KWOK_VERSION"
  GOBIN="$bin" go install -v -ldflags "$ld" "sigs.k8s.io/kwok/cmd/kwok@v$KWOK_VERSION" \
    "sigs.k8s.io/kwok/cmd/kwokctl@v$KWOK_VERSION" 2>&1 | progress kwok
  have kwok kwokctl || { log "kwok build failed"; return 1; }
  log "kwok ready"
}

build_helm() {
  have helm && return 0
  log "compiling helm v$HELM_VERSION"
  local ld="-s -w -X helm.sh/helm/v3/internal/version.version=v$HELM_VERSION"
  GOBIN="$bin" go install -v -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@v$HELM_VERSION" 2>&1 | progress helm
  have helm || { log "helm build failed"; return 1; }
  log "helm ready"
}

# Cheapest first, so a broken proxy shows up within a minute.
build_etcd
build_kwok
build_kubernetes
build_helm
log "toolchain ready in $bin"
echo "$bin"
