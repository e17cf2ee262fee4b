"""``dm mode --disable`` refuses where the allocator's pod records hold slices (the package's rule,
shared with the driver_mode module); ``--force`` overrides; nothing to turn off is no refusal."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from tests.conftest import copy_host, run_cli

FIXTURE = "usr/local/Ascend/driver/lib64/driver/libdcmi.so.fixture"
PODS = "var/lib/gpustack/operator/pods"


def share(node: Path, card: int) -> str:
    line = next(x for x in (node / FIXTURE).read_text().splitlines() if x.startswith(f"npu card={card} "))
    match = re.search(r" share=(\d)$", line)
    assert match, line
    return match.group(1)


def hold(node: Path, uid: str, record: object) -> None:
    pod = node / PODS / uid
    pod.mkdir(parents=True)
    (pod / "allocation.json").write_text(record if isinstance(record, str) else json.dumps(record))


def mode(node: Path, *args: str) -> tuple[int, dict[str, object], str]:
    proc = run_cli("dm", "mode", "ascend", "container-share", "--host-root", str(node), *args)
    return proc.returncode, (yaml.safe_load(proc.stdout) or {}), proc.stderr


def test_disable_refused_while_held_then_forced(tmp_path: Path) -> None:
    node = copy_host("ascend-910b-8x", tmp_path)
    rc, doc, err = mode(node, "--enable", "--accelerator", "3")
    assert rc == 0, err
    (change,) = doc["changes"]  # type: ignore[misc]
    assert share(node, 3) == "1"
    hold(node, "uid-a", {"pod": "team-a/llm-0", "manufacturer": "ascend", "accelerators": [change["accelerator"]]})
    hold(node, "uid-b", {"pod": "team-b/other", "manufacturer": "nvidia", "accelerators": ["GPU-x"]})

    rc, _, err = mode(node, "--disable", "--accelerator", "3")
    assert rc == 1
    assert "pods hold slices there: team-a/llm-0 (uid uid-a)" in err
    assert "team-b" not in err  # another manufacturer's pod holds nothing here
    assert "--force" in err
    assert share(node, 3) == "1"  # nothing written

    rc, _, err = mode(node, "--disable", "--accelerator", "3", "--dry-run")
    assert rc == 1 and "pods hold slices" in err  # the prediction is the refusal

    rc, doc, err = mode(node, "--disable", "--accelerator", "3", "--force")
    assert rc == 0, err
    assert doc["changes"][0]["changed"] is True  # type: ignore[index]
    assert share(node, 3) == "0"


def test_unreadable_record_counts_as_held_and_nothing_to_turn_off_is_no_refusal(tmp_path: Path) -> None:
    node = copy_host("ascend-910b-8x", tmp_path)
    assert mode(node, "--enable", "--accelerator", "1")[0] == 0
    hold(node, "uid-c", "{not json")
    rc, _, err = mode(node, "--disable", "--accelerator", "1")
    assert rc == 1
    assert "unknown pod (uid uid-c) [unreadable record" in err
    # card 6 is already off: disabling it changes nothing, so no pod can be stranded
    rc, doc, err = mode(node, "--disable", "--accelerator", "6")
    assert rc == 0, err
    assert doc["changes"][0]["changed"] is False  # type: ignore[index]
