#!/usr/bin/env bash
# The Debian root filesystem the test images are made from, as one cached tarball:
#
#   tests/tools/podman_image.sh      localhost/gpustack-molecule (podman, the molecule scenarios)
#   tests/tools/container_host.py    localhost/gpustack-probe:test (docker, the preflight probe tests)
#
# `debootstrap --variant=minbase bookworm` plus PACKAGES, package caches, lists, docs, man pages and
# locales removed, tarred to <cache>/rootfs/rootfs-<suite>-<sha256(PACKAGES):8>.tar, <cache> being the
# machine's test cache (tests/tools/cache_dir.sh: outside the checkout, so a clean clone on the same
# machine reuses it). Built once per machine; every later run just prints the path (a new PACKAGES list
# is a new file name, so a new build).
#
#   tests/tools/rootfs_tar.sh           build if missing, print the tarball's path on stdout
#   tests/tools/rootfs_tar.sh --path    print the path only (no build, no root needed)
#
# Everything else goes to stderr. Needs root to build (debootstrap; apt-get installs debootstrap when
# it is missing). One build at a time (a lock beside the tarball): callers started side by side
# on a cold machine wait for the first one's build instead of racing it. DEBOOTSTRAP_MIRROR chooses
# the mirror (Debian's by default).
#
# What the images need besides minbase: python3 (3.11: Ansible's modules in the molecule image before
# the install role switches interpreters, and the refusal case), python3-packaging
# (ansible.builtin.pip runs under that interpreter and needs it). tar/gzip (unarchive), coreutils'
# chroot (the preflight enters the host root) and dash (the shell the fake vendor CLIs run under), sh,
# cat, grep, awk, mkdir, sleep (the probe image) are in minbase.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD="$(bash "$REPO/tests/tools/cache_dir.sh")/rootfs"
SUITE=bookworm
PACKAGES=python3,python3-packaging
MIRROR=${DEBOOTSTRAP_MIRROR:-http://deb.debian.org/debian}
NAME="rootfs-$SUITE-$(echo "$PACKAGES" | sha256sum | cut -c1-8).tar"
TAR="$BUILD/$NAME"

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'rootfs_tar.sh: %s\n' "$*" >&2; exit 1; }

if [ "${1:-}" = "--path" ]; then
    echo "$TAR"
    exit 0
fi
[ $# -eq 0 ] || die "usage: rootfs_tar.sh [--path]"

mkdir -p "$BUILD"
exec 8>"$BUILD/.lock"
flock 8

# An older checkout kept the same tarball in its own tests/.build: take it over (same name, same recipe).
for old in "$REPO/tests/.build/rootfs/$NAME" "$REPO/tests/.build/podman/$NAME"; do
    if [ ! -f "$TAR" ] && [ -f "$old" ]; then
        ln "$old" "$TAR.part" 2>/dev/null || cp "$old" "$TAR.part"
        mv "$TAR.part" "$TAR"
    fi
done

if [ ! -f "$TAR" ]; then
    [ "$(id -u)" -eq 0 ] || die "building $TAR needs root (debootstrap); run it as root"
    if ! dpkg-query -W -f='${Status}' debootstrap 2>/dev/null | grep -q 'install ok installed'; then
        log "apt-get install debootstrap"
        apt_install() {
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
                -o DPkg::Lock::Timeout=600 debootstrap >>"$BUILD/apt.log" 2>&1
        }
        # the package lists may be missing or stale on a fresh machine: update once and retry
        apt_install || { apt-get update -q -o DPkg::Lock::Timeout=600 >>"$BUILD/apt.log" 2>&1 && apt_install; } \
            || die "apt-get install debootstrap failed, see $BUILD/apt.log"
    fi
    log "debootstrap --variant=minbase $SUITE (+ $PACKAGES), cached as $TAR"
    tmp=$(mktemp -d "$BUILD/debootstrap.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$tmp/root" "$MIRROR" >"$BUILD/debootstrap.log" 2>&1 \
        || die "debootstrap failed, see $BUILD/debootstrap.log"
    # keep it small: no package caches, lists, docs or man pages
    rm -rf "$tmp/root"/var/cache/apt/archives/*.deb "$tmp/root"/var/lib/apt/lists/* \
           "$tmp/root"/usr/share/doc/* "$tmp/root"/usr/share/man/* "$tmp/root"/usr/share/info/* \
           "$tmp/root"/usr/share/locale/*
    tar -C "$tmp/root" -cf "$TAR.part" .
    mv "$TAR.part" "$TAR"
    rm -rf "$tmp"; trap - EXIT
fi
echo "$TAR"
