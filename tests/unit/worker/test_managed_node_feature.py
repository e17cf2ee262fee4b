"""Controller (a)'s managed mark on the worker's NodeFeature (reference rules §1,
``ConstructNodeCapacityLabels``; supplement §4.2 ``node-management-manual``): the Node's own
``gpustack.ai/managed`` echoed, else ``"true"`` unless ``GPUSTACK_NODE_MANAGEMENT_MANUAL`` is on."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from gpustack_operator.cli import main
from gpustack_operator.settings import SettingsError, node_management_manual, parse_flag
from gpustack_operator.worker.nodekey import GENERAL_PREFIX, managed_mark, node_feature, worker_labels

from tests.unit.worker.standin import WorkerStandIn
from tests.unit.worker.test_worker import AMD_LABELS, NF, NS, Running, options, wait_for

MANAGED = "gpustack.ai/managed"
ENV = "GPUSTACK_NODE_MANAGEMENT_MANUAL"


def _node(labels: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "n", "uid": "u", "labels": labels}, "status": {"capacity": {"cpu": "4"}}}


# -- the labels, pure ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("own", "manual", "published"),
    [
        (None, False, "true"),  # auto-injected
        ("false", False, "false"),  # an existing value is echoed, even one saying "not managed"
        ("true", False, "true"),
        ("", False, ""),  # any value, the empty one too
        (None, True, None),  # manual: no mark of the worker's own
        ("true", True, "true"),  # manual, but the Node carries one: echoed
        ("false", True, "false"),
    ],
)
def test_the_mark_published(own: str | None, manual: bool, published: str | None) -> None:
    labels = {**AMD_LABELS, **({MANAGED: own} if own is not None else {})}
    assert managed_mark(_node(labels), manual=manual) == published
    out = worker_labels(_node(labels), manual=manual)
    assert out.get(MANAGED) == published and (MANAGED in out) == (published is not None)
    # the general node key is published the same either way
    assert {k: v for k, v in out.items() if k != MANAGED} == {
        f"{GENERAL_PREFIX}amd": "true",
        f"{GENERAL_PREFIX}amd-25-1": "true",
        f"{GENERAL_PREFIX}amd-25-1.count": "4",
    }
    assert node_feature(_node(labels), NS, manual=manual)["spec"]["labels"] == out


def test_a_node_without_labels_is_still_marked() -> None:
    assert worker_labels({"metadata": {"name": "bare"}})[MANAGED] == "true"
    assert MANAGED not in worker_labels({"metadata": {"name": "bare"}}, manual=True)


# -- the setting --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("env", "manual"),
    [
        ({}, False),
        ({ENV: ""}, False),
        ({ENV: "  "}, False),
        ({ENV: "false"}, False),
        ({ENV: "False"}, False),
        ({ENV: "0"}, False),
        ({ENV: "true"}, True),
        ({ENV: " TRUE\n"}, True),
        ({ENV: "1"}, True),
        ({ENV: "t"}, True),
        ({"gpustack_node_management_manual": "true"}, False),  # exact upper-case names only
    ],
)
def test_the_setting_parses(env: dict[str, str], manual: bool) -> None:
    assert node_management_manual(env) is manual


@pytest.mark.parametrize("raw", ["yes", "on", "manual", "2", "truee"])
def test_a_value_that_is_not_a_boolean_is_refused_naming_the_variable(raw: str) -> None:
    with pytest.raises(SettingsError) as exc:
        node_management_manual({ENV: raw})
    message = str(exc.value)
    assert message.startswith(f"{ENV}: {raw!r} is not a boolean") and "use true or false" in message


def test_parse_flag_defaults() -> None:
    assert parse_flag(None, "X", default=True) is True
    assert parse_flag("", "X", default=False) is False
    assert parse_flag("f", "X", default=True) is False


def test_the_worker_refuses_a_bad_setting_in_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(ENV, "yes")
    assert main(["worker", "--kube-api-server", "http://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {ENV}: 'yes' is not a boolean" in err and "Traceback" not in err


# -- the controller against the stand-in ---------------------------------------------------------------


@pytest.fixture
def api() -> Iterator[WorkerStandIn]:
    with WorkerStandIn() as server:
        yield server


@pytest.fixture
def run(api: WorkerStandIn) -> Iterator[Callable[..., Running]]:
    started: list[Running] = []

    def go(**kw: Any) -> Running:
        r = Running(api, options(**kw)).start()
        started.append(r)
        return r

    yield go
    for r in started:
        if r.thread.is_alive():
            r.stop()


def published(api: WorkerStandIn, node: str) -> dict[str, str] | None:
    nf = api.obj("nodefeatures", f"{node}-gpustack-worker", NS)
    return None if nf is None else dict(nf["spec"]["labels"])


def devices_mark(api: WorkerStandIn, name: str) -> str | None:
    return ((api.obj("devices", name) or {"metadata": {}})["metadata"].get("labels") or {}).get(MANAGED)


def settle(api: WorkerStandIn, r: Running, change: Callable[[], object]) -> tuple[int, int]:
    """Make ``change``, wait until the worker reconciled it: the NodeFeature requests it caused
    (any method) and how many of them were writes (PUT)."""
    calls, puts, seen = api.count(path=NF), api.count("PUT", NF), r.worker.reconciled
    change()
    wait_for(lambda: r.worker.reconciled > seen)
    time.sleep(0.2)
    return api.count(path=NF) - calls, api.count("PUT", NF) - puts


NONE = (0, 0)  # no API call at all
ONE_WRITE = (2, 1)  # apply: the GET, then the PUT


def test_auto_mark_then_nfds_echo_writes_nothing(api: WorkerStandIn, run: Callable[..., Running]) -> None:
    """Manual off: "true" published; NFD then puts it on the Node, and that Node event is no write.
    Controller (b) copies only the Node's own mark: the Devices gets it once the Node carries it."""
    api.add_node("n1", capacity={"cpu": "8"}, labels=AMD_LABELS)
    api.add_devices("n1")
    r = run()
    wait_for(lambda: (published(api, "n1") or {}).get(MANAGED) == "true")
    time.sleep(0.2)
    assert devices_mark(api, "n1") is None  # not on the Node yet: (b) has nothing to copy
    nfd_echo = settle(
        api, r, lambda: api.update_node("n1", lambda n: n["metadata"]["labels"].update({MANAGED: "true"}))
    )
    assert nfd_echo == NONE
    wait_for(lambda: devices_mark(api, "n1") == "true")
    assert settle(api, r, lambda: api.update_node("n1", lambda n: n["metadata"]["labels"].update({"x": "1"}))) == NONE
    assert published(api, "n1") == {
        MANAGED: "true",
        f"{GENERAL_PREFIX}amd": "true",
        f"{GENERAL_PREFIX}amd-25-1": "true",
        f"{GENERAL_PREFIX}amd-25-1.count": "8",
    }


def test_a_node_value_is_echoed_and_followed(api: WorkerStandIn, run: Callable[..., Running]) -> None:
    api.add_node("n1", labels={**AMD_LABELS, MANAGED: "false"})
    r = run()
    wait_for(lambda: (published(api, "n1") or {}).get(MANAGED) == "false")
    # an administrator marks the Node managed: one write, the new value
    writes = settle(api, r, lambda: api.update_node("n1", lambda n: n["metadata"]["labels"].update({MANAGED: "true"})))
    assert writes == ONE_WRITE and published(api, "n1")[MANAGED] == "true"  # type: ignore[index]
    # the label removed, manual off: the worker's own "true" -- the same labels, so no API call
    assert settle(api, r, lambda: api.update_node("n1", lambda n: n["metadata"]["labels"].pop(MANAGED))) == NONE
    assert published(api, "n1")[MANAGED] == "true"  # type: ignore[index]


def test_manual_on_publishes_no_mark_but_echoes_the_nodes(api: WorkerStandIn, run: Callable[..., Running]) -> None:
    api.add_node("n1", capacity={"cpu": "8"}, labels=AMD_LABELS)
    api.add_node("n2", labels={**AMD_LABELS, MANAGED: "true"})
    r = run(node_management_manual=True)
    n1 = wait_for(lambda: published(api, "n1"))
    assert MANAGED not in n1 and n1[f"{GENERAL_PREFIX}amd-25-1"] == "true"
    assert wait_for(lambda: published(api, "n2"))[MANAGED] == "true"
    assert settle(api, r, lambda: api.update_node("n1", lambda n: n["metadata"]["labels"].update({"x": "1"}))) == NONE
    assert MANAGED not in published(api, "n1")  # type: ignore[operator]
    writes = settle(api, r, lambda: api.update_node("n1", lambda n: n["metadata"]["labels"].update({MANAGED: "no"})))
    assert writes == ONE_WRITE and published(api, "n1")[MANAGED] == "no"  # type: ignore[index]
    writes = settle(api, r, lambda: api.update_node("n1", lambda n: n["metadata"]["labels"].pop(MANAGED)))
    assert writes == ONE_WRITE and MANAGED not in published(api, "n1")  # type: ignore[operator]


ENTRY = "import sys; from gpustack_operator.entry import main; sys.exit(main())"


def test_the_worker_process_reads_the_setting_from_its_environment(api: WorkerStandIn) -> None:
    api.add_node("n1", labels=AMD_LABELS)
    env = {k: v for k, v in os.environ.items() if k not in ("KUBERNETES_SERVICE_HOST", "KUBECONFIG")}
    env.update({"KUBERNETES_POD_NAMESPACE": NS, "KUBERNETES_POD_NAME": "worker-0", ENV: "true"})
    proc = subprocess.Popen(
        [sys.executable, "-c", ENTRY, "worker", "--kube-api-server", api.url, "--secure-port=0", "-v=2"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 20
        while (labels := published(api, "n1")) is None:
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no NodeFeature within 20s"
            time.sleep(0.05)
        proc.terminate()
        _, err = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert MANAGED not in labels and labels[f"{GENERAL_PREFIX}amd-25-1"] == "true"
