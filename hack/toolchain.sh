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
bin="$cache/bin/k8s-v$K8S_VERSION-etcd-v$ETCD_VERSION-kwok-v$KWOK_VERSION-helm-v$HELM_VERSION-v$HELM4_VERSION"
if [[ "${1:-}" == "--print" ]]; then echo "$bin"; exit 0; fi

export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
mkdir -p "$bin" "$cache/build"
start=$SECONDS
log() { printf '[toolchain %4ds] %s\n' $((SECONDS - start)) "$*" >&2; }

# Go prints one line per package with -v; turn that into a heartbeat every 200.
progress() { awk -v what="$1" '{n++; if (n % 200 == 0) { printf "[toolchain]   %s: %d packages compiled\n", what, n > "/dev/stderr"; fflush("/dev/stderr") } }'; }

have() { local f; for f in "$@"; do [[ -x "$bin/$f" ]] || return 1; done; }

# k8s.io/kubernetes carries replace directives to ./staging, which `go install
# pkg@version` refuses; a wrapper module replaces each staging module with its
# published twin instead. The control plane and the kubelet share it (and so
# Go's build cache: the kubelet costs little after the control plane).
k8s_module() {
  local dir="$cache/build/k8s-v$K8S_VERSION"
  mkdir -p "$dir"
  log "resolving k8s.io/kubernetes v$K8S_VERSION modules (first run downloads ~1 GiB)"
  # Its own go.mod says which staging modules to replace (1.37 added cri-streaming
  # and streaming to 1.35's 31), which Go it needs and its godebug defaults.
  local upstream
  upstream=$(cd "$cache/build" && go mod download -json "k8s.io/kubernetes@v$K8S_VERSION" |
    sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
  [[ -f "$upstream" ]] || { log "cannot download k8s.io/kubernetes v$K8S_VERSION"; return 1; }
  {
    echo "module rlix.local/k8sbuild"
    echo
    grep -E '^go [0-9]' "$upstream"
    echo
    grep -E '^godebug ' "$upstream" || true
    echo
    echo "require k8s.io/kubernetes v$K8S_VERSION"
    echo
    echo "replace ("
    sed -n 's|^[[:space:]]*\(k8s.io/[a-z0-9-]*\) => ./staging/src/k8s.io/[a-z0-9-]*$|\1|p' "$upstream" |
      while read -r m; do echo "	$m => $m v$K8S_STAGING_VERSION"; done
    echo ")"
  } >"$dir/go.mod"
  local minor=${K8S_VERSION#*.}; minor=${minor%%.*}
  local date; date=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  k8s_ldflags="-s -w"
  # Tools (kwokctl, kubectl) parse the server version: stamp it like the release build does.
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    k8s_ldflags+=" -X $p.gitVersion=v$K8S_VERSION -X $p.gitMajor=1 -X $p.gitMinor=$minor"
    k8s_ldflags+=" -X $p.gitTreeState=clean -X $p.buildDate=$date -X $p.gitCommit=v$K8S_VERSION"
  done
  k8s_dir=$dir
  (cd "$dir" && go get k8s.io/kubernetes@v$K8S_VERSION >/dev/null 2>&1 || true)
}

build_kubernetes() {
  have kube-apiserver kube-controller-manager kube-scheduler kubectl && return 0
  k8s_module
  log "compiling kube-apiserver, kube-controller-manager, kube-scheduler, kubectl (cold: 15-30 min on 2 cores)"
  (cd "$k8s_dir" && go build -mod=mod -v -ldflags "$k8s_ldflags" -o "$bin/" \
      k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
      k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl 2>&1 | progress kubernetes)
  have kube-apiserver kube-controller-manager kube-scheduler kubectl || { log "kubernetes build failed"; return 1; }
  log "kubernetes binaries ready"
}

# The real node's kubelet: same sources and version as the control plane. Built
# on its own so that adding it to an existing cache rebuilds nothing else.
build_kubelet() {
  have kubelet && return 0
  k8s_module
  log "compiling kubelet (45-90 s after the control plane, 3-5 min alone on 2 cores)"
  (cd "$k8s_dir" && go build -mod=mod -v -ldflags "$k8s_ldflags" -o "$bin/" \
      k8s.io/kubernetes/cmd/kubelet 2>&1 | progress kubelet)
  have kubelet || { log "kubelet build failed"; return 1; }
  log "kubelet ready"
}

# The real node's container runtime. containerd 2.x, not Debian's 1.6: the DRA
# work needs CDI, which 1.6 lacks. Its module has no replace directives, so
# `go install` builds it from the proxy (cold: ~7 min on 2 cores). btrfs, zfs and
# devmapper snapshotters need cgo; the node uses overlayfs. runc comes from Debian.
build_containerd() {
  if have containerd ctr containerd-shim-runc-v2 &&
    "$bin/containerd" --version | grep -q " v$CONTAINERD_VERSION "; then
    return 0
  fi
  log "compiling containerd v$CONTAINERD_VERSION, ctr, containerd-shim-runc-v2 (cold: ~7 min on 2 cores)"
  local m=github.com/containerd/containerd/v2
  GOBIN="$bin" go install -v -tags no_btrfs,no_devmapper,no_zfs \
    -ldflags "-s -w -X $m/version.Version=v$CONTAINERD_VERSION" \
    "$m/cmd/containerd@v$CONTAINERD_VERSION" "$m/cmd/ctr@v$CONTAINERD_VERSION" \
    "$m/cmd/containerd-shim-runc-v2@v$CONTAINERD_VERSION" 2>&1 | progress containerd
  have containerd ctr containerd-shim-runc-v2 || { log "containerd build failed"; return 1; }
  log "containerd ready"
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

# Helm 3 and Helm 4 side by side: the chart must work with both (users run
# either), so the chart tests run with each. `helm` is Helm 4, the current major.
build_helm() {
  have helm3 helm4 helm && return 0
  log "compiling helm v$HELM_VERSION and v$HELM4_VERSION"
  local major version gobin
  for version in "$HELM_VERSION" "$HELM4_VERSION"; do
    major=${version%%.*}
    have "helm$major" && continue
    gobin=$(mktemp -d "$cache/build/helm-v$version.XXXXXX")
    GOBIN="$gobin" go install -v \
      -ldflags "-s -w -X helm.sh/helm/v$major/internal/version.version=v$version" \
      "helm.sh/helm/v$major/cmd/helm@v$version" 2>&1 | progress "helm v$major"
    [[ -x "$gobin/helm" ]] && mv "$gobin/helm" "$bin/helm$major"
    rm -rf "$gobin"
  done
  ln -sfn helm4 "$bin/helm"
  have helm3 helm4 helm || { log "helm build failed"; return 1; }
  log "helm ready"
}

# Cluster DNS for the real node's pods: peers find each other by the headless
# Service names (<job>-<role>-<i>.<job>). CoreDNS's module has no replace
# directives; a main of our own that links only the plugins the node uses
# (CoreDNS's documented custom build: set dnsserver.Directives, call coremain.Run)
# compiles a fraction of the full server. The version is checked like containerd's.
build_coredns() {
  # Rebuilt when the version or the plugin list differs (`-plugins` also lists
  # metadata and transfer, which the kubernetes plugin links).
  local plugins="bind errors kubernetes metadata transfer"
  if have coredns && "$bin/coredns" -version 2>/dev/null | grep -q "CoreDNS-$COREDNS_VERSION\$" &&
    [[ "$("$bin/coredns" -plugins | xargs)" == "$plugins" ]]; then
    return 0
  fi
  local dir="$cache/build/coredns-v$COREDNS_VERSION"
  mkdir -p "$dir"
  cat >"$dir/main.go" <<'GO'
// CoreDNS with only the plugins the real test node needs, in CoreDNS's own order.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/kubernetes"
)

func init() {
	dnsserver.Directives = []string{"bind", "errors", "kubernetes"}
}

func main() { coremain.Run() }
GO
  printf 'module rlix.local/corednsbuild\n\ngo 1.26.0\n\nrequire github.com/coredns/coredns v%s\n' "$COREDNS_VERSION" >"$dir/go.mod"
  log "compiling coredns v$COREDNS_VERSION (bind, errors, kubernetes plugins only)"
  (cd "$dir" && go mod tidy >/dev/null 2>&1 && go build -v -ldflags "-s -w" -o "$bin/coredns" . 2>&1 | progress coredns)
  have coredns || { log "coredns build failed"; return 1; }
  log "coredns ready"
}

# Cheapest first, so a broken proxy shows up within a minute.
build_etcd
build_kwok
build_kubernetes
build_kubelet
build_helm
build_containerd
build_coredns
log "toolchain ready in $bin"
echo "$bin"
