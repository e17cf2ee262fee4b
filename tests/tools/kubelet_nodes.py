"""Node shapes for the kubelet / runtime / topology readings, written into a directory (a tmp_path).

Each writes what the real node carries at the real paths: the host's process table (``proc/<pid>/comm``
and NUL-separated ``cmdline``, pid 1 always), kubeadm's ``kubeadm-flags.env`` and the
``KubeletConfiguration`` it generates, k3s's ``00-k3s-defaults.conf`` under its own
``kubelet.conf.d`` tree, and the container CLIs as executables on the host's PATH.

Contents follow what the tools write: kubeadm's config.yaml is ``kubeadm init``'s (v1.3x; note its
``containerRuntimeEndpoint: ""``, the endpoint arriving through ``kubeadm-flags.env`` and the
command line instead); the kubelet command line is systemd's expansion of the kubeadm drop-in
``10-kubeadm.conf`` (``$KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS``); k3s's
defaults are those k3s ≥ 1.32 writes on start.
"""

from __future__ import annotations

import os
from pathlib import Path

KUBELET_PID = 1187
CONTAINERD_PID = 903
K3S_PID = 744

KUBEADM_FLAGS = (
    'KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock '
    '--pod-infra-container-image=registry.k8s.io/pause:3.10"\n'
)

KUBELET_ARGV = [
    "/usr/bin/kubelet",
    "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
    "--kubeconfig=/etc/kubernetes/kubelet.conf",
    "--config=/var/lib/kubelet/config.yaml",
    "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
    "--pod-infra-container-image=registry.k8s.io/pause:3.10",
]

KUBEADM_CONFIG = """\
apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 0s
    enabled: true
  x509:
    clientCAFile: /etc/kubernetes/pki/ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 0s
    cacheUnauthorizedTTL: 0s
cgroupDriver: systemd
clusterDNS:
- 10.96.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: ""
cpuManagerReconcilePeriod: 0s
evictionPressureTransitionPeriod: 0s
fileCheckFrequency: 0s
healthzBindAddress: 127.0.0.1
healthzPort: 10248
httpCheckFrequency: 0s
imageMaximumGCAge: 0s
imageMinimumGCAge: 0s
kind: KubeletConfiguration
logging:
  flushFrequency: 0
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 0s
nodeStatusUpdateFrequency: 0s
resolvConf: /run/systemd/resolve/resolv.conf
rotateCertificates: true
runtimeRequestTimeout: 0s
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /etc/kubernetes/manifests
streamingConnectionIdleTimeout: 0s
syncFrequency: 0s
{policy}volumeStatsAggPeriod: 0s
"""

K3S_DEFAULTS = """\
address: 0.0.0.0
allowedUnsafeSysctls:
- net.ipv4.ip_forward
- net.ipv6.conf.all.forwarding
apiVersion: kubelet.config.k8s.io/v1beta1
authentication:
  anonymous:
    enabled: false
  webhook:
    cacheTTL: 2m0s
    enabled: true
  x509:
    clientCAFile: /var/lib/rancher/k3s/agent/client-ca.crt
authorization:
  mode: Webhook
  webhook:
    cacheAuthorizedTTL: 5m0s
    cacheUnauthorizedTTL: 30s
cgroupDriver: systemd
clusterDNS:
- 10.43.0.10
clusterDomain: cluster.local
containerRuntimeEndpoint: unix:///run/k3s/containerd/containerd.sock
cpuManagerReconcilePeriod: 10s
crashLoopBackOff: {}
evictionHard:
  imagefs.available: 5%
  nodefs.available: 5%
evictionMinimumReclaim:
  imagefs.available: 10%
  nodefs.available: 10%
evictionPressureTransitionPeriod: 5m0s
failSwapOn: false
fileCheckFrequency: 20s
healthzBindAddress: 127.0.0.1
httpCheckFrequency: 20s
imageMaximumGCAge: 0s
imageMinimumGCAge: 2m0s
kind: KubeletConfiguration
logging:
  flushFrequency: 5s
  format: text
  options:
    json:
      infoBufferSize: "0"
    text:
      infoBufferSize: "0"
  verbosity: 0
memorySwap: {}
nodeStatusReportFrequency: 5m0s
nodeStatusUpdateFrequency: 10s
resolvConf: /etc/resolv.conf
runtimeRequestTimeout: 2m0s
serializeImagePulls: false
shutdownGracePeriod: 0s
shutdownGracePeriodCriticalPods: 0s
staticPodPath: /var/lib/rancher/k3s/agent/pod-manifests
streamingConnectionIdleTimeout: 4h0m0s
syncFrequency: 1m0s
tlsCertFile: /var/lib/rancher/k3s/agent/serving-kubelet.crt
tlsPrivateKeyFile: /var/lib/rancher/k3s/agent/serving-kubelet.key
volumeStatsAggPeriod: 1m0s
"""

K3S_TREE = "var/lib/rancher/k3s/agent/etc/kubelet.conf.d"
RKE2_TREE = "var/lib/rancher/rke2/agent/etc/kubelet.conf.d"


def write(root: Path, rel: str, text: str | bytes, mode: int = 0o644) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    path.chmod(mode)
    return path


def process(root: Path, pid: int, argv: list[str], comm: str | None = None) -> None:
    """A process in the host's process table: ``comm`` (the executable's name) and ``cmdline``."""
    write(root, f"proc/{pid}/comm", (comm or os.path.basename(argv[0]))[:15] + "\n")
    write(root, f"proc/{pid}/cmdline", b"".join(a.encode() + b"\0" for a in argv))


def executable(root: Path, rel: str) -> None:
    write(root, rel, "#!/bin/sh\nexit 0\n", mode=0o755)


def base(root: Path, *, proc: bool = True) -> Path:
    """Any node: /etc, /run, /var/run -> /run, and pid 1 unless the host's /proc is not there."""
    (root / "etc").mkdir(parents=True, exist_ok=True)
    write(root, "etc/hostname", "node\n")
    (root / "run").mkdir(exist_ok=True)
    (root / "var").mkdir(exist_ok=True)
    if not (root / "var/run").exists():
        os.symlink("../run", root / "var/run")
    if proc:
        process(root, 1, ["/sbin/init", "splash"], comm="systemd")
    else:
        write(root, "proc/cpuinfo", "processor\t: 0\n")
    return root


def kubeadm_node(
    root: Path,
    *,
    running: bool = True,
    proc: bool = True,
    policy: str | None = "single-numa-node",
    clis: tuple[str, ...] = ("usr/local/bin/nerdctl", "usr/bin/ctr"),
) -> Path:
    """A kubeadm worker on containerd: the kubelet running (or stopped), its files, nerdctl and ctr."""
    base(root, proc=proc)
    write(root, "var/lib/kubelet/kubeadm-flags.env", KUBEADM_FLAGS)
    line = f"topologyManagerPolicy: {policy}\n" if policy else ""
    write(root, "var/lib/kubelet/config.yaml", KUBEADM_CONFIG.replace("{policy}", line))
    write(root, "run/containerd/containerd.sock", "")
    for cli in clis:
        executable(root, cli)
    if proc:
        process(root, CONTAINERD_PID, ["/usr/bin/containerd"])
        if running:
            process(root, KUBELET_PID, KUBELET_ARGV)
    return root


def k3s_node(root: Path, *, extra: dict[str, str] | None = None) -> Path:
    """A k3s agent: the kubelet embedded in the k3s process (nothing named kubelet runs), its defaults
    drop-in, k3s's containerd socket, and ctr as k3s's own multi-call link (no nerdctl)."""
    base(root)
    process(root, K3S_PID, ["/usr/local/bin/k3s", "agent"], comm="k3s-agent")
    write(root, f"{K3S_TREE}/00-k3s-defaults.conf", K3S_DEFAULTS)
    for rel, text in (extra or {}).items():
        write(root, rel, text)
    write(root, "run/k3s/containerd/containerd.sock", "")
    executable(root, "usr/local/bin/k3s")
    for name in ("ctr", "crictl", "kubectl"):
        os.symlink("k3s", root / f"usr/local/bin/{name}")
    return root


def docker_bare(root: Path) -> Path:
    """A bare machine before any cluster: docker installed, no kubelet anywhere."""
    base(root)
    executable(root, "usr/bin/docker")
    process(root, 812, ["/usr/bin/dockerd", "-H", "fd://", "--containerd=/run/containerd/containerd.sock"])
    return root
