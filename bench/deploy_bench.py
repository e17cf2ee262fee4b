"""Issue 19's deploy and verify numbers ("Numbers"): ``deploy`` + ``verify`` against an API server, on a
simulated fleet of ``--nodes`` hosts. Prints numbers and ratios measured in the same run; asserts nothing.

The fleet: ``--nodes`` hosts (``connection: local``) round-robin over the healthy simulated-fleet
fixtures (``tests/tools/verify_fleet.py``: ansible_bench's fleet shapes less the two whose detection is
unmeasured by design), each with its Kubernetes node name (``gpustack_node_name: k8s-node-NNN``). The API
server holds what a healthy Device Manager and kubelet would have published for each host -- its own
detection through the real Publisher (NodeFeature, Devices), the Node with the exclusive resources its
cards give, a Running, Ready Device Manager Pod per manufacturer with cards -- so every node is ``ok``
(the summary line is printed and checked: a run that is not all ok is refused, not timed).

(a) ``ansible-playbook playbooks/verify.yml`` vs ``ansible all -m ping`` on the same inventory, both
    ``-f/--forks``, alternated, median of ``--runs``: wall time, the CPU seconds of each run's own
    processes (ansible, its workers, the modules; not the API server's), the ratio and a verdict
    against issue 19's bound (verify <= 2x ping); then where the playbook's time goes (a timeline
    callback: per task, first start -> last end, and the playbook's start-up before its first task and
    wind-down after its last). One uncounted run of each first (bytecode caches, page cache).
(b) ``--api kube-local`` only: the ``deploy`` role (``roles/deploy``, a play on localhost as
    ``playbooks/deploy.yml`` runs it once) installing the chart of this checkout with a real helm 4.1.4
    and kubernetes.core 6.6.0, timed twice: the install, then the idempotent second run (``changed=0``
    checked). The cluster takes the worker on its local image ``localhost/pause:1`` (it cannot run the
    worker: no ``--wait``, no ``--atomic``) and the Device Manager off (it allows no privileged Pod); NFD's
    two CRDs are made beforehand, as the role requires.

Two API servers (``--api``), as ``bench/durable_bench.py``'s:

- ``standin`` (the default): the Publisher's API-server stand-in (``tests/kube/routes_publish.py``, the
  Devices CRD schema enforced) in a process of its own, seeded inside it; plain HTTP. No deploy: there is
  no helm against a stand-in.
- ``kube-local``: a real ``kube-apiserver`` 1.20.2 with etcd, the controller-manager and a kubelet
  (``tests/tools/kube_cluster.py``, started for the run; needs root), TLS with a bearer token through a
  kubeconfig. The simulated Nodes are API objects no kubelet runs: the node lifecycle controller marks
  them unreachable, so their Device Manager Pods tolerate every taint and are marked Ready again before
  each verify run (uncounted). Their ``Devices`` leave out the empty strings the models write for unknown
  values: Kubernetes 1.20.2's CRD validation refuses ``""`` in a string field as null
  (``tests/tools/verify_fleet.py::devices_for_api``).

Left out: ``playbooks/deploy.yml`` as a whole (its preflight play is ``bench/ansible_bench.py`` (b)'s
subject); the Device Manager DaemonSets and ``--wait`` over a worker that becomes Ready (no runnable
operator image in the cluster: the end-to-end story of ``tests/cluster``); SSH (every host is
``connection: local`` on this machine, so ping and verify pay no network); drifting nodes (the report's
words are the integration test's subject; here every node is ok); the API server's own CPU.

Run: python bench/deploy_bench.py [--api standin|kube-local] [--nodes 50] [-f 10] [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import yaml  # noqa: E402

from bench.ansible_bench import ansible_env, children_cpu, fmt, median, phases  # noqa: E402
from tests.tools.verify_fleet import FIXTURE_HOSTS, HEALTHY_FIXTURES, NS, fleet_hosts  # noqa: E402

BIN = Path(sys.executable).parent
VERIFY_TARGET = 2.0  # issue 19: verify <= 2x an ansible -m ping of the same inventory
CHART = REPO / "operator" / "chart" / "gpustack-operator"
# what the one-node cluster can take: the worker on its local image, no waiting, no Device Manager
DEPLOYABLE: dict[str, Any] = {
    "deploy_device_manager_enabled": False,
    "deploy_image": {"repository": "localhost/pause", "tag": "1", "pullPolicy": "Never"},
    "deploy_wait": False,
    "deploy_atomic": False,
}
SUMMARY = re.compile(r"cluster verify: (\d+) nodes, (\d+) ok, (\d+) drift, (\d+) error")

STANDIN_CHILD = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from gpustack_operator.kube import crds
from gpustack_operator.kube.clusterview import make_client
from tests.kube.routes_publish import PublishStandIn
from tests.tools.verify_fleet import fleet_hosts, fleet_seeds, seed_standin
seeds = fleet_seeds(fleet_hosts(int(sys.argv[2])))  # detection forks: before the server's threads
server = PublishStandIn(schema=crds.openapi_schema()).start()
seed_standin(server, seeds, make_client(server=server.url))
print(server.url, flush=True)
sys.stdin.read()  # until the parent closes it
server.close()
"""


class Standin:
    """The stand-in in a process of its own, seeded with ``count`` healthy nodes."""

    label = "the API-server stand-in (tests/kube/routes_publish.py, its own process, HTTP)"

    def __init__(self, count: int) -> None:
        self.child = subprocess.Popen(
            [sys.executable, "-c", STANDIN_CHILD, str(REPO), str(count)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        assert self.child.stdout is not None
        self.url = self.child.stdout.readline().strip()
        if not self.url.startswith("http://127.0.0.1:"):
            self.child.kill()
            raise SystemExit("the API-server stand-in did not start")

    def verify_vars(self) -> dict[str, str]:
        return {"verify_api_server": self.url}

    def before_run(self) -> None:
        """Nothing changes the stand-in between runs."""

    def close(self) -> None:
        self.child.communicate("", timeout=30)


class KubeLocal:
    """A real kube-apiserver (kube-local), started for the run; seeded after the deploy."""

    label = "a real kube-apiserver 1.20.2 with etcd, the controller-manager and a kubelet (kube-local), TLS"

    def __init__(self) -> None:
        from tests.cluster.test_publish_cluster import NODE_FEATURE_CRD, apply_crd  # noqa: PLC0415
        from tests.cluster.test_worker import RULE_CRD  # noqa: PLC0415
        from tests.tools.kube_cluster import KubeCluster, cannot_run  # noqa: PLC0415

        reason = cannot_run()
        if reason is not None:
            raise SystemExit(f"--api kube-local: {reason}")
        started = time.perf_counter()
        self.cluster = KubeCluster.start()
        print(f"  kube-local up in {time.perf_counter() - started:.1f} s")
        self.kubeconfig = str(self.cluster.kubeconfig)
        self.client = self.cluster.core().api_client
        self.seeds: list[Any] = []
        try:
            apply_crd(self.client, NODE_FEATURE_CRD)  # NFD's CRDs: the deploy role refuses without them
            apply_crd(self.client, RULE_CRD)
        except BaseException:
            self.close()
            raise

    def seed(self, count: int) -> float:
        """The Devices CRD established (the chart's, else ours), the namespace, the healthy fleet."""
        from gpustack_operator.kube import crds  # noqa: PLC0415
        from gpustack_operator.kube.rest import KubeRequestError, request  # noqa: PLC0415
        from gpustack_operator.worker.startup import apply_crds  # noqa: PLC0415

        from tests.tools.verify_fleet import fleet_seeds, seed_api  # noqa: PLC0415

        self.seeds = fleet_seeds(fleet_hosts(count))
        started = time.perf_counter()
        apply_crds(self.client, [crds.devices_crd()])
        try:
            request(self.client, "POST", "/api/v1/namespaces", body={"metadata": {"name": NS}})
        except KubeRequestError as exc:
            if exc.status != 409:
                raise
        seed_api(self.client, self.seeds)
        return time.perf_counter() - started

    def verify_vars(self) -> dict[str, str]:
        return {"verify_kubeconfig": self.kubeconfig}

    def before_run(self) -> None:
        from tests.tools.verify_fleet import mark_pods_ready  # noqa: PLC0415

        mark_pods_ready(self.client, self.seeds)

    def close(self) -> None:
        self.cluster.stop(check=False)


def inventory(path: Path, hosts: dict[str, tuple[str, str]]) -> Path:
    members = {
        name: {"gpustack_host_root": str(FIXTURE_HOSTS / fixture), "gpustack_node_name": node}
        for name, (fixture, node) in hosts.items()
    }
    common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    path.write_text(yaml.safe_dump({"all": {"vars": common, "hosts": members}}))
    return path


def bench_env(work: Path) -> dict[str, str]:
    """ansible_bench's environment (bytecode cache, the timeline callback), without proxies or a
    kubeconfig of the machine's: the API server is named on the command line."""
    env = ansible_env(work)
    for key in ("http_proxy", "https_proxy", "all_proxy", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "KUBECONFIG"):
        env.pop(key, None)
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return env | {"NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost"}


class Run:
    """One timed run: wall and CPU seconds, exit code, output, timeline events, its start and end."""

    def __init__(self, cmd: list[str], env: dict[str, str], timeline: Path) -> None:
        timeline.unlink(missing_ok=True)
        run_env = {**env, "GPA_TIMELINE": str(timeline), "ANSIBLE_CALLBACKS_ENABLED": "gpa_bench_timeline"}
        cpu = children_cpu()
        self.start = time.time()
        started = time.perf_counter()
        proc = subprocess.run(cmd, cwd=REPO, env=run_env, capture_output=True, text=True, check=False)
        self.wall = time.perf_counter() - started
        self.end = self.start + self.wall
        self.cpu = children_cpu() - cpu
        self.rc = proc.returncode
        self.out = proc.stdout + proc.stderr
        lines = timeline.read_text().splitlines() if timeline.exists() else []
        self.events: list[dict[str, object]] = [json.loads(line) for line in lines]

    def edges(self) -> tuple[float, float]:
        """(seconds before the first task started, seconds after the last one ended)."""
        times = [float(e["t"]) for e in self.events]  # type: ignore[arg-type]
        return (min(times) - self.start, self.end - max(times)) if times else (self.wall, 0.0)

    def recap(self) -> dict[str, dict[str, int]]:
        rows = re.findall(r"^(\S+)\s+:\s+(ok=.*)$", self.out, re.MULTILINE)
        return {host: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", rest)} for host, rest in rows}


def show_phases(run: Run, label: str) -> None:
    before, after = run.edges()
    print(f"    {label}start-up, before the first task{'':<21} {fmt(before)}")
    for task, (span, n) in phases(run.events).items():
        name = (label + task.rpartition(" : ")[2])[:56]
        print(f"    {name:<56} {fmt(span)}   {n} host(s)")
    print(f"    {label}wind-down, after the last task{'':<22} {fmt(after)}")


def verify_commands(inv: Path, forks: int, variables: dict[str, str], reports: Path) -> dict[str, list[str]]:
    extra = [
        arg
        for key, value in {**variables, "verify_report_dir": str(reports)}.items()
        for arg in ("-e", f"{key}={value}")
    ]
    playbook = [str(BIN / "ansible-playbook"), str(REPO / "playbooks" / "verify.yml"), "-i", str(inv), "-f", str(forks)]
    ping = [str(BIN / "ansible"), "all", "-i", str(inv), "-m", "ansible.builtin.ping", "-f", str(forks)]
    return {"ping": ping, "verify": playbook + extra}


def checked(run: Run, key: str, nodes: int) -> Run:
    """The run, refused unless it succeeded (and, for verify, found every node ok)."""
    if run.rc != 0:
        raise SystemExit(f"{key} failed with {run.rc}:\n{run.out[-3000:]}")
    if key == "verify":
        found = SUMMARY.search(run.out)
        if found is None or int(found[1]) != nodes or int(found[2]) != nodes:
            raise SystemExit(f"verify did not find {nodes} nodes ok:\n{run.out[-3000:]}")
    return run


def verify_vs_ping(work: Path, server: Any, nodes: int, forks: int, runs: int) -> None:
    env = bench_env(work)
    hosts = fleet_hosts(nodes)
    inv = inventory(work / f"fleet-{nodes}.yml", hosts)
    # uncounted: one host per fixture through both, so every module either run loads has its bytecode
    warm = inventory(work / "fleet-warm.yml", dict(list(hosts.items())[: len(HEALTHY_FIXTURES)]))
    for key, cmd in verify_commands(warm, forks, server.verify_vars(), work / "reports").items():
        server.before_run()
        checked(Run(cmd, env, work / f"timeline-warm-{key}.jsonl"), key, min(nodes, len(HEALTHY_FIXTURES)))
    commands = verify_commands(inv, forks, server.verify_vars(), work / "reports")
    samples: dict[str, list[Run]] = {key: [] for key in commands}
    for _ in range(runs):
        for key, cmd in commands.items():
            server.before_run()
            samples[key].append(checked(Run(cmd, env, work / f"timeline-{key}.jsonl"), key, nodes))
    wall = {key: median([r.wall for r in rs]) for key, rs in samples.items()}
    cpu = {key: median([r.cpu for r in rs]) for key, rs in samples.items()}
    print(
        f"== (a) verify vs ping: {nodes} simulated hosts (connection: local), -f {forks}, median of {runs}, alternated"
    )
    print(f"  ansible all -m ping              {fmt(wall['ping'])}   ({wall['ping'] / nodes * 1000:6.1f} ms/host)")
    print(f"  ansible-playbook verify.yml      {fmt(wall['verify'])}   ({wall['verify'] / nodes * 1000:6.1f} ms/host)")
    print(
        f"  each run: ping {', '.join(fmt(r.wall).strip() for r in samples['ping'])};"
        f" verify {', '.join(fmt(r.wall).strip() for r in samples['verify'])}"
    )
    ratio = wall["verify"] / wall["ping"]
    verdict = "met" if ratio <= VERIFY_TARGET else "NOT met"
    print(f"  verdict: {verdict} -- verify/ping {ratio:.2f}x against the target <= {VERIFY_TARGET}x (wall)")
    print(
        f"  CPU of the runs' processes: ping {fmt(cpu['ping']).strip()}, verify {fmt(cpu['verify']).strip()}"
        f" ({cpu['verify'] / cpu['ping']:.2f}x)"
    )
    found = SUMMARY.search(samples["verify"][-1].out)
    print(f"  the report: {found[0] if found else '?'}")
    print("  where the time goes (last run; first start -> last end per task):")
    show_phases(samples["verify"][-1], "")
    show_phases(samples["ping"][-1], "ping: ")


DEPLOY_PLAY = [{"hosts": "localhost", "gather_facts": False, "roles": [{"role": "gpustack.accelerators.deploy"}]}]


def deploy_runs(work: Path, cluster: KubeLocal) -> None:
    """(b): the deploy role's install, then its idempotent second run, against kube-local."""
    from tests.tools.kubernetes_core import provide  # noqa: PLC0415

    helm = subprocess.run(["bash", str(REPO / "tests/tools/helm.sh")], capture_output=True, text=True, check=False)
    if helm.returncode != 0:
        print(f"== (b) deploy: left out -- helm could not be provided: {helm.stderr.strip()[-300:]}")
        return
    collections = provide()
    home = work / "deploy-home"
    for name in ("home", "helm-cache", "helm-config", "helm-data"):
        (home / name).mkdir(parents=True, exist_ok=True)
    env = bench_env(work) | {
        "ANSIBLE_COLLECTIONS_PATH": f"{collections}:{REPO / 'collections'}",
        "HOME": str(home / "home"),
        "HELM_CACHE_HOME": str(home / "helm-cache"),
        "HELM_CONFIG_HOME": str(home / "helm-config"),
        "HELM_DATA_HOME": str(home / "helm-data"),
    }
    play = work / "deploy.yml"
    play.write_text(yaml.safe_dump(DEPLOY_PLAY))
    inv = work / "localhost.yml"
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inv.write_text(yaml.safe_dump({"all": {"hosts": {"localhost": local}}}))
    variables = {
        "deploy_chart": str(CHART),
        "deploy_kubeconfig": cluster.kubeconfig,
        "deploy_helm_binary": helm.stdout.strip().splitlines()[-1],
        "deploy_timeout": "2m0s",
        **DEPLOYABLE,
    }
    (work / "deploy-vars.json").write_text(json.dumps(variables))
    cmd = [str(BIN / "ansible-playbook"), "-i", str(inv), str(play), "-e", f"@{work / 'deploy-vars.json'}"]
    print("== (b) the deploy role against kube-local (helm 4.1.4, kubernetes.core 6.6.0; the worker only)")
    for label, changed in (("install", 1), ("second run (idempotent)", 0)):
        run = Run(cmd, env, work / "timeline-deploy.jsonl")
        got = run.recap().get("localhost", {}).get("changed")
        if run.rc != 0 or got != changed:
            raise SystemExit(f"deploy {label}: exit {run.rc}, changed={got} (wanted {changed}):\n{run.out[-3000:]}")
        print(f"  {label:<28} {fmt(run.wall)}   (CPU {fmt(run.cpu).strip()}, changed={got})")
        show_phases(run, "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--api", choices=("standin", "kube-local"), default="standin")
    parser.add_argument("--nodes", type=int, default=50, help="simulated hosts (default 50)")
    parser.add_argument("-f", "--forks", type=int, default=10, help="forks, as ansible's -f (default 10)")
    parser.add_argument("--runs", type=int, default=3, help="runs of each of ping and verify (default 3)")
    args = parser.parse_args(argv)
    if args.nodes < 1 or args.forks < 1 or args.runs < 1:
        parser.error("--nodes, --forks and --runs must be at least 1")
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    with tempfile.TemporaryDirectory(prefix="gpa-deploy-bench-") as tmp:
        work = Path(tmp)
        server: Any = KubeLocal() if args.api == "kube-local" else Standin(args.nodes)
        try:
            print(f"API server: {server.label}")
            if isinstance(server, KubeLocal):
                deploy_runs(work, server)
                print(f"  {args.nodes} healthy nodes seeded over REST in {server.seed(args.nodes):.1f} s")
            else:
                print("== (b) deploy: left out with --api standin (helm needs a real API server: --api kube-local)")
            verify_vs_ping(work, server, args.nodes, args.forks, args.runs)
        finally:
            server.close()
    print(f"machine: load average {' '.join(f'{x:.1f}' for x in os.getloadavg())} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
