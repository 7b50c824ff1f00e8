#!/usr/bin/env bash
# `make images`: the RLix images as OCI archives, built here without any registry
# or Docker, by one recipe (rlix/devcluster/component_images.py):
#   rlix-operator, rlix-extender, rlix-node-agent
#          the real node's Debian image (hack/node-images.sh: minbase + python3)
#          with one payload layer (the project's wheel with every component's
#          extra, rlix.devcluster.node_payload), one archive per component with
#          its entrypoint and user (65532 where the chart runs it non-root)
#   kube-scheduler
#          the toolchain's kube-scheduler binary (statically linked), tagged with
#          its own version: the tag the chart defaults to on that cluster
#
#   hack/images.sh [OUT_DIR]   (default build/images) prints "<repository> <tag> <archive>"
#                              per image; progress goes to stderr
#
# Load one with `ctr -n k8s.io images import --base-name <registry>/<repository> ARCHIVE`
# (or `skopeo copy oci-archive:ARCHIVE docker://...` to push it). Cached by
# content: the tag is a key over the payload, the base, the recipe and this
# script, so a warm run with unchanged sources rebuilds only the wheel.
set -euo pipefail
# The Debian base, its lock and the OCI helpers (layout, archive) are the node image's.
# shellcheck source=hack/node-images.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/node-images.sh"
log() { printf '[images %4ds] %s\n' $((SECONDS - start)) "$*" >&2; }
out=$(realpath -m "${1:-$root/build/images}")
mkdir -p "$out"
bin=${RLIX_TOOLCHAIN_BIN:-$("$root/hack/toolchain.sh" --print)}

recipe=$(PYTHONPATH="$root" "$python" -m rlix.devcluster.component_images)
extras=$(PYTHONPATH="$root" "$python" -c \
  'from rlix.devcluster.component_images import PAYLOAD_EXTRAS as e; print(",".join(e))')

ensure_base
log "building the payload (wheel with extras $extras)"
payload=$(mktemp -d "$tmp/payload.XXXXXX")
payload_key=$(PYTHONPATH="$root" "$python" -m rlix.devcluster.node_payload "$payload" "$extras")
key=$(printf '%s\n' "$payload_key" "$base" "$recipe" "$(sha256sum "${BASH_SOURCE[0]}")" |
  sha256sum | cut -c1-16)

# The payload on the Debian layer, once; each component adds only a config.
staged="$tmp/staged"
need=0
while read -r repository _ _ _; do
  [[ -f "$out/$repository-$key.oci.tar" ]] || need=1
done <<<"$recipe"
if ((need)); then
  log "adding the payload layer (key $key)"
  cp -a "$base/oci/." "$staged/"
  rm -f "$staged/.complete"
  umoci insert --image "$staged:base" "$payload/dist-packages" /usr/lib/python3/dist-packages
  umoci insert --image "$staged:base" "$payload/bin" /usr/local/bin
  # The non-root user gets a name: kopf (getpass.getuser) and others look the
  # uid up in /etc/passwd, and die without an entry.
  etc=$(mktemp -d "$tmp/etc.XXXXXX")
  cp "$base/rootfs/etc/passwd" "$base/rootfs/etc/group" "$etc/"
  while read -r _ _ _ user; do
    [[ "$user" == - ]] || grep -q "^nonroot:" "$etc/passwd" || {
      echo "nonroot:x:${user%%:*}:${user#*:}:nonroot:/nonexistent:/usr/sbin/nologin" >>"$etc/passwd"
      echo "nonroot:x:${user#*:}:" >>"$etc/group"
    }
  done <<<"$recipe"
  umoci insert --image "$staged:base" "$etc/passwd" /etc/passwd
  umoci insert --image "$staged:base" "$etc/group" /etc/group
fi
while read -r repository extra entrypoint user; do
  archive_path="$out/$repository-$key.oci.tar"
  if [[ -f "$archive_path" ]]; then
    log "$repository:$key cached"
  else
    log "packing $repository:$key (extra $extra, entrypoint $entrypoint, user ${user/-/root})"
    oci=$(mktemp -d "$tmp/$repository.XXXXXX")
    cp -a "$staged/." "$oci/"
    args=(--image "$oci:base" --tag "$key" --config.entrypoint "$entrypoint")
    [[ "$user" == - ]] || args+=(--config.user "$user")
    umoci config "${args[@]}"
    umoci rm --image "$oci:base"
    umoci gc --layout "$oci"
    archive "$oci" "$archive_path"
    rm -rf "$oci"
  fi
  echo "$repository $key $archive_path"
done <<<"$recipe"

# The scheduler: the cluster's own kube-scheduler, nothing else in the image.
version=$("$bin/kube-scheduler" --version | awk '{print $2}')
sched_key=$(sha256sum "$bin/kube-scheduler" | cut -c1-16)
sched_user=$(PYTHONPATH="$root" "$python" -c \
  'from rlix.devcluster.component_images import SCHEDULER_USER as u; print(u)')
sched_archive="$out/kube-scheduler-$version-$sched_key.oci.tar"
if [[ -f "$sched_archive" ]]; then
  log "kube-scheduler:$version cached"
else
  log "packing kube-scheduler:$version from $bin"
  fs=$(mktemp -d "$tmp/scheduler.XXXXXX")
  mkdir -p "$fs/usr/local/bin"
  cp "$bin/kube-scheduler" "$fs/usr/local/bin/"
  layout "$fs" "$fs.oci" "$version" /usr/local/bin/kube-scheduler
  umoci config --image "$fs.oci:$version" --config.user "$sched_user"
  umoci gc --layout "$fs.oci"
  archive "$fs.oci" "$sched_archive"
  rm -rf "$fs" "$fs.oci"
fi
echo "kube-scheduler $version $sched_archive"
# Older keys of this output directory go: it holds the current images only.
current=$(printf '%s\n' "$out"/*"-$key.oci.tar" "$sched_archive")
for old in "$out"/*.oci.tar; do
  grep -qxF "$old" <<<"$current" || rm -f "$old"
done
log "images ready in $out"
