#!/usr/bin/env bash
# The project's copy of ../shared/tools/kube-local/build.sh (kept so a machine without that folder builds
# the same stack); provide.sh runs it into the machine's cache. Run by hand: build.sh WORK_DIR.
# build.sh [WORK_DIR] - build Kubernetes v1.20.2 (kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet, kubectl) from Debian bookworm's `kubernetes` source package (1.20.5+really1.20.2-1.1+deb12u1,
# vendor/ included) with Debian's Go 1.19, and take etcd 3.4 from Debian's etcd-server .deb.
# Result: WORK_DIR/bin/{etcd,kube-apiserver,kube-controller-manager,kube-scheduler,kubelet,kubectl}
# (WORK_DIR is required here: this checkout is no place for a 2 GB tree).
# Env: KUBE_LOCAL_DL  dir for/with the downloads (default WORK_DIR/dl); files already there are reused
#      DEBIAN_MIRROR  (default http://deb.debian.org/debian) for the source package
# The Go build cache is WORK_DIR/src/kubernetes-1.20.2/_output/local/go/cache (the make rules force it);
# a rerun re-extracts the source and so builds cold again (~6 min on 2 cores).
# Needs: apt-get (download only, nothing is installed), dpkg-deb, make, patch, sha256sum; no root.
set -euo pipefail
W=${1:?usage: build.sh WORK_DIR (provide.sh passes the cache entry)}; mkdir -p "$W"; W=$(cd "$W" && pwd)
DL=${KUBE_LOCAL_DL:-$W/dl}; mkdir -p "$DL"; DL=$(cd "$DL" && pwd)
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SRCVER=1.20.5+really1.20.2
DEBVER=1.20.5+really1.20.2-1.1+deb12u1
declare -A SHA=(
  [kubernetes_$DEBVER.dsc]=19fa1da5aefcef673894ac9511986bd98a14410cf8eea0b626613c30df435257
  [kubernetes_$SRCVER.orig.tar.gz]=b83c0780efb182d928dc63d46488a847f161f04e40a94b96bf5247dd671ecdfc
  [kubernetes_$DEBVER.debian.tar.xz]=9b6e5fd41769d2b5badf2e73b274e3bcd90f85e13d06a1a4a845ccce018127d8
)
T0=$(date +%s)
log() { echo "build.sh [$(( $(date +%s) - T0 ))s] $*" >&2; }

# ---- 1. binary .debs through apt (download only). Tested with: golang-1.19-go/-src 1.19.8-2,
#         etcd-server 3.4.23-4+b4, golang-github-modern-go-reflect2-dev 1.0.2-2, busybox-static 1:1.35.0-4+deb12u1+b1
cd "$DL"
PKGS="golang-1.19-go golang-1.19-src etcd-server golang-github-modern-go-reflect2-dev busybox-static"
command -v rsync >/dev/null || PKGS="$PKGS rsync libpopt0"   # kubernetes' make needs rsync
for p in $PKGS; do ls "${p}"_*.deb >/dev/null 2>&1 || apt-get download "$p"; done
# ---- 2. the source package straight from the Debian pool (no deb-src line needed), sha256-pinned
for f in "${!SHA[@]}"; do
  [ -f "$f" ] || /usr/lib/apt/apt-helper download-file "$MIRROR/pool/main/k/kubernetes/$f" "$f" "SHA256:${SHA[$f]}"
  echo "${SHA[$f]}  $f" | sha256sum -c --quiet
done
log "downloads ok in $DL"

# ---- 3. toolchain: Go 1.19 (+ rsync if missing) unpacked, not installed
T=$W/tools; rm -rf "$T"; mkdir -p "$T/bin"
for d in golang-1.19-go golang-1.19-src; do dpkg-deb -x "$(ls "$DL/${d}"_*.deb | head -1)" "$T/go"; done
GOROOT=$T/go/usr/lib/go-1.19
if ! command -v rsync >/dev/null; then
  for d in rsync libpopt0; do dpkg-deb -x "$(ls "$DL/${d}"_*.deb | head -1)" "$T/rsync"; done
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "$T/rsync/usr/lib/x86_64-linux-gnu" "$T/rsync/usr/bin/rsync" >"$T/bin/rsync"
  chmod +x "$T/bin/rsync"
fi
dpkg-deb -x "$(ls "$DL"/etcd-server_*.deb | head -1)" "$T/etcd"
dpkg-deb -x "$(ls "$DL"/golang-github-modern-go-reflect2-dev_*.deb | head -1)" "$T/reflect2"
"$GOROOT/bin/go" version >&2

# ---- 4. source tree: orig tarball + Debian's patches (kubectl printing, CVE-2021-25743)
rm -rf "$W/src"; mkdir -p "$W/src"
tar -C "$W/src" -xzf "$DL/kubernetes_$SRCVER.orig.tar.gz"
tar -C "$W/src" -xJf "$DL/kubernetes_$DEBVER.debian.tar.xz"
K=$W/src/kubernetes-1.20.2
grep -v '^#' "$W/src/debian/patches/series" | while read -r p; do
  [ -n "$p" ] && patch -d "$K" -p1 -s <"$W/src/debian/patches/$p"
done
# Go 1.19 segfaults with the vendored modern-go/reflect2 1.0.1: use Debian's 1.0.2 (same API)
R=$K/vendor/github.com/modern-go/reflect2
rm -rf "$R"; cp -r "$T/reflect2/usr/share/gocode/src/github.com/modern-go/reflect2" "$R"; rm -f "$R/go.mod"
# kubelet: never rewrite host sysctls (vm.overcommit_memory, kernel.panic, kernel.panic_on_oops, ...)
# on a shared machine: log "Invalid kernel flag" instead (KernelTunableWarn already exists upstream)
sed -i 's/^\tb := KernelTunableModify$/\tb := KernelTunableWarn \/\/ kube-local: never change host sysctls/' \
  "$K/pkg/kubelet/cm/container_manager_linux.go"
grep -q 'b := KernelTunableWarn' "$K/pkg/kubelet/cm/container_manager_linux.go"
log "source ready in $K"

# ---- 5. build (the upstream make recipe, in GOPATH mode)
export GOROOT PATH="$T/bin:$GOROOT/bin:$PATH" CGO_ENABLED=0 GOPROXY=off \
  HOME=$W/home GOPATH=$K/.go
mkdir -p "$HOME" "$K/.go/src/k8s.io" "$W/bin"
ln -sfn ../../.. "$K/.go/src/k8s.io/kubernetes"
cd "$K"
for t in ${KUBE_LOCAL_TARGETS:-kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl}; do
  s=$(date +%s)
  make WHAT="cmd/$t" GOFLAGS="-tags=providerless" GOLDFLAGS="-s -w" >"$W/build-$t.log" 2>&1 ||
    { tail -20 "$W/build-$t.log" >&2; log "FAILED: $t (log $W/build-$t.log)"; exit 1; }
  cp "_output/bin/$t" "$W/bin/$t"
  log "built $t in $(( $(date +%s) - s ))s"
done
cp "$T/etcd/usr/bin/etcd" "$W/bin/etcd"
ls -la "$W/bin" >&2
log "done: binaries in $W/bin"
