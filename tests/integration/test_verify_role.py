"""The verify role for real (issue 19): ansible-playbook over fixture hosts (connection: local), the
cluster an API-server stand-in (tests/kube/routes_publish.py, the Devices CRD schema enforced) seeded by
the real Publisher from each host's own detection -- matching for one node, drifting for the others the
way the role exists to catch: a card fallen off that the cluster still advertises, labels old after a
driver upgrade, a node with accelerators and no Device Manager pod. Asserts the console, the recap
(exactly the drifting hosts fail), the YAML, the JUnit and the HTML."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import pytest
import yaml
from gpustack_operator import api
from gpustack_operator.kube import crds
from gpustack_operator.kube.clusterview import make_client
from gpustack_operator.kube.publish import Publisher
from gpustack_operator.ledger.models import DevicesGroup

from tests.conftest import BIN, REPO, host
from tests.kube.apiserver import pod_manifest
from tests.kube.routes_publish import PublishStandIn

pytestmark = pytest.mark.ansible

NS = "gpustack-system"
OLD_DRIVER = "535.104.05"
FALLEN = "GPU-00000000-0000-0000-0000-0000000fa11e"
# host -> (fixture, node name, manufacturer)
HOSTS = {
    "good-01": ("h100-sxm-8x", "node-good", "nvidia"),
    "fallen-01": ("mixed-nvidia-mellanox", "fallen-01", "nvidia"),
    "upgraded-01": ("a100-mig", "upgraded-01", "nvidia"),
    "nopod-01": ("mi300x-8x", "nopod-01", "amd"),
    "cpu-01": ("cpu-only-vm", "cpu-01", "nvidia"),
}


def detect(fixture: str) -> tuple[list[DevicesGroup], Any]:
    result = api.run_detect(api.make_request(str(host(fixture)), ["nvidia", "amd"]))
    return list(result.groups), result.interfaces


def dm_pod(name: str, node: str, manufacturer: str) -> dict[str, Any]:
    daemonset = f"gpustack-operator-device-manager-{manufacturer}"
    pod = pod_manifest(f"{daemonset}-{name}", namespace=NS, node_name=node)
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": daemonset, "uid": "u"}]
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    return pod


def seed(server: PublishStandIn, detections: dict[str, tuple[list[DevicesGroup], Any]]) -> None:
    """Publish each accelerator node's objects as its Device Manager would, then bend three of them."""
    resources = {"nvidia": "nvidia.com/gpu", "amd": "amd.com/gpu"}
    for name, (fixture, node, maker) in HOSTS.items():
        groups, interfaces = detections[fixture]
        if name == "fallen-01":  # the cluster still has the card the host lost
            first = groups[0]
            gone = first.accelerators[-1].model_copy(update={"id": FALLEN, "index": len(first.accelerators)})
            groups = [first.model_copy(update={"accelerators": [*first.accelerators, gone]}), *groups[1:]]
        if name == "upgraded-01":  # published before the host's driver was upgraded
            groups = [g.model_copy(update={"driver_version": OLD_DRIVER}) for g in groups]
        usable = sum(1 for g in groups for a in g.accelerators if a.status.physical_sliced is None)
        server.add_node(node, capacity={resources[maker]: str(usable)} if groups else {"cpu": "8"})
        if not groups:
            continue
        publisher = Publisher(make_client(server=server.url), node, namespace=NS, timeout=5)
        publisher.publish(groups, interfaces, [])
        if name != "nopod-01":
            server.add_pod(dm_pod(name, node, maker))


@pytest.fixture
def cluster() -> Iterator[PublishStandIn]:
    detections = {fixture: detect(fixture) for fixture, _node, _maker in HOSTS.values()}  # before any thread
    with PublishStandIn(schema=crds.openapi_schema()) as server:
        seed(server, detections)
        yield server


def inventory(tmp_path: Path) -> Path:
    hosts = {}
    for name, (fixture, node, _maker) in HOSTS.items():
        hosts[name] = {"gpustack_host_root": str(host(fixture)), "gpustack_manufacturers": ["nvidia", "amd"]}
        if node != name:
            hosts[name]["gpustack_node_name"] = node
    # one whose detection fails (its root is not there), and one host nobody answers for (a closed
    # port on loopback): error nodes, never a pass
    hosts["broken-01"] = {"gpustack_host_root": str(tmp_path / "no-such-root")}
    hosts["gone-01"] = {
        "ansible_connection": "ssh",
        "ansible_host": "127.0.0.1",
        "ansible_port": 1,
        "ansible_ssh_common_args": "-o ConnectTimeout=3 -o BatchMode=yes",
    }
    doc = {
        "all": {
            "vars": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
            "hosts": hosts,
        }
    }
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def run(env: dict[str, str], tmp_path: Path, server: PublishStandIn, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in env.items() if k.lower() not in ("http_proxy", "https_proxy", "all_proxy", "kubeconfig")}
    env.pop("KUBERNETES_SERVICE_HOST", None)
    return subprocess.run(
        [
            str(BIN / "ansible-playbook"),
            str(REPO / "playbooks" / "verify.yml"),
            "-i",
            str(inventory(tmp_path)),
            "-e",
            f"verify_api_server={server.url}",
            "-e",
            f"verify_report_dir={tmp_path / 'reports'}",
            *args,
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_verify_role_reports_the_drift_and_fails_the_drifting_hosts(
    ansible_env: dict[str, str], tmp_path: Path, cluster: PublishStandIn
) -> None:
    proc = run(ansible_env, tmp_path, cluster)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "cluster verify: 7 nodes, 2 ok, 3 drift, 2 error" in out, out[-4000:]
    recap = {
        h: (int(u), int(f))
        for h, u, f in re.findall(r"^(\S+)\s+: ok=\d+\s+changed=\d+\s+unreachable=(\d+)\s+failed=(\d+)", out, re.M)
    }
    assert {h for h, (u, f) in recap.items() if u or f} == {
        "fallen-01",
        "upgraded-01",
        "nopod-01",
        "gone-01",
        "broken-01",
    }, out[-4000:]
    assert recap["gone-01"][1] == 1  # kept in the play (ignore_unreachable), failed by the verdict
    assert "changed=0" in out and not re.search(r"changed=[1-9]", out)

    (report,) = (tmp_path / "reports").glob("verify-*.yaml")
    doc = yaml.safe_load(report.read_text())
    nodes = {n["host"]: n for n in doc["nodes"]}
    assert doc["summary"] == {"nodes": 7, "error": 2, "drift": 3, "ok": 2}
    assert nodes["gone-01"]["status"] == "error" and nodes["gone-01"]["error"].startswith("unreachable: ")
    assert nodes["broken-01"]["error"].startswith(f"accelerator_facts failed: host root '{tmp_path / 'no-such-root'}'")
    assert nodes["good-01"] == {"host": "good-01", "node": "node-good", "status": "ok"}
    assert nodes["cpu-01"]["status"] == "ok"
    fallen = [d["text"] for d in nodes["fallen-01"]["differences"]]
    assert fallen == [
        f"Devices advertises {FALLEN} (nvidia l40s) the host no longer has",
        "allocatable nvidia.com/gpu 5, the host has 4",
        "label acceleratable.feature.gpustack.ai/nvidia-l40s.count is 4 on the host, 5 in the NodeFeature labels",
    ]
    upgraded = [d["text"] for d in nodes["upgraded-01"]["differences"]]
    assert upgraded == [
        f"nvidia driver 535.183.01 on the host, {OLD_DRIVER} in the NodeFeature labels",
        f"nvidia a100-sxm4-80gb driver 535.183.01 on the host, {OLD_DRIVER} in Devices",
    ]
    assert [d["text"] for d in nodes["nopod-01"]["differences"]] == [
        "no device-manager pod (DaemonSet gpustack-operator-device-manager-amd) on a node with 8 amd accelerators"
    ]
    # the console: one line per drifting node, worst first, then the files
    assert (
        f"fallen-01 (node fallen-01): drift - Devices advertises {FALLEN} (nvidia l40s) the host no longer has (+2 more)"
        in out
    )

    junit = ET.parse(report.with_suffix("").with_suffix(".junit.xml")).getroot()
    assert (junit.get("tests"), junit.get("failures"), junit.get("errors")) == ("7", "3", "2")
    cases = {c.get("name"): c for c in junit.iter("testcase")}
    failure = cases["upgraded-01"].find("failure")
    assert failure is not None and failure.get("message") == "\n".join(upgraded)
    assert cases["good-01"].find("failure") is None
    page = report.with_suffix("").with_suffix(".html").read_text()
    assert f"Devices advertises {FALLEN} (nvidia l40s) the host no longer has" in page
    assert "cluster verify: 7 nodes, 2 ok, 3 drift, 2 error" in page


def test_verify_role_passes_matching_nodes_in_check_mode_and_names_an_api_server_it_cannot_read(
    ansible_env: dict[str, str], tmp_path: Path, cluster: PublishStandIn
) -> None:
    proc = run(ansible_env, tmp_path, cluster, "--check", "--limit", "good-01,cpu-01")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "cluster verify: 2 nodes, 2 ok, 0 drift, 0 error" in out

    # the same node against an API server nobody answers on: an error naming the read, never a pass
    proc = run(ansible_env, tmp_path, cluster, "--limit", "good-01", "-e", "verify_api_server=http://127.0.0.1:9")
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-4000:]
    assert "cluster verify: 1 nodes, 0 ok, 0 drift, 1 error" in out
    assert (
        "good-01 (node node-good): error - the Node of node node-good could not be read: GET /api/v1/nodes/node-good at http://127.0.0.1:9"
        in out
    )


def test_every_role_variable_is_specified_defaulted_and_documented() -> None:
    role = REPO / "roles" / "verify"
    options = yaml.safe_load((role / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((role / "defaults" / "main.yml").read_text())
    readme = (role / "README.md").read_text(encoding="utf-8")
    table = dict(re.findall(r"^\| `(verify_\w+)` \| `([^`]*)` \|", readme, re.MULTILINE))
    assert set(options) == set(defaults) == set(table)
    for name, option in options.items():
        assert option["default"] == defaults[name], name
    # every variable the tasks use is one of them
    used = set(re.findall(r"\bverify_[a-z_]+\b", (role / "tasks" / "main.yml").read_text()))
    assert used - {"verify_facts_result", "verify_report"} == set(options)
