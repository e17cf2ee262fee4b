#!/usr/bin/env bash
# Everything the molecule scenarios (extensions/molecule/*/) need on this machine, idempotent (the
# scenarios' shared create step, extensions/molecule/shared/create.yml, runs it before starting a
# container, so `molecule test -s <scenario>` on a fresh machine needs nothing else):
#
#   1. podman, runc and debootstrap from Debian (apt-get, only what is missing);
#   2. tests/.build/podman/containers.conf: podman as root on these machines needs runc (crun fails on
#      hybrid cgroups), cgroupfs, no network namespace by default (the default CNI bridge would take a
#      private range that must never be used here) and ulimits it is allowed to set;
#   3. the containers.podman collection (molecule's podman driver and connection) extracted from the
#      PyPI `ansible` wheel into collections/ (Galaxy is unreachable; ~1 MB of the 50 MB wheel kept);
#   4. the image localhost/gpustack-molecule, built once per recipe (see IMAGE_RECIPE below) from the
#      Debian rootfs tarball tests/tools/rootfs_tar.sh caches (debootstrap; shared with the preflight
#      probe image of tests/tools/container_host.py, which says which packages it holds and why).
#
# It prints the environment to export, e.g.  eval "$(tests/tools/podman_image.sh)"  -- everything else
# goes to stderr (the scenarios set the same CONTAINERS_CONF themselves, in extensions/molecule/config.yml).
# Needs root (podman as root, debootstrap, apt-get). Runs one at a time (a lock under tests/.build/podman):
# scenarios started side by side on a cold machine wait for the first one's build instead of racing it.
#
# Why the image is Debian bookworm plus a copied CPython >= 3.12 (and not trixie):
#   * bookworm is this machine's own release: the vendor stand-in libraries that `python -m
#     tests.stubs.build` compiles here with gcc, and the copied interpreter's extension modules, link
#     against exactly the glibc / libssl / libffi the image carries;
#   * its /usr/bin/python3 is 3.11, so one image serves both the install role's refusal of an old
#     interpreter (a real 3.11, not a fake) and the installs that need >= 3.12;
#   * the controller necessarily has a Python >= 3.12 (ansible-core needs it): its own prefix
#     (sys.base_prefix, e.g. ~/.pyenv/versions/3.12.1) is self-contained apart from those Debian
#     libraries, so it is copied to /opt/python (tests, tkinter, idle, static lib and bytecode left
#     out: ~60 MB) with an ld.so.conf entry for its libpython (pyenv's RUNPATH names the old prefix).
#     Set PYTHON312_PREFIX to choose another prefix.
#   * trixie (Python 3.13) would need a second image for the 3.11 refusal case and brings a different
#     glibc from the one the stand-ins are built against.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD="$REPO/tests/.build/podman"
# wheels (the ansible wheel the collection is taken from) in the machine's test cache (cache_dir.sh)
PIPCACHE="$(bash "$REPO/tests/tools/cache_dir.sh")/pip"
IMAGE=localhost/gpustack-molecule
# The Debian rootfs (debootstrap minbase + what the roles need: python3, python3-packaging), built
# and cached by tests/tools/rootfs_tar.sh; its file name names the suite and the package list.
ROOTFS="$REPO/tests/tools/rootfs_tar.sh"
ROOTFS_NAME=$(basename "$(bash "$ROOTFS" --path)")
SUITE=$(echo "$ROOTFS_NAME" | cut -d- -f2)
# The ansible release the containers.podman collection is taken from (pinned: reproducible).
ANSIBLE_WHEEL_VERSION=14.5.0

log() { printf '==> %s\n' "$*" >&2; }
die() { printf 'podman_image.sh: %s\n' "$*" >&2; exit 1; }

[ "$(id -u)" -eq 0 ] || die "needs root (podman as root, debootstrap and apt-get); run it as root"
mkdir -p "$BUILD" "$PIPCACHE"
exec 9>"$BUILD/.lock"
flock 9

# -- 1. Debian packages --------------------------------------------------------------------------------
missing=()
for pkg in podman runc debootstrap; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
    log "apt-get install ${missing[*]}"
    apt_install() {
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
            -o DPkg::Lock::Timeout=600 "${missing[@]}" >>"$BUILD/apt.log" 2>&1
    }
    # the package lists may be missing or stale on a fresh machine: update once and retry
    apt_install || { apt-get update -q -o DPkg::Lock::Timeout=600 >>"$BUILD/apt.log" 2>&1 && apt_install; } \
        || die "apt-get install ${missing[*]} failed, see ${BUILD#"$REPO"/}/apt.log"
fi

# -- 2. containers.conf ------------------------------------------------------------------------------
HARD=$(ulimit -Hn)
CONF="$BUILD/containers.conf"
cat >"$CONF.new" <<EOF
# Written by tests/tools/podman_image.sh -- podman as root on the test machines.
[containers]
# no network namespace set up by default: no CNI bridge is ever created (scenarios use network none)
netns = "none"
default_ulimits = ["nofile=$HARD:$HARD", "nproc=4096:4096"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
EOF
if cmp -s "$CONF.new" "$CONF"; then rm -f "$CONF.new"; else mv "$CONF.new" "$CONF"; fi
export CONTAINERS_CONF="$CONF"

# -- 3. containers.podman collection -----------------------------------------------------------------
COLL="$REPO/collections/ansible_collections/containers/podman"
if [ ! -f "$COLL/MANIFEST.json" ]; then
    # pip of a Python >= 3.12 (the ansible release needs it): the project's venv, else the PATH's python3
    PY="$REPO/.venv/bin/python"
    [ -x "$PY" ] || PY=$(command -v python3)
    "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 12))' \
        || die "$PY is older than 3.12, whose pip cannot fetch ansible==$ANSIBLE_WHEEL_VERSION: run make (it creates .venv)"
    WHEEL="$PIPCACHE/ansible-$ANSIBLE_WHEEL_VERSION-py3-none-any.whl"
    if [ ! -f "$WHEEL" ]; then
        log "pip download ansible==$ANSIBLE_WHEEL_VERSION (for containers.podman only)"
        "$PY" -m pip download --quiet --no-deps -d "$PIPCACHE" "ansible==$ANSIBLE_WHEEL_VERSION" >&2
    fi
    log "extracting containers.podman into collections/"
    "$PY" - "$WHEEL" "$REPO/collections" <<'EOF'
import sys, zipfile
wheel, dest = sys.argv[1:]
prefix = "ansible_collections/containers/podman/"
with zipfile.ZipFile(wheel) as z:
    members = [n for n in z.namelist() if n.startswith(prefix)]
    if not members:
        sys.exit(f"{wheel} holds no {prefix}")
    z.extractall(dest, members)
EOF
fi

# -- 4. the image ------------------------------------------------------------------------------------
# The interpreter >= 3.12 copied into the image.
pick_prefix() {
    if [ -n "${PYTHON312_PREFIX:-}" ]; then echo "$PYTHON312_PREFIX"; return; fi
    local p prefix
    for p in python3 python3.12 "$HOME"/.pyenv/versions/3.12*/bin/python3.12 python3.13 \
             "$HOME"/.pyenv/versions/3.13*/bin/python3.13; do
        prefix=$("$p" -c 'import sys; sys.exit(1) if sys.version_info < (3, 12) else print(sys.base_prefix)' \
                 2>/dev/null) || continue
        # a distribution's own /usr cannot be lifted out on its own
        case "$prefix" in /usr|/usr/local|"") continue ;; esac
        echo "$prefix"; return
    done
}
PREFIX=$(pick_prefix)
[ -n "$PREFIX" ] && [ -d "$PREFIX/lib" ] || die "no self-contained Python >= 3.12 found to copy into the image (set PYTHON312_PREFIX, e.g. ~/.pyenv/versions/3.12.1)"
PYVER=$("$PREFIX/bin/python3" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
PYFULL=$("$PREFIX/bin/python3" -c 'import platform; print(platform.python_version())')

# The recipe's identity: this script, the rootfs (its name names suite and packages), the interpreter.
# The image carries it as a label; a different recipe rebuilds.
IMAGE_RECIPE=$( { cat "${BASH_SOURCE[0]}"; echo "$ROOTFS_NAME $PREFIX $PYFULL"; } | sha256sum | cut -c1-16)
current=$(podman image inspect --format '{{ index .Labels "gpustack.recipe" }}' "$IMAGE" 2>/dev/null || true)
if [ "$current" != "$IMAGE_RECIPE" ]; then
    ROOTFS_TAR=$(bash "$ROOTFS") || die "tests/tools/rootfs_tar.sh failed"

    log "building $IMAGE (Debian $SUITE, /usr/bin/python3 3.11, /opt/python/bin/python3 $PYFULL from $PREFIX)"
    tmp=$(mktemp -d "$BUILD/image.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    mkdir "$tmp/root"
    tar -C "$tmp/root" -xf "$ROOTFS_TAR"
    mkdir -p "$tmp/root/opt/python/bin" "$tmp/root/opt/python/lib"
    cp -a "$PREFIX/bin/python$PYVER" "$tmp/root/opt/python/bin/"
    ln -s "python$PYVER" "$tmp/root/opt/python/bin/python3"
    cp -a "$PREFIX"/lib/libpython3*.so* "$tmp/root/opt/python/lib/" 2>/dev/null || true
    tar -C "$PREFIX/lib" -cf - \
        --exclude="python$PYVER/test" --exclude="python$PYVER/idlelib" --exclude="python$PYVER/tkinter" \
        --exclude="python$PYVER/turtledemo" --exclude="python$PYVER/lib2to3/tests" \
        --exclude="python$PYVER/config-*" --exclude="python$PYVER/site-packages/*" \
        --exclude='__pycache__' --exclude='lib-dynload/_test*' --exclude='lib-dynload/_tkinter*' \
        --exclude='lib-dynload/xxlimited*' --exclude='lib-dynload/_ctypes_test*' \
        "python$PYVER" | tar -C "$tmp/root/opt/python/lib" -xf -
    echo /opt/python/lib >"$tmp/root/etc/ld.so.conf.d/opt-python.conf"
    chroot "$tmp/root" /sbin/ldconfig
    chroot "$tmp/root" /opt/python/bin/python3 -c 'import ssl, ctypes, venv, ensurepip, sqlite3, lzma' \
        || die "the copied interpreter does not run inside the image"
    tar -C "$tmp/root" -cf - . | podman import \
        --change 'CMD ["sleep", "infinity"]' \
        --change "LABEL gpustack.recipe=$IMAGE_RECIPE" \
        --change "LABEL gpustack.python=/opt/python/bin/python3" \
        - "$IMAGE" >/dev/null
    rm -rf "$tmp"; trap - EXIT
    # drop the previous build of the image, now untagged
    podman image prune -f >/dev/null 2>&1 || true
fi
log "$IMAGE ready ($(podman image inspect --format '{{ .Size }}' "$IMAGE" | awk '{printf "%.0f MB", $1/1e6}'))"

echo "export CONTAINERS_CONF=$CONF"
