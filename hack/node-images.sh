#!/usr/bin/env bash
# Builds the test cluster's real-node images with no registry, cached by content:
#   pause  a static C program (images/pause/pause.c), containerd's sandbox image
#   node   a minimal Debian root filesystem (debootstrap --variant=minbase, from the
#          apt mirror this machine already uses) with python3, the project's wheel
#          with the node agent's and the CLI's dependencies, and their console
#          scripts (rlix, rlix-node-agent) in /usr/local/bin
# Each is an OCI archive (umoci) that `ctr -n k8s.io images import` loads; pods use
# them with imagePullPolicy: Never.
#
#   hack/node-images.sh     build what is missing; print "<role> <image ref> <archive>" per image
#                           (the node agent's image is a second tag in the node archive)
#
# Cache: $RLIX_CACHE/images (default ~/.cache/rlix/images). The node image's tag is
# the payload's content key (rlix.devcluster.node_payload), so a warm run with
# unchanged sources only rebuilds the wheel (seconds) and reuses the archive.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
python=${PYTHON:-$root/.venv/bin/python}
cache=${RLIX_CACHE:-$HOME/.cache/rlix}/images
mkdir -p "$cache"
# One builder at a time (sessions run side by side): warm runs take seconds.
exec 9>"$cache/.lock"
flock 9
# This run's scratch space, inside the cache (same filesystem: archives are moved
# into place whole) and removed however the run ends.
tmp=$(mktemp -d "$cache/.run.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
log() { printf '[node-images %4ds] %s\n' $((SECONDS - start)) "$*" >&2; }

for tool in debootstrap umoci gcc; do
  command -v "$tool" >/dev/null || { log "$tool is missing: run hack/node-deps.sh"; exit 1; }
done

# The first Debian mirror apt is configured with (deb822 or one-line sources).
mirror() {
  local uri
  uri=$(grep -hoE '^URIs:\s*\S+' /etc/apt/sources.list.d/*.sources 2>/dev/null | head -1 | awk '{print $2}')
  [[ -n "$uri" ]] || uri=$(grep -hoE '^deb\s+\S+' /etc/apt/sources.list 2>/dev/null | head -1 | awk '{print $2}')
  echo "${uri:-http://deb.debian.org/debian}"
}

# layout ROOTFS_DIR LAYOUT_DIR TAG ENTRYPOINT...: one-layer OCI image layout.
layout() {
  local rootfs=$1 oci=$2 tag=$3; shift 3
  local work; work=$(mktemp -d "$tmp/pack.XXXXXX")
  umoci init --layout "$work/oci"
  umoci new --image "$work/oci:$tag"
  umoci unpack --image "$work/oci:$tag" "$work/bundle" >/dev/null
  cp -a "$rootfs/." "$work/bundle/rootfs/"
  umoci repack --image "$work/oci:$tag" "$work/bundle"
  local args=(--image "$work/oci:$tag" --config.env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin)
  for e in "$@"; do args+=(--config.entrypoint "$e"); done
  umoci config "${args[@]}"
  umoci gc --layout "$work/oci"
  rm -rf "$oci"
  mv "$work/oci" "$oci"
  rm -rf "$work"
}

# archive LAYOUT_DIR ARCHIVE: the tar `ctr images import` reads.
archive() {
  tar -C "$1" -cf "$2.tmp" .
  mv "$2.tmp" "$2"
}

build_pause() {
  local key; key=$(sha256sum "$root/images/pause/pause.c" | cut -c1-16)
  pause_tag=$key pause_archive="$cache/pause-$key.oci.tar"
  [[ -f "$pause_archive" ]] && return 0
  log "building the pause image (gcc -static)"
  local fs; fs=$(mktemp -d "$tmp/pause.XXXXXX")
  gcc -static -Os -o "$fs/pause" "$root/images/pause/pause.c"
  strip "$fs/pause"
  layout "$fs" "$fs.oci" "$key" /pause
  archive "$fs.oci" "$pause_archive"
  rm -rf "$fs" "$fs.oci"
}

# ensure_base: the Debian root filesystem and its one-layer OCI layout, built once
# per (suite, mirror, packages) and shared with hack/images.sh; sets $base.
ensure_base() {
  local suite; suite=$(. /etc/os-release && echo "$VERSION_CODENAME")
  local url; url=$(mirror)
  local packages=python3
  local base_key; base_key=$(printf '%s %s %s' "$suite" "$url" "$packages" | sha256sum | cut -c1-16)
  base="$cache/debian-$suite-minbase-$base_key"
  if [[ ! -f "$base/.complete" ]]; then
    log "debootstrap --variant=minbase $suite from $url (cold: 1-3 min)"
    rm -rf "$base"
    debootstrap --variant=minbase --include="$packages" "$suite" "$base/rootfs" "$url" >"$cache/debootstrap.log" 2>&1 ||
      { log "debootstrap failed; see $cache/debootstrap.log"; tail -5 "$cache/debootstrap.log" >&2; exit 1; }
    rm -rf "$base/rootfs/var/cache/apt/archives/"*.deb "$base/rootfs/var/lib/apt/lists/"*
    touch "$base/.complete"
  fi
  # The Debian layer is packed once per base; each payload is a layer of its own
  # on top, so a source change repacks megabytes, not the whole root filesystem.
  if [[ ! -f "$base/oci/.complete" ]]; then
    log "packing the Debian layer (once per base)"
    layout "$base/rootfs" "$base/oci" base python3
    touch "$base/oci/.complete"
  fi
}

build_node() {
  ensure_base
  local payload; payload=$(mktemp -d "$tmp/payload.XXXXXX")
  local key
  key=$(PYTHONPATH="$root" "$python" -m rlix.devcluster.node_payload "$payload")
  node_tag=$key node_archive="$cache/node-$key.oci.tar"
  if [[ -f "$node_archive" ]]; then
    touch "$node_archive"  # most recently used: kept by the pruning below
  else
    log "adding the rlix payload layer (key $key)"
    local oci; oci=$(mktemp -d "$tmp/node.XXXXXX")
    cp -a "$base/oci/." "$oci/"
    rm -f "$oci/.complete"
    umoci insert --image "$oci:base" "$payload/dist-packages" /usr/lib/python3/dist-packages
    umoci insert --image "$oci:base" "$payload/bin" /usr/local/bin
    umoci tag --image "$oci:base" "$key"
    # The same layers with the node agent as entrypoint, for the chart's DaemonSet
    # (its container sets only args, as the node-agent/ Dockerfile's image expects).
    umoci config --image "$oci:$key" --tag "agent-$key" --config.entrypoint rlix-node-agent
    umoci rm --image "$oci:base"
    umoci gc --layout "$oci"
    archive "$oci" "$node_archive"
    rm -rf "$oci"
  fi
  rm -rf "$payload"
  # Each source change makes a new archive (~70 MiB): keep the 3 most recently used.
  ls -t "$cache"/node-*.oci.tar | tail -n +4 | xargs -r rm -f
}

# hack/images.sh sources this file for its functions (and shares the lock above).
[[ "${BASH_SOURCE[0]}" == "$0" ]] || return 0
build_pause
build_node
log "images ready in $cache"
echo "pause rlix.local/pause:$pause_tag $pause_archive"
echo "node rlix.local/node:$node_tag $node_archive"
echo "agent rlix.local/node:agent-$node_tag $node_archive"
