"""The report's ``topology`` section (supplement §2.8): the kubelet's TopologyManager policy, or
``unknown`` with one of four notes; always ``declared``; never the exit code. And the report
document it joins: three sections in order, the runtime resolution kept out of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from gpustack_operator import api
from gpustack_operator.host import HostRoot
from gpustack_operator.preflight.kubelet import read_kubelet
from gpustack_operator.preflight.models import Depth, Detection, Group, Report, State, Topology, TopologyPolicy
from gpustack_operator.preflight.run import NOTE_NOT_YET_ASKED, preflight_group, unusable_root_report
from gpustack_operator.preflight.runtime import RuntimeName
from gpustack_operator.preflight.topology import (
    NOTE_NOT_READ,
    NOTE_NOTHING_NAMED,
    NOTE_TREES_DISAGREE,
    NOTE_UNREADABLE,
    topology_section,
)

from tests.tools import kubelet_nodes as kn
from tests.tools.kubelet_nodes import K3S_TREE, KUBELET_PID, RKE2_TREE, process, write

STAMP = "2026-11-29T10:00:00Z"


def section(root: Path) -> Topology:
    return topology_section(read_kubelet(HostRoot(root)), STAMP)


def node(root: Path, files: dict[str, str], kubelet: list[str] | None = None) -> Path:
    kn.base(root)
    for rel, text in files.items():
        write(root, rel, text)
    if kubelet is not None:
        process(root, KUBELET_PID, kubelet)
    return root


@pytest.mark.parametrize(
    ("files", "kubelet", "policy"),
    [
        # the running kubelet: its command line, its --config-dir drop-ins, its --config file
        (
            {"c.yaml": "topologyManagerPolicy: none\n"},
            ["kubelet", "--config=/c.yaml", "--topology-manager-policy", "best-effort"],
            "best-effort",
        ),
        (
            {"c.yaml": "topologyManagerPolicy: none\n", "d/10.conf": "topologyManagerPolicy: restricted\n"},
            ["kubelet", "--config=/c.yaml", "--config-dir=/d"],
            "restricted",
        ),
        (
            {"opt/k/config.yaml": "topologyManagerPolicy: single-numa-node\n"},
            ["kubelet", "--config=/opt/k/config.yaml"],
            "single-numa-node",
        ),
        # no kubelet running: kubeadm-flags.env, config.yaml, a distribution tree
        (
            {
                "var/lib/kubelet/kubeadm-flags.env": 'KUBELET_KUBEADM_ARGS="--topology-manager-policy=single-numa-node --v=2"\n'
            },
            None,
            "single-numa-node",
        ),
        (
            {"var/lib/kubelet/config.yaml": "kind: KubeletConfiguration\ntopologyManagerPolicy: restricted\n"},
            None,
            "restricted",
        ),
        ({f"{K3S_TREE}/90-numa.conf": "topologyManagerPolicy: best-effort\n"}, None, "best-effort"),
        ({"etc/kubernetes/kubelet.conf.d/10.conf": "topologyManagerPolicy: none\n"}, None, "none"),
    ],
)
def test_a_named_policy_is_declared_with_no_note(
    tmp_path: Path, files: dict[str, str], kubelet: list[str] | None, policy: str
) -> None:
    topology = section(node(tmp_path, files, kubelet))
    assert topology == Topology(timestamp=STAMP, policy=TopologyPolicy(policy), depth=Depth.DECLARED)
    assert topology.wire() == {"timestamp": STAMP, "policy": policy, "depth": "declared"}


def test_kubeadm_node_fixture(tmp_path: Path) -> None:
    assert section(kn.kubeadm_node(tmp_path)).policy is TopologyPolicy.SINGLE_NUMA_NODE


def test_nothing_named_is_unknown_never_the_default(tmp_path: Path) -> None:
    topology = section(kn.kubeadm_node(tmp_path, policy=None))
    assert topology.policy is TopologyPolicy.UNKNOWN and topology.depth is Depth.DECLARED
    note = topology.note or ""
    assert note.startswith(NOTE_NOTHING_NAMED)
    assert f"the running kubelet (pid {KUBELET_PID}): its command line" in note
    assert "the --config file /var/lib/kubelet/config.yaml" in note
    assert "unknown rather than defaulted" in note


def test_a_k3s_node_naming_no_policy_says_there_was_no_command_line(tmp_path: Path) -> None:
    note = section(kn.k3s_node(tmp_path)).note or ""
    assert note.startswith(NOTE_NOTHING_NAMED) and "no kubelet is running, so there is no command line" in note
    assert f"/{K3S_TREE}" in note


def test_an_unreadable_file_is_unknown_naming_it(tmp_path: Path) -> None:
    node(tmp_path, {})
    (tmp_path / "var/lib/kubelet/config.yaml").mkdir(parents=True)
    topology = section(tmp_path)
    assert topology.policy is TopologyPolicy.UNKNOWN
    assert (topology.note or "").startswith(f"{NOTE_UNREADABLE}: /var/lib/kubelet/config.yaml: Is a directory")


def test_a_value_that_is_no_policy_could_not_be_read_as_one(tmp_path: Path) -> None:
    topology = section(node(tmp_path, {"var/lib/kubelet/config.yaml": "topologyManagerPolicy: numa-please\n"}))
    assert topology.policy is TopologyPolicy.UNKNOWN
    assert (topology.note or "").startswith(f"{NOTE_UNREADABLE} as a policy: topologyManagerPolicy in /var/lib")
    assert "'numa-please', which is none of single-numa-node, restricted, best-effort, none" in (topology.note or "")


def test_two_distribution_trees_disagreeing_name_both(tmp_path: Path) -> None:
    files = {
        f"{K3S_TREE}/00.conf": "topologyManagerPolicy: restricted\n",
        f"{RKE2_TREE}/20-cli-config-dir/10.conf": "topologyManagerPolicy: best-effort\n",
    }
    topology = section(node(tmp_path, files))
    assert topology.policy is TopologyPolicy.UNKNOWN
    note = topology.note or ""
    assert note.startswith(NOTE_TREES_DISAGREE)
    assert f"/{K3S_TREE}/00.conf names restricted" in note
    assert f"/{RKE2_TREE}/20-cli-config-dir/10.conf names best-effort" in note


def test_without_the_host_process_table_it_is_not_read(tmp_path: Path) -> None:
    topology = section(kn.kubeadm_node(tmp_path, proc=False))  # config.yaml names a policy; not taken
    assert topology.policy is TopologyPolicy.UNKNOWN
    assert (topology.note or "").startswith(f"{NOTE_NOT_READ}: {tmp_path}/proc/1 is absent")


def test_a_host_root_without_numeric_proc_entries_is_not_read(tmp_path: Path) -> None:
    kn.kubeadm_node(tmp_path, proc=False)
    (tmp_path / "proc/self").mkdir()
    assert (section(tmp_path).note or "").startswith(NOTE_NOT_READ)
    os.symlink("self", tmp_path / "proc/1")  # a /proc/1 that is no process directory of its own still reads
    assert section(tmp_path).policy is TopologyPolicy.SINGLE_NUMA_NODE


# -- the report ------------------------------------------------------------------------------------


def ok_group(manufacturer: str = "nvidia") -> Group:
    return Group(
        manufacturer=manufacturer,
        timestamp=STAMP,
        detection=Detection(state=State.OK, accelerators=8, detail="NVIDIA H100 x8"),
        note=NOTE_NOT_YET_ASKED,
    )


def test_topology_never_fails_the_run_whatever_it_says(tmp_path: Path) -> None:
    node(tmp_path, {})
    (tmp_path / "var/lib/kubelet/config.yaml").mkdir(parents=True)
    report = Report(accelerators=[ok_group()], topology=section(tmp_path))
    assert report.topology is not None and report.topology.policy is TopologyPolicy.UNKNOWN
    assert report.failures() == []
    assert report.wire()["topology"] == {  # and it is in the document: the empty list is a decision
        "timestamp": STAMP,
        "policy": "unknown",
        "depth": "declared",
        "note": report.topology.note,
    }


def test_document_order_and_what_stays_out_of_it(tmp_path: Path) -> None:
    node = str(kn.kubeadm_node(tmp_path))
    report = api.run_preflight(
        api.make_request(node, ["nvidia"]), runtime="ctr", probe_image="ubuntu:24.04", host_root=node
    )
    doc = report.wire()
    assert list(doc) == ["accelerators", "network", "topology"]
    assert report.topology is not None
    assert doc["topology"] == {
        "timestamp": report.topology.timestamp,
        "policy": "single-numa-node",
        "depth": "declared",
    }
    assert "runtime" not in doc and "probeImage" not in doc
    assert (
        report.runtime is not None
        and report.runtime.runtime is RuntimeName.CTR
        and report.probe_image == "ubuntu:24.04"
    )
    # the fleet report (the collection's module_utils, standard library only) reads the document
    from tests.unit.test_fleet_report import fleet

    entry = fleet.classify("n1", {"report": doc})
    assert entry["report"]["topology"] == doc["topology"]
    assert "runtime" not in entry["report"]


def test_summary_is_compact(tmp_path: Path) -> None:
    node = str(kn.k3s_node(tmp_path))
    report = api.run_preflight(api.make_request(node, ["nvidia", "amd"]), host_root=node)
    missing = Group(
        manufacturer="amd",
        timestamp=STAMP,
        detection=Detection(state=State.NOT_DECLARED, reason="none"),
    )
    report = report.model_copy(update={"accelerators": [missing, ok_group()]})
    assert report.summary() == {
        "manufacturers": {
            "amd": {"state": "not-declared", "depth": "declared", "accelerators": 0},
            "nvidia": {"state": "ok", "depth": "declared", "accelerators": 8},
        },
        "states": {"ok": 1, "unavailable": 0, "not-declared": 1},
        "topology": "unknown",
        "runtime": "ctr",
    }


def test_with_capabilities_off_the_note_says_no_probe_ran() -> None:
    from gpustack_operator.ledger.models import DevicesGroup
    from gpustack_operator.manufacturers.base import Detected
    from gpustack_operator.preflight.imageref import parse_image_ref

    group = DevicesGroup.model_validate(
        {
            "id": "nvidia-h100",
            "manufacturer": "nvidia",
            "name": "NVIDIA H100",
            "accelerators": [{"id": "GPU-0", "index": 0}],
        }
    )
    note = preflight_group("nvidia", Detected([group]), probe_image=parse_image_ref("ubuntu:24.04")).note or ""
    assert note.startswith(NOTE_NOT_YET_ASKED)
    assert note.endswith("the probe image ubuntu:24.04 was accepted, but no probe was started (capabilities off)")


def test_unusable_root_report_is_not_read_and_resolves_nothing(tmp_path: Path) -> None:
    report = unusable_root_report(["nvidia"], "host root '/nope' cannot be used", runtime=RuntimeName.DOCKER)
    assert report.topology is not None and report.topology.policy is TopologyPolicy.UNKNOWN
    assert (report.topology.note or "").startswith(f"{NOTE_NOT_READ}: the node view could not be used: host root")
    assert report.runtime is not None and report.runtime.runtime is RuntimeName.DOCKER and report.runtime.emitted
    assert report.failures() == ["nvidia: detection: " + (report.accelerators[0].detection.reason or "")]
    assert list(report.wire()) == ["accelerators", "topology"]
    bare = api.run_preflight(api.make_request(str(tmp_path / "nope"), ["nvidia"]), host_root=str(tmp_path / "nope"))
    assert bare.runtime is not None and bare.runtime.runtime is None and "not resolved" in (bare.runtime.reason or "")
