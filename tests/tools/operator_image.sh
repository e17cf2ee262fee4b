#!/usr/bin/env bash
# operator_image.sh - build the operator image from operator/Containerfile with this machine's podman and
# print its name (docs/chart.md "The image"); with --docker-load, also load it into the dockerd that
# DOCKER_HOST names (the suite's cluster runs its Pods there: tests/tools/kube_cluster.py).
#
# No registry is needed for the base: it is localhost/gpustack-molecule (tests/tools/podman_image.sh
# makes it: Debian bookworm + a copied CPython 3.12 at /opt/python), given to the Containerfile as
# PYTHON_IMAGE / PYTHON. The build itself needs PyPI (the wheel's build requirements, the dependencies):
# it runs with --network host and the host's CA bundle bind-mounted for pip (PIP_CERT), so a
# TLS-inspecting proxy the host trusts is trusted by the build too; nothing of it stays in the image.
#
# The build context is staged under tests/.build/operator-image/context/ (the Containerfile's header
# lists it): the package's build files and sources, the helm binary tests/tools/helm.sh provides (helm
# 4.1.4 from npm, cached per machine) as image/helm, and the chart packaged by that helm
# (`helm package operator/chart/gpustack-operator`) as image/charts/gpustack-operator-<version>.tgz --
# the worker's image mode installs it (docs/worker.md "Image mode"). The chart's version must be the
# package version: that is the file name worker/install.py looks for.
#
# The image is tagged localhost/gpustack-operator-py:<version>-<recipe>, the recipe being a hash of every
# file the build reads (Containerfile, pyproject.toml, setup.py, README.md, LICENSE, operator/src,
# operator/proto, operator/chart) and of the helm binary, so an unchanged tree reuses the image (no
# staging, no build: ~1 s) and a changed one is built again (~2-3 min cold on 2 cores; podman's layer
# cache keeps the dependency layers when only the chart or the package changed); the images of earlier
# recipes of the same version are then removed (one in use stays), and so is the staged context.
# It is also tagged with the name the chart uses, gpustack/gpustack-operator-py:<version>.
#
# Needs root (podman as root). Output: the image name on stdout (last line); progress on stderr.
# Exit: 0; 3 when helm cannot be provided (npm cannot fetch it: helm.sh's reason is printed); 1 otherwise.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
BASE=localhost/gpustack-molecule
log() { echo "operator_image.sh: $*" >&2; }
die() { log "$*"; exit 1; }

load=0
case "${1:-}" in
  --docker-load) load=1 ;;
  "") ;;
  *) die "usage: $0 [--docker-load]  (--docker-load: into the dockerd of DOCKER_HOST)" ;;
esac
[ "$(id -u)" -eq 0 ] || die "needs root (podman as root)"
command -v podman >/dev/null || die "podman is not installed (tests/tools/podman_image.sh installs it)"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$REPO/tests/.build/podman/containers.conf}
[ -f "$CONTAINERS_CONF" ] || die "no $CONTAINERS_CONF: run tests/tools/podman_image.sh first (it writes it and builds $BASE)"
podman image exists "$BASE" || die "no base image $BASE: run tests/tools/podman_image.sh first"

cd "$REPO"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml | head -n 1)
[ -n "$version" ] || die "no version in pyproject.toml"
chart=operator/chart/gpustack-operator
chart_version=$(sed -n 's/^version: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' "$chart/Chart.yaml" | head -n 1)
[ "$chart_version" = "$version" ] \
  || die "$chart/Chart.yaml has version '$chart_version', pyproject.toml $version: worker/install.py looks for gpustack-operator-$version.tgz -- make them equal"
set +e
helm=$(bash "$HERE/helm.sh")
rc=$?
set -e
case "$rc" in
  0) helm=$(printf '%s\n' "$helm" | tail -n 1) ;;
  3) log "helm is not available (tests/tools/helm.sh: npm cannot fetch it)"; exit 3 ;;
  *) die "tests/tools/helm.sh failed (exit $rc)" ;;
esac

SOURCES=(pyproject.toml setup.py README.md LICENSE operator/src operator/proto)
sources_tar() { # sources_tar PATH...: the files as a reproducible tar stream (generated files left out)
  tar -c --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 \
    --exclude=__pycache__ --exclude='*_pb2*.py' --exclude='*_pb2*.pyi' --exclude='*.egg-info' "$@"
}
recipe=$({ sources_tar operator/Containerfile "${SOURCES[@]}" "$chart"; sha256sum <"$helm"; } | sha256sum | cut -c1-12)
image=localhost/gpustack-operator-py:$version-$recipe

STAGE=$REPO/tests/.build/operator-image
mkdir -p "$STAGE"
exec 9>"$STAGE/.lock"
flock 9 # one stager and builder at a time (the context directory is shared)
if podman image exists "$image"; then
  log "$image is current (recipe $recipe)"
else
  ctx=$STAGE/context
  log "staging the build context in $ctx"
  rm -rf "$ctx"
  mkdir -p "$ctx/image/charts"
  sources_tar "${SOURCES[@]}" | tar -x -C "$ctx"
  install -m 0755 "$helm" "$ctx/image/helm"
  helm_home=$(mktemp -d "$STAGE/helm-home.XXXXXX")
  trap 'rm -rf "$helm_home"' EXIT
  HELM_CACHE_HOME=$helm_home/cache HELM_CONFIG_HOME=$helm_home/config HELM_DATA_HOME=$helm_home/data \
    "$helm" package "$chart" --destination "$ctx/image/charts" >&2
  packaged=$ctx/image/charts/gpustack-operator-$version.tgz
  [ -f "$packaged" ] || die "helm package did not write $packaged"
  chmod 0644 "$packaged"
  log "building $image (recipe $recipe) from operator/Containerfile on $BASE"
  cert=/etc/ssl/certs/ca-certificates.crt
  cert_args=()
  if [ -f "$cert" ]; then
    cert_args=(-v /etc/ssl/certs:/etc/ssl/host-certs:ro --build-arg PIP_CERT=/etc/ssl/host-certs/ca-certificates.crt)
  fi
  podman build --network host "${cert_args[@]}" \
    --build-arg PYTHON_IMAGE="$BASE" --build-arg PYTHON=/opt/python/bin/python3 \
    -f operator/Containerfile -t "$image" "$ctx" >&2
  rm -rf "$ctx" # the context is staged again for the next recipe; no copy of the sources stays behind
  # the images of earlier recipes (~460 MB each) are not used again: removed, except one still in use
  for old in $(podman images --format '{{.Repository}}:{{.Tag}}' "localhost/gpustack-operator-py"); do
    case "$old" in
      "$image") ;;
      localhost/gpustack-operator-py:"$version"-*) podman rmi "$old" >/dev/null 2>&1 && log "removed $old" || true ;;
    esac
  done
fi
podman tag "$image" "gpustack/gpustack-operator-py:$version"
if [ "$load" = 1 ]; then
  [ -n "${DOCKER_HOST:-}" ] || die "--docker-load needs DOCKER_HOST (the cluster's dockerd socket)"
  log "loading $image into $DOCKER_HOST"
  podman save "$image" | docker load >&2
  docker tag "$image" "gpustack/gpustack-operator-py:$version" >&2
fi
echo "$image"
