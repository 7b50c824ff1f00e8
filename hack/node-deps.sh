#!/usr/bin/env bash
# Installs, from Debian packages, what the test cluster's real node needs on this
# machine, and nothing when it is all there already (so `make test` may call it
# every time). kubelet and containerd are not here: hack/toolchain.sh builds them
# from the Go module proxy, at the versions of hack/versions.env.
#   runc                        the OCI runtime containerd's shim calls
#   containernetworking-plugins bridge, host-local, loopback for pod networking
#   debootstrap, umoci          the node image: Debian minbase root filesystem, packed as OCI
#   gcc, libc6-dev              the static pause binary
#   iproute2, util-linux        veth pair, nsenter/unshare for the node's namespaces
set -euo pipefail
need=()
command -v runc >/dev/null || need+=(runc)
[[ -x /usr/lib/cni/bridge && -x /usr/lib/cni/host-local && -x /usr/lib/cni/loopback ]] ||
  need+=(containernetworking-plugins)
command -v debootstrap >/dev/null || need+=(debootstrap)
command -v umoci >/dev/null || need+=(umoci)
command -v gcc >/dev/null || need+=(gcc)
[[ -f /usr/lib/x86_64-linux-gnu/libc.a || -f /usr/lib/aarch64-linux-gnu/libc.a ]] || need+=(libc6-dev)
command -v ip >/dev/null || need+=(iproute2)
command -v nsenter >/dev/null && command -v unshare >/dev/null || need+=(util-linux)
if ((${#need[@]} == 0)); then exit 0; fi
if [[ $(id -u) != 0 ]]; then
  echo "node-deps: the real node needs ${need[*]}; run as root: apt-get install ${need[*]}" >&2
  exit 1
fi
echo "node-deps: installing ${need[*]} (Debian packages)" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >&2
apt-get install -y -q --no-install-recommends "${need[@]}" >&2
