#!/usr/bin/env bash
# up.sh [STATE_DIR] - start a one-node Kubernetes 1.20 on 127.0.0.1 (the project's copy of
# ../shared/tools/kube-local/up.sh; tests/tools/kube_cluster.py runs it for pytest):
#   etcd, kube-apiserver, kube-controller-manager, kube-scheduler (host namespaces)
#   dockerd + kubelet (dockershim) in a private MOUNT namespace (host network and pids),
#   so their mounts (kubelet's rshared root dir, tmpfs /run, ...) vanish with them.
# Prints the kubeconfig path last. Everything lives in STATE_DIR (default: a fresh mktemp dir; at most
# 40 characters, unix socket paths live under it).
# Differences from the kit's: the binaries come from provide.sh (the machine's cache) unless
# KUBE_LOCAL_BIN names them; the node's /var/lib is STATE/host/var/lib (not an empty tmpfs), so a device
# plugin run with --host-write-root STATE/host writes the very files the kubelet and dockerd then mount.
# Env: KUBE_LOCAL_BIN   dir with etcd kube-apiserver kube-controller-manager kube-scheduler kubelet
#                       [kubectl] (default: what provide.sh prints)
#      KUBE_LOCAL_DL    dir holding busybox-static_*.deb (default: the cache entry's dl/ beside the bin dir)
#      KUBE_LOCAL_NODE  node name (default test-node)
#      KUBE_LOCAL_READY_TIMEOUT  seconds to wait for node Ready (default 180)
#      KUBE_LOCAL_API_TIMEOUT    seconds to wait for the apiserver's /readyz (default 120)
#      KUBE_LOCAL_NODE_STATUS_PERIOD  the kubelet's --node-status-update-frequency (default 2s; upstream 10s)
#      KUBE_LOCAL_NO_KUBELET=1  control plane only (no dockerd, no kubelet)
#      KUBE_LOCAL_NO_SCHEDULER=1
#      KUBE_LOCAL_ALLOW_PRIVILEGED  the API server's --allow-privileged (default true, as kubeadm sets it:
#                       the Device Manager's DaemonSets are privileged; the kit's up.sh leaves it false)
# Stop with: down.sh STATE_DIR. Restart only the kubelet: restart-kubelet.sh STATE_DIR.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
BIN=${KUBE_LOCAL_BIN:-$(bash "$HERE/provide.sh")}; BIN=$(cd "$BIN" && pwd)
DL=${KUBE_LOCAL_DL:-$BIN/../dl}
NODE=${KUBE_LOCAL_NODE:-test-node}
TOKEN=${KUBE_LOCAL_TOKEN:-testtoken}
STATUS_PERIOD=${KUBE_LOCAL_NODE_STATUS_PERIOD:-2s}   # the kubelet's default is 10s: a device plugin's change reaches the Node sooner
S=${1:-$(mktemp -d "${TMPDIR:-/tmp}/kube-local.XXXXXX")}
mkdir -p "$S"; S=$(cd "$S" && pwd)
[ "$(id -u)" = 0 ] || { echo "up.sh: needs root (dockerd, kubelet, mount namespace)" >&2; exit 1; }
[ ${#S} -le 40 ] || { echo "up.sh: state dir path too long for unix sockets: $S" >&2; exit 1; }
mkdir -p "$S/pid" "$S/log" "$S/etcd" "$S/certs" "$S/kcm" "$S/sched"
ID=$(basename "$S" | tr -c 'a-zA-Z0-9\n' '-')
now() { date +%s.%N; }
T0=$(now)

# ---- ports: 7 consecutive free ones on 127.0.0.1, below the kernel's ephemeral range (an outgoing
#      connection's local port is never one of them: a port free when checked but taken by a client's
#      connection before the component binds it left a cluster without its scheduler)
port_free() { ! ss -Htan "sport = :$1" 2>/dev/null | grep -q .; }
EPHEMERAL_LOW=$(awk '{print $1}' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
BLOCKS=$(( (EPHEMERAL_LOW - 10000) / 100 - 1 ))
[ "$BLOCKS" -ge 10 ] || BLOCKS=10
for _ in $(seq 1 100); do
  B=$(( 10000 + (RANDOM % BLOCKS) * 100 )); ok=1
  for o in 0 1 2 3 4 5 6; do port_free $((B + o)) || { ok=0; break; }; done
  [ $ok = 1 ] && break
done
P_ETCD=$B P_PEER=$((B + 1)) P_API=$((B + 2)) P_KCM=$((B + 3)) P_SCHED=$((B + 4)) P_KUBELET=$((B + 5)) P_KHEALTH=$((B + 6))

# start CMD... in its own session, stdout/err to log/NAME.log, pid to pid/NAME
start() { local name=$1; shift; setsid "$@" </dev/null >"$S/log/$name.log" 2>&1 & echo $! >"$S/pid/$name"; }
wait_for() { # wait_for SECONDS DESC CMD...
  local t=$1 d=$2; shift 2
  for _ in $(seq 1 $((t * 4))); do "$@" >/dev/null 2>&1 && return 0; sleep 0.25; done
  echo "up.sh: timed out waiting for $d (logs in $S/log)" >&2; return 1
}

# ---- credentials (token auth, RBAC; the token is system:masters). TLS is verified: the API server
#      writes its self-signed certificate (127.0.0.1 among its names) to certs/apiserver.crt at start,
#      before any client reads this kubeconfig
openssl genrsa -out "$S/certs/sa.key" 2048 2>/dev/null
openssl rsa -in "$S/certs/sa.key" -pubout -out "$S/certs/sa.pub" 2>/dev/null
echo "$TOKEN,admin,admin,system:masters" >"$S/certs/tokens.csv"
cat >"$S/kubeconfig" <<KC
apiVersion: v1
kind: Config
clusters: [{name: local, cluster: {server: "https://127.0.0.1:$P_API", certificate-authority: "$S/certs/apiserver.crt"}}]
users: [{name: admin, user: {token: $TOKEN}}]
contexts: [{name: local, context: {cluster: local, user: admin}}]
current-context: local
KC

# ---- etcd + kube-apiserver
start etcd "$BIN/etcd" --data-dir "$S/etcd" --name default \
  --listen-client-urls "http://127.0.0.1:$P_ETCD" --advertise-client-urls "http://127.0.0.1:$P_ETCD" \
  --listen-peer-urls "http://127.0.0.1:$P_PEER" --initial-advertise-peer-urls "http://127.0.0.1:$P_PEER" \
  --initial-cluster "default=http://127.0.0.1:$P_PEER"
start apiserver "$BIN/kube-apiserver" --etcd-servers="http://127.0.0.1:$P_ETCD" \
  --bind-address=127.0.0.1 --secure-port="$P_API" --insecure-port=0 --advertise-address=127.0.0.1 \
  --cert-dir="$S/certs" --token-auth-file="$S/certs/tokens.csv" --authorization-mode=RBAC \
  --service-account-key-file="$S/certs/sa.pub" --service-account-signing-key-file="$S/certs/sa.key" \
  --service-account-issuer=https://kubernetes.default.svc --service-cluster-ip-range=198.18.0.0/24 \
  --enable-priority-and-fairness=false --allow-privileged="${KUBE_LOCAL_ALLOW_PRIVILEGED:-true}"
api_ready() { [ "$(curl -sk --noproxy '*' -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$P_API/readyz")" = ok ]; }
wait_for "${KUBE_LOCAL_API_TIMEOUT:-120}" "kube-apiserver /readyz" api_ready
T_API=$(now)

# ---- controller-manager (+ scheduler)
start kcm "$BIN/kube-controller-manager" --kubeconfig="$S/kubeconfig" --leader-elect=false \
  --bind-address=127.0.0.1 --secure-port="$P_KCM" --port=0 --cert-dir="$S/kcm" \
  --service-account-private-key-file="$S/certs/sa.key" --root-ca-file="$S/certs/apiserver.crt" \
  --use-service-account-credentials=false --flex-volume-plugin-dir="$S/kcm/volume-plugins"
if [ -z "${KUBE_LOCAL_NO_SCHEDULER:-}" ]; then
  start scheduler "$BIN/kube-scheduler" --kubeconfig="$S/kubeconfig" --leader-elect=false \
    --bind-address=127.0.0.1 --secure-port="$P_SCHED" --port=0 --cert-dir="$S/sched"
fi

cat >"$S/env" <<ENV
KUBECONFIG=$S/kubeconfig
KUBE_LOCAL_STATE=$S
KUBE_LOCAL_API=https://127.0.0.1:$P_API
KUBE_LOCAL_TOKEN=$TOKEN
KUBE_LOCAL_NODE=$NODE
KUBE_LOCAL_CGROUP=kube-local-$ID
DOCKER_HOST=unix://$S/docker.sock
KUBELET_ROOT=$S/kubelet
HOST_WRITE_ROOT=$S/host
KUBELET_HEALTHZ=http://127.0.0.1:$P_KHEALTH/healthz
DEVICE_PLUGIN_SOCKET=$S/kubelet/device-plugins/kubelet.sock
PODRESOURCES_SOCKET=$S/kubelet/pod-resources/kubelet.sock
ENV

if [ -x "$BIN/kubectl" ]; then   # kubectl that keeps its discovery cache out of $HOME
  printf '#!/bin/sh\nexec "%s" --kubeconfig "%s" --cache-dir "%s" "$@"\n' \
    "$BIN/kubectl" "$S/kubeconfig" "$S/kubectl-cache" >"$S/kubectl"
  chmod +x "$S/kubectl"
fi

if [ -z "${KUBE_LOCAL_NO_KUBELET:-}" ]; then
  # ---- node: private dockerd (no bridge, no iptables) + kubelet, in one private mount namespace
  mkdir -p "$S/docker" "$S/kubelet/device-plugins" "$S/dockershim" "$S/varlog" "$S/volume-plugins" "$S/host/var/lib"
  echo '{}' >"$S/docker/daemon.json"
  { cat /etc/hosts; echo "127.0.0.1 $NODE"; } >"$S/hosts"   # node-name lookup answered locally, never by DNS
  RUNTIME_FLAGS=""
  # Capabilities this machine's bounding set lacks (some VMs/sandboxes drop CAP_SYS_RESOURCE): runc
  # cannot give a container what it does not hold itself, so a privileged container (all capabilities:
  # the Device Manager's DaemonSet) fails "unable to apply caps: operation not permitted".
  CAP_NAMES=(CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID KILL SETGID SETUID SETPCAP LINUX_IMMUTABLE
    NET_BIND_SERVICE NET_BROADCAST NET_ADMIN NET_RAW IPC_LOCK IPC_OWNER SYS_MODULE SYS_RAWIO SYS_CHROOT
    SYS_PTRACE SYS_PACCT SYS_ADMIN SYS_BOOT SYS_NICE SYS_RESOURCE SYS_TIME SYS_TTY_CONFIG MKNOD LEASE
    AUDIT_WRITE AUDIT_CONTROL SETFCAP MAC_OVERRIDE MAC_ADMIN SYSLOG WAKE_ALARM BLOCK_SUSPEND AUDIT_READ
    PERFMON BPF CHECKPOINT_RESTORE)
  CAP_BND=$((16#$(awk '/^CapBnd:/ {print $2}' /proc/self/status)))
  MISSING_CAPS=""
  for i in "${!CAP_NAMES[@]}"; do
    (( (CAP_BND >> i) & 1 )) || MISSING_CAPS="$MISSING_CAPS CAP_${CAP_NAMES[$i]}"
  done
  NEG_OOM=1
  sh -c 'echo -1 >/proc/self/oom_score_adj' 2>/dev/null || NEG_OOM=0
  if [ "$NEG_OOM" = 0 ] || [ -n "$MISSING_CAPS" ]; then
    # A runc wrapper that edits each container's config.json (compact JSON, as dockerd writes it) first:
    # - without CAP_SYS_RESOURCE runc cannot apply a negative oom_score_adj and fails with "can't get
    #   final child's PID from pipe: EOF"; dockershim asks -998 for every pod sandbox (and Guaranteed
    #   containers): negative values are clamped to 0;
    # - the capabilities the bounding set lacks ($MISSING_CAPS) are dropped from every list.
    CAP_SED=""
    for c in $MISSING_CAPS; do CAP_SED="$CAP_SED -e 's/\"$c\",//g' -e 's/,\"$c\"//g' -e 's/\"$c\"//g'"; done
    RUNC=$(command -v runc || echo /usr/sbin/runc)
    cat >"$S/runc-wrap" <<SH
#!/bin/sh
prev=""
for a in "\$@"; do
  case "\$prev" in --bundle|-b) f="\$a/config.json" ;; --process|-p) f="\$a" ;; *) f="" ;; esac
  case "\$a" in --bundle=*) f="\${a#--bundle=}/config.json" ;; --process=*) f="\${a#--process=}" ;; esac
  [ -n "\$f" ] && [ -f "\$f" ] && sed -i -e 's/"oomScoreAdj":-[0-9]*/"oomScoreAdj":0/' $CAP_SED "\$f"
  prev="\$a"
done
exec "$RUNC" "\$@"
SH
    chmod +x "$S/runc-wrap"
    RUNTIME_FLAGS="--add-runtime kube-local-runc=$S/runc-wrap --default-runtime kube-local-runc"
  fi
  DOCKERD=$(command -v dockerd || true)
  [ -n "$DOCKERD" ] || { echo "up.sh: no dockerd: apt-get install -y docker.io (its service is not used)" >&2; exit 1; }
  cat >"$S/dockerd.sh" <<SH
exec "$DOCKERD" --config-file "$S/docker/daemon.json" --data-root "$S/docker/root" $RUNTIME_FLAGS \\
  --exec-root "$S/docker/exec" -H "unix://$S/docker.sock" --pidfile /var/run/docker.pid \\
  --bridge=none --iptables=false --ip6tables=false --ip-forward=false --ip-masq=false \\
  --storage-driver=vfs --cgroup-parent="/kube-local-$ID" --exec-opt native.cgroupdriver=cgroupfs
SH
  cat >"$S/kubelet.sh" <<SH
exec "$BIN/kubelet" --kubeconfig="$S/kubeconfig" --root-dir="$S/kubelet" --cert-dir="$S/kubelet/pki" \\
  --hostname-override="$NODE" --register-node=true \\
  --container-runtime=docker --docker-endpoint="unix://$S/docker.sock" --docker="unix://$S/docker.sock" \\
  --container-runtime-endpoint="unix://$S/dockershim.sock" --image-service-endpoint="unix://$S/dockershim.sock" \\
  --experimental-dockershim-root-directory="$S/dockershim" --pod-infra-container-image=localhost/pause:1 \\
  --network-plugin="" --cgroup-driver=cgroupfs --cgroups-per-qos=false --enforce-node-allocatable="" \\
  --fail-swap-on=false --eviction-hard="" --image-gc-high-threshold=100 --image-gc-low-threshold=99 \\
  --make-iptables-util-chains=false --volume-plugin-dir="$S/volume-plugins" \\
  --address=127.0.0.1 --port=$P_KUBELET --healthz-bind-address=127.0.0.1 --healthz-port=$P_KHEALTH \\
  --read-only-port=0 --node-status-update-frequency=$STATUS_PERIOD --v=\${KUBELET_V:-2}
SH
  cat >"$S/node-ns.sh" <<SH
# runs inside 'unshare --mount --propagation private'
set -e
mount -t tmpfs -o mode=755 kube-local-run /run      # private /run (docker.pid, containerd shim sockets)
mkdir -p /run/lock
[ -d /etc/docker ] && mount -t tmpfs kube-local-etc-docker /etc/docker   # dockerd's key.json
mount -t tmpfs kube-local-opt /opt                  # containerd's opt plugin creates /opt/containerd
# kubelet 1.20 hardcodes /var/lib/kubelet/device-plugins/ (deviceplugin v1beta1 DevicePluginPath),
# whatever --root-dir says: give it a private /var/lib and bind ROOT_DIR/device-plugins there
# (STATE/host/var/lib: the node's host paths a device plugin writes with --host-write-root STATE/host)
mount --bind "$S/host/var/lib" /var/lib
mkdir -p /var/lib/kubelet/device-plugins
mount --bind "$S/kubelet/device-plugins" /var/lib/kubelet/device-plugins
# and its pod-resources socket (ROOT_DIR/pod-resources) where a Pod's hostPath finds it on a real node
mkdir -p "$S/kubelet/pod-resources" /var/lib/kubelet/pod-resources
mount --bind "$S/kubelet/pod-resources" /var/lib/kubelet/pod-resources
mount --bind "$S/hosts" /etc/hosts
mount --bind "$S/varlog" /var/log                  # kubelet's /var/log/pods, /var/log/containers
setsid bash "$S/dockerd.sh" </dev/null >>"$S/log/dockerd.log" 2>&1 &
echo \$! >"$S/pid/dockerd"
for i in \$(seq 1 240); do [ -S "$S/docker.sock" ] && break; sleep 0.25; done
setsid bash "$S/kubelet.sh" </dev/null >>"$S/log/kubelet.log" 2>&1 &
echo \$! >"$S/pid/kubelet"
wait
SH
  start nodens unshare --mount --propagation private -- bash "$S/node-ns.sh"
  export DOCKER_HOST="unix://$S/docker.sock"
  wait_for 60 "dockerd" docker version
  T_DOCKER=$(now)
  # ---- local image localhost/pause:1 (busybox-static rootfs): pause CMD exits on TERM; also the pod image
  R="$S/rootfs"; mkdir -p "$R"
  DEB=$(ls "$DL"/busybox-static_*.deb 2>/dev/null | head -1 || true)
  if [ -z "$DEB" ] && ! { [ -x /bin/busybox ] && file -L /bin/busybox | grep -q static; }; then
    # no download dir (e.g. this folder is read-only and build.sh never ran): fetch the .deb into STATE
    mkdir -p "$S/dl" && (cd "$S/dl" && apt-get download busybox-static >/dev/null 2>&1 || { apt-get update -qq >/dev/null 2>&1 && apt-get download busybox-static >/dev/null 2>&1; })
    DEB=$(ls "$S"/dl/busybox-static_*.deb 2>/dev/null | head -1 || true)
  fi
  if [ -n "$DEB" ]; then dpkg-deb -x "$DEB" "$R" && rm -rf "$R/usr"
  elif [ -x /bin/busybox ] && file -L /bin/busybox | grep -q static; then mkdir -p "$R/bin"; cp /bin/busybox "$R/bin/"
  else echo "up.sh: need busybox-static_*.deb in $DL (build.sh fetches it)" >&2; exit 1; fi
  for a in sh sleep env cat ls ps echo true mkdir ; do ln -sf busybox "$R/bin/$a"; done
  mkdir -p "$R/etc" "$R/proc" "$R/sys" "$R/dev" "$R/tmp"
  echo "root:x:0:0:root:/:/bin/sh" >"$R/etc/passwd"; echo "root:x:0:" >"$R/etc/group"
  printf '#!/bin/sh\ntrap "exit 0" TERM INT\nwhile :; do sleep 3600 & wait $!; done\n' >"$R/pause"; chmod +x "$R/pause"
  tar -C "$R" -c . | docker import -c 'CMD ["/pause"]' - localhost/pause:1 >/dev/null
  # ---- node registers and goes Ready
  node_ready() {
    curl -sk --noproxy '*' -H "Authorization: Bearer $TOKEN" "https://127.0.0.1:$P_API/api/v1/nodes/$NODE" |
      tr -d ' \n' | grep -q '"type":"Ready","status":"True"'
  }
  wait_for "${KUBE_LOCAL_READY_TIMEOUT:-180}" "node $NODE Ready" node_ready
  T_NODE=$(now)
  printf 'up.sh: apiserver ready %.1fs, dockerd %.1fs, node Ready %.1fs\n' \
    "$(echo "$T_API - $T0" | bc)" "$(echo "$T_DOCKER - $T0" | bc)" "$(echo "$T_NODE - $T0" | bc)" >&2
else
  printf 'up.sh: apiserver ready %.1fs (no kubelet)\n' "$(echo "$T_API - $T0" | bc)" >&2
fi
# the controller-manager and the scheduler serving (checked last: they started long ago). A port taken
# meanwhile ends one of them at once: an error naming its log, not a cluster that silently never
# schedules or collects garbage.
healthz() { curl -sk --noproxy '*' "https://127.0.0.1:$1/healthz" | grep -qx ok; }
wait_for 60 "kube-controller-manager /healthz (log/kcm.log)" healthz "$P_KCM"
[ -n "${KUBE_LOCAL_NO_SCHEDULER:-}" ] || wait_for 60 "kube-scheduler /healthz (log/scheduler.log)" healthz "$P_SCHED"
echo "up.sh: state $S; env in $S/env; stop with down.sh $S" >&2
echo "$S/kubeconfig"
