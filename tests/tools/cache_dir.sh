#!/usr/bin/env bash
# The machine's cache for what the test suite builds or downloads once and any checkout on this machine
# may reuse (a clean clone included, so a second CI run on the same machine skips the slow setup):
#
#   rootfs/                 the Debian rootfs tarball (tests/tools/rootfs_tar.sh; debootstrap)
#   pip/                    wheels downloaded for wheelhouses and the containers.podman collection
#   ansible-core-<X.Y>-*/   the venv holding the lowest ansible-core the collection claims
#   ansible-test-home/      ansible-test's ~/.ansible/test (get-pip stand-in, its requirement venvs)
#   kube-local/<recipe>/    Kubernetes 1.20.2 + etcd binaries and busybox-static's .deb for tests/cluster (tests/tools/kube_local/provide.sh)
#
# GPUSTACK_TEST_CACHE chooses it; otherwise /var/cache/gpustack-accelerators-tests as root, else
# ${XDG_CACHE_HOME:-~/.cache}/gpustack-accelerators-tests. Every entry is keyed by what it was made
# from (a new recipe is a new name), so a stale entry is never used; removing the directory is always
# safe. tests/tools/machine_cache.py is the same rule for Python. Prints the directory (created).
set -euo pipefail
if [ -n "${GPUSTACK_TEST_CACHE:-}" ]; then
    dir=$GPUSTACK_TEST_CACHE
elif [ "$(id -u)" -eq 0 ]; then
    dir=/var/cache/gpustack-accelerators-tests
else
    dir=${XDG_CACHE_HOME:-$HOME/.cache}/gpustack-accelerators-tests
fi
mkdir -p "$dir"
echo "$dir"
