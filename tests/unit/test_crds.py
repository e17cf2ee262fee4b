"""The Devices CRD generated from the pydantic models: the checked-in YAML is the generated one, the
schema is structural, and every object ``serve`` writes -- on each fixture node, with a ledger holding
every mode -- validates against it with nothing pruned."""

from __future__ import annotations

from functools import cache
from typing import Any

import pytest
import yaml
from gpustack_operator import api
from gpustack_operator.allocator.ledger import Claim, Ledger
from gpustack_operator.cli import main as cli_main
from gpustack_operator.kube import crds
from gpustack_operator.kube.publish import devices_object, flavor_labels, node_feature_object
from gpustack_operator.ledger.models import CamelModel
from gpustack_operator.manufacturers.respond import Family, PartitionInstance

from tests.conftest import REPO, host, run_cli
from tests.kube.structural import prune, structural_problems, validate

CHECKED_IN = REPO / "operator" / "crds" / crds.CRD_FILE

NODES = [
    ("h100-sxm-8x", "nvidia"),
    ("a100-mig", "nvidia"),
    ("mixed-nvidia-mellanox", "nvidia"),
    ("mi300x-8x", "amd"),
    ("ascend-910b-8x", "ascend"),
    ("ascend-950pr-v2", "ascend"),
    ("mlu370-x8", "cambricon"),
    ("metax-c500", "metax"),
    ("mthreads-s4000", "mthreads"),
    ("iluvatar-bi150", "iluvatar"),
    ("hygon-k100", "hygon"),
    ("hygon-k100-mig", "hygon"),
    ("thead-ppu", "thead"),
    ("cpu-only-vm", "nvidia"),
]


def test_the_checked_in_crd_is_the_generated_one() -> None:
    """Change a model and this fails until ``gpustack-operator crds > operator/crds/<file>`` is rerun."""
    assert CHECKED_IN.read_text() == crds.render()


def test_the_cli_prints_it(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli_main(["crds"]) == 0
    assert capsys.readouterr().out == CHECKED_IN.read_text()
    proc = run_cli("crds")
    assert proc.returncode == 0 and proc.stderr == ""
    assert proc.stdout == CHECKED_IN.read_text()


def test_the_crd_names_the_resource_of_the_spec() -> None:
    (doc,) = list(yaml.safe_load_all(CHECKED_IN.read_text()))
    spec = doc["spec"]
    assert doc["metadata"]["name"] == "devices.worker.gpustack.ai"
    assert spec["group"] == "worker.gpustack.ai" and spec["scope"] == "Cluster"
    assert spec["names"]["kind"] == "Devices" and spec["names"]["plural"] == "devices"
    (version,) = spec["versions"]
    assert version["name"] == "v1alpha1" and version["served"] and version["storage"]
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    groups = schema["properties"]["spec"]["properties"]["groups"]
    assert groups["x-kubernetes-list-type"] == "map" and groups["x-kubernetes-list-map-keys"] == ["id", "manufacturer"]
    accelerators = groups["items"]["properties"]["accelerators"]
    assert accelerators["x-kubernetes-list-map-keys"] == ["id"]
    interfaces = schema["properties"]["spec"]["properties"]["interfaces"]
    assert interfaces["x-kubernetes-list-map-keys"] == ["name"]
    status_acc = schema["properties"]["status"]["properties"]["groups"]["items"]["properties"]["accelerators"]
    fields = set(status_acc["items"]["properties"])
    assert {"id", "index", "mode", "allocated", "remaining", "allocatedSlices"} <= fields
    assert {"allocatedProfiles", "remainingProfiles"} <= fields
    # beyond supplement §9.2: who holds each accelerator, restart recovery's third source
    assert "holders" in fields
    holder = status_acc["items"]["properties"]["holders"]["items"]["properties"]
    assert {"pod", "podUid", "container", "mode", "units"} <= set(holder)
    assert status_acc["items"]["properties"]["mode"]["enum"] == ["free", "exclusive", "shared", "sliced", "partitioned"]
    assert "x-kubernetes-preserve-unknown-fields" not in CHECKED_IN.read_text()


def test_the_schema_is_structural() -> None:
    assert structural_problems(crds.openapi_schema()) == []


def test_the_checker_sees_what_is_not_structural() -> None:
    """The checker is no rubber stamp: what pydantic emits raw is refused."""
    raw = crds.DevicesSpec.model_json_schema(by_alias=True, mode="serialization")
    problems = structural_problems(raw)
    assert any("$defs" in p for p in problems) and any("anyOf" in p or "$ref" in p for p in problems)


def test_a_model_with_a_true_union_has_no_structural_form() -> None:
    class Bad(CamelModel):
        value: int | str

    with pytest.raises(crds.SchemaError, match="a union of 2 types"):
        crds.model_schema(Bad)


@cache
def detected(fixture: str, manufacturer: str) -> tuple[Any, Any]:
    result = api.run_detect(api.make_request(str(host(fixture)), [manufacturer]))
    return result.groups, result.interfaces


def busy_ledger(manufacturer: str, groups: list[Any]) -> Ledger:
    """A ledger holding each mode the node can: an exclusive card, two slices, a share, a partition."""
    ledger = Ledger.of(manufacturer, groups)
    cards = [a for g in groups for a in g.accelerators]
    plain = [a for a in cards if a.status.physical_sliced is None]
    mig = [a for a in cards if a.status.physical_sliced is not None]
    claims = []
    if plain:
        claims.append(Claim("u1", "ns", "ex", "main", Family.EXCLUSIVE, (plain[0].id,)))
    if len(plain) > 1:
        claims.append(Claim("u2", "ns", "sl", "main", Family.SLICED, (plain[1].id,), units=400_000))
        claims.append(Claim("u3", "ns", "sl2", "main", Family.SLICED, (plain[1].id,), units=200_000))
    if len(plain) > 2:
        claims.append(Claim("u4", "ns", "sh", "main", Family.SHARED, (plain[2].id,)))
    if mig:
        profile = mig[0].status.physical_sliced.profiles[0]
        inst = PartitionInstance(accelerator=mig[0].id, profile=profile.name, uuid="MIG-1", start=0, size=1)
        claims.append(
            Claim(
                "u5",
                "ns",
                "pt",
                "main",
                Family.PARTITIONED,
                (mig[0].id,),
                units=100_000,
                partition=inst,
                profile=profile.name,
            )
        )
    for claim in claims:
        ledger.claims[claim.key] = claim
    return ledger


@pytest.mark.parametrize(("fixture", "manufacturer"), NODES, ids=[f"{f}-{m}" for f, m in NODES])
def test_what_serve_writes_validates_and_nothing_is_pruned(fixture: str, manufacturer: str) -> None:
    groups, interfaces = detected(fixture, manufacturer)
    ledger = busy_ledger(manufacturer, groups)
    status = ledger.status(groups)
    node = {"metadata": {"name": "node-a", "labels": {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}}}
    obj = devices_object("node-a", groups, interfaces, status, flavor_labels(groups, node))
    schema = crds.openapi_schema()
    assert validate(schema, obj) == []
    kept, removed = prune(schema, obj)
    assert removed == [] and kept == obj
    if groups:
        written = obj["status"]["groups"][0]["accelerators"]
        assert {a["mode"] for g in obj["status"]["groups"] for a in g["accelerators"]} - {"free"}
        # every accelerator held names its holders, and they are stored unpruned (above)
        assert all(a["holders"] for a in written if a["mode"] != "free")
    if fixture == "mixed-nvidia-mellanox":
        assert obj["spec"]["interfaces"]  # the inventory is written where it was read


def test_validation_refuses_what_the_server_would() -> None:
    groups, interfaces = detected("h100-sxm-8x", "nvidia")
    obj = devices_object("n", groups, interfaces, Ledger.of("nvidia", groups).status(groups), {})
    schema = crds.openapi_schema()
    obj["status"]["groups"][0]["accelerators"][0]["mode"] = "Visibility"
    obj["spec"]["groups"][0]["accelerators"][1]["id"] = obj["spec"]["groups"][0]["accelerators"][0]["id"]
    problems = validate(schema, obj)
    assert any("is not one of" in p for p in problems) and any("Duplicate value" in p for p in problems)
    obj["spec"]["groups"][0]["surprise"] = 1
    assert prune(schema, obj)[1] == [".spec.groups[0].surprise"]


def test_the_node_feature_carries_the_nfd_shape() -> None:
    obj = node_feature_object("node-a", "gpustack-system", {"feature.gpustack.ai/acceleratable": "true"})
    assert obj["apiVersion"] == "nfd.k8s-sigs.io/v1alpha1" and obj["kind"] == "NodeFeature"
    assert obj["metadata"]["name"] == "node-a-gpustack-device-manager"
    assert obj["metadata"]["labels"] == {"nfd.node.kubernetes.io/node-name": "node-a"}
    assert obj["spec"]["labels"] == {"feature.gpustack.ai/acceleratable": "true"}
    assert set(obj["spec"]["features"]) == {"flags", "attributes", "instances"}
