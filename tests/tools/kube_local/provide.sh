#!/usr/bin/env bash
# provide.sh - print the directory holding the Kubernetes 1.20.2 binaries the cluster tests run
# (etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl), making it first if needed.
#
# Where they come from, first that works:
#   1. the machine's cache (tests/tools/cache_dir.sh): kube-local/<RECIPE>/bin, checked against the
#      SHA256SUMS recorded beside it when it was made (a damaged entry is made again);
#   2. a prebuilt kit: $KUBE_LOCAL_KIT/bin.tar.xz (default: ../shared/tools/kube-local beside the
#      checkout), used only when every binary in it matches tests/tools/kube_local/SHA256SUMS -- the
#      checksums are ours, so a kit that differs is never run;
#   3. a build from Debian bookworm's `kubernetes` source with Debian's Go (build.sh beside this file;
#      ~6 min on 2 cores, downloads sha256-pinned, nothing installed).
# The result goes into the cache atomically (one maker at a time, under a lock), so a second checkout
# on this machine, a clean CI clone included, starts at step 1.
# Env: KUBE_LOCAL_KIT       a kit directory with bin.tar.xz (optional)
#      KUBE_LOCAL_NO_BUILD  1: fail instead of building from source (say why)
#      GPUSTACK_TEST_CACHE  the cache directory (see tests/tools/cache_dir.sh)
# Output: the bin directory on stdout (last line); progress on stderr. Also caches busybox-static's
# .deb (the pods' image) in kube-local/<RECIPE>/dl, which up.sh takes as KUBE_LOCAL_DL.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../../.." && pwd)
# What the binaries are made from; a new recipe (build.sh's source, patches, pins) is a new name.
RECIPE=k8s-1.20.2-deb12u1-etcd-3.4.23-r1
NAMES="etcd kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl"
CACHE=$(bash "$REPO/tests/tools/cache_dir.sh")
ENTRY=$CACHE/kube-local/$RECIPE
KIT=${KUBE_LOCAL_KIT:-$REPO/../shared/tools/kube-local}
log() { echo "kube-local provide: $*" >&2; }

verify() { # verify DIR: every binary present and equal to DIR/../SHA256SUMS
  local d=$1
  [ -f "$d/../SHA256SUMS" ] || return 1
  for n in $NAMES; do [ -x "$d/$n" ] || return 1; done
  (cd "$d" && sha256sum --quiet -c ../SHA256SUMS >/dev/null 2>&1)
}

mkdir -p "$ENTRY"
exec 9>"$ENTRY/.lock"
flock 9
if verify "$ENTRY/bin"; then
  fetch_busybox=1
else
  rm -rf "$ENTRY/bin" "$ENTRY/SHA256SUMS" "$ENTRY/ORIGIN" "$ENTRY/bin.new"
  mkdir -p "$ENTRY/bin.new"
  origin=""
  if [ -f "$KIT/bin.tar.xz" ]; then
    log "unpacking the prebuilt kit $KIT/bin.tar.xz"
    if tar -xJf "$KIT/bin.tar.xz" -C "$ENTRY/bin.new" && (cd "$ENTRY/bin.new" && sha256sum --quiet -c "$HERE/SHA256SUMS" >&2); then
      cp "$HERE/SHA256SUMS" "$ENTRY/SHA256SUMS"
      origin="prebuilt kit $KIT/bin.tar.xz (checksums of tests/tools/kube_local/SHA256SUMS)"
    else
      log "the kit's binaries do not match tests/tools/kube_local/SHA256SUMS: not used, building from source"
      rm -rf "$ENTRY/bin.new"; mkdir -p "$ENTRY/bin.new"
    fi
  else
    log "no prebuilt kit at $KIT (KUBE_LOCAL_KIT names another): building from Debian's source"
  fi
  if [ -z "$origin" ]; then
    if [ "${KUBE_LOCAL_NO_BUILD:-}" = 1 ]; then
      log "KUBE_LOCAL_NO_BUILD=1 and no usable kit: remedy: unset KUBE_LOCAL_NO_BUILD (a ~6 min build) or point KUBE_LOCAL_KIT at a kit whose bin.tar.xz matches $HERE/SHA256SUMS"
      exit 1
    fi
    W=$ENTRY/build
    mkdir -p "$W"
    log "building (log: $W/build.log; ~6 min on 2 cores)"
    if ! KUBE_LOCAL_DL=$ENTRY/dl nice -n 19 bash "$HERE/build.sh" "$W" >"$W/build.log" 2>&1; then
      tail -30 "$W/build.log" >&2
      log "the build failed (whole log: $W/build.log); remedy: see its last lines above (network to the Debian mirror, disk space)"
      exit 1
    fi
    for n in $NAMES; do cp "$W/bin/$n" "$ENTRY/bin.new/$n"; done
    (cd "$ENTRY/bin.new" && sha256sum $NAMES) >"$ENTRY/SHA256SUMS"
    rm -rf "$W/src" "$W/tools" "$W/home"   # ~2 GB of tree; the downloads (dl/) stay for the next build
    origin="built from Debian's source by tests/tools/kube_local/build.sh"
  fi
  chmod 0755 "$ENTRY/bin.new"/*
  echo "$origin" >"$ENTRY/ORIGIN"
  mv "$ENTRY/bin.new" "$ENTRY/bin"
  verify "$ENTRY/bin" || { log "the binaries in $ENTRY/bin do not match $ENTRY/SHA256SUMS just written"; exit 1; }
  log "ready: $ENTRY/bin ($origin)"
fi
# busybox-static's .deb: the rootfs of the pods' image (up.sh); fetched once with apt-get download
mkdir -p "$ENTRY/dl"
if ! ls "$ENTRY"/dl/busybox-static_*.deb >/dev/null 2>&1; then
  (cd "$ENTRY/dl" && { apt-get download busybox-static >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 && apt-get download busybox-static >/dev/null 2>&1; }; }) ||
    log "could not apt-get download busybox-static into $ENTRY/dl (up.sh will say what it needs)"
fi
echo "$ENTRY/bin"
