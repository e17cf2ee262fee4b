"""The Device Manager's detection loop (deviceplugin/manager.py) over scripted passes: fixture nodes
detected through ``api.run_detect`` exactly as serve detects, then edited into the passes a real node
produces (an accelerator gone, a clean empty pass, an unmeasured one). The sinks (the Node's capacity
keys, the NodeFeature / Devices publisher) and serve's allocators are recorded in memory; one test runs a
real :class:`~gpustack_operator.allocator.core.Allocator` to show the tokens' health follow the passes."""

from __future__ import annotations

import argparse
import dataclasses
import logging
from collections.abc import Iterable, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from gpustack_operator import api
from gpustack_operator.allocator.capacity import names_of
from gpustack_operator.allocator.core import Pool
from gpustack_operator.allocator.ledger import AcceleratorAllocation, DevicesAllocationGroup
from gpustack_operator.allocator.resources import ResourceNames, token_id
from gpustack_operator.cli import build_parser, manager_options
from gpustack_operator.deviceplugin.manager import (
    DeviceManager,
    ManagerOptions,
    ManagerUsageError,
    merge_known,
    parse_duration,
)
from gpustack_operator.discovery.detect import NodeDetection
from gpustack_operator.discovery.network import InventoryFailed, InventoryOk
from gpustack_operator.ledger.models import DevicesGroup
from gpustack_operator.manufacturers.base import Detected, Unmeasured
from gpustack_operator.manufacturers.respond import Family
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import host
from tests.unit.allocator.fakes import make_allocator

NVIDIA_BASE = "nvidia.com/gpu"


@cache
def _detected(fixture: str, manufacturers: tuple[str, ...]) -> NodeDetection:
    result = api.run_detect(api.make_request(str(host(fixture)), list(manufacturers)), interfaces=False)
    assert not result.unmeasured, result.unmeasured
    return result


def h100() -> NodeDetection:
    """The 8x H100 node, nvidia alone (a fresh copy each call: the loop must not share its groups)."""
    result = _detected("h100-sxm-8x", ("nvidia",))
    return dataclasses.replace(result, outcomes={"nvidia": _copy(result.outcomes["nvidia"])})


def _copy(outcome: Any) -> Any:
    assert isinstance(outcome, Detected)
    return Detected([g.model_copy(deep=True) for g in outcome.groups])


def with_outcomes(result: NodeDetection, **outcomes: Detected | Unmeasured) -> NodeDetection:
    return dataclasses.replace(result, outcomes={**result.outcomes, **outcomes})


def without(result: NodeDetection, name: str, accelerator_id: str) -> NodeDetection:
    """``result`` with one accelerator pulled from ``name``'s groups."""
    outcome = result.outcomes[name]
    assert isinstance(outcome, Detected)
    groups = [
        g.model_copy(update={"accelerators": [a for a in g.accelerators if a.id != accelerator_id]}, deep=True)
        for g in outcome.groups
    ]
    return with_outcomes(result, **{name: Detected([g for g in groups if g.accelerators])})


def ids(groups: Iterable[DevicesGroup]) -> list[str]:
    return [a.id for g in groups for a in g.accelerators]


def unhealthy(groups: Iterable[DevicesGroup]) -> set[str]:
    return {a.id for g in groups for a in g.accelerators if a.status.unhealthy}


class Script:
    """The detect callable: returns the scripted results in order (an exception is raised)."""

    def __init__(self, *results: NodeDetection | Exception) -> None:
        self.results = list(results)
        self.calls = 0

    def push(self, *results: NodeDetection | Exception) -> None:
        self.results.extend(results)

    def __call__(self, req: api.Request) -> NodeDetection:
        self.calls += 1
        item = self.results.pop(0)
        if isinstance(item, Exception):
            raise item
        return item


class FakeAllocator:
    """What the loop reads of an allocator: names, pools, status (one entry per accelerator), version."""

    def __init__(self, names: ResourceNames, groups: Sequence[DevicesGroup]) -> None:
        self.names = names
        self.groups = list(groups)
        self.updates: list[list[DevicesGroup]] = []
        self.allocated: dict[str, int] = {}
        self._version = 1

    def pools(self) -> list[Pool]:
        return [Pool(self.names.resource(f), f, False) for f in (Family.EXCLUSIVE, Family.SLICED)]

    def status(self) -> list[DevicesAllocationGroup]:
        return [
            DevicesAllocationGroup(
                id=g.id,
                manufacturer=g.manufacturer,
                accelerators=[
                    AcceleratorAllocation(id=a.id, index=a.index, allocated=self.allocated.get(a.id, 0))
                    for a in g.accelerators
                ],
            )
            for g in self.groups
        ]

    def update(self, groups: list[DevicesGroup]) -> None:
        self.updates.append(groups)
        self.groups = groups
        self._version += 1

    @property
    def version(self) -> int:
        return self._version

    def ledger_changed(self, allocated: dict[str, int] | None = None) -> None:
        self.allocated.update(allocated or {})
        self._version += 1


class Capacity:
    def __init__(self) -> None:
        self.calls: list[dict[str, str]] = []
        self.fail: str | None = None

    def sync(self, desired: Mapping[str, str]) -> bool:
        self.calls.append(dict(desired))
        if self.fail:
            raise RuntimeError(self.fail)
        return True


class Publisher:
    def __init__(self) -> None:
        self.calls: list[tuple[list[DevicesGroup], Any, list[DevicesAllocationGroup], bool]] = []
        self.answer: tuple[str, str] = ("wrote", "wrote")
        self.errors: dict[str, str] = {}

    def publish(
        self,
        groups: Sequence[DevicesGroup],
        interfaces: Any,
        status: Iterable[DevicesAllocationGroup],
        *,
        force: bool = False,
    ) -> tuple[str, str]:
        self.calls.append((list(groups), interfaces, list(status), force))
        return self.answer


@dataclasses.dataclass
class Rig:
    manager: DeviceManager
    script: Script
    allocators: dict[str, Any]
    built: list[list[str]]
    capacity: Capacity
    publisher: Publisher


def rig(*results: NodeDetection | Exception, manufacturers: Sequence[str] = ("nvidia",), **opts: Any) -> Rig:
    req = api.make_request(str(host("h100-sxm-8x")), list(manufacturers))
    allocators: dict[str, Any] = {}
    built: list[list[str]] = []

    def on_detected(names: list[str], result: NodeDetection) -> None:
        built.append(names)
        for name in names:
            outcome = result.outcomes[name]
            assert isinstance(outcome, Detected)
            allocators[name] = FakeAllocator(names_of(req.resolved[name]), outcome.groups)

    script, capacity, publisher = Script(*results), Capacity(), Publisher()
    manager = DeviceManager(
        req,
        ManagerOptions(**opts),
        allocators=allocators,
        on_detected=on_detected,
        capacity=capacity,
        publisher=publisher,
        detect=script,
    )
    manager.set_registered_check(lambda: True)
    return Rig(manager, script, allocators, built, capacity, publisher)


# -- carry forward, undetect, never detected -------------------------------------------------------------


def test_a_failed_pass_is_carried_forward_as_last_detected() -> None:
    first = h100()
    r = rig(first, with_outcomes(first, nvidia=Unmeasured("libnvidia-ml.so.1 killed the child (SIGSEGV)")))
    assert r.manager.run_pass()
    assert r.built == [["nvidia"]]
    published = r.publisher.calls[-1][0]
    assert len(ids(published)) == 8
    keys = r.capacity.calls[-1]
    assert keys[f"{NVIDIA_BASE}.sliced.memory-percentage"] == "800"

    assert r.manager.run_pass()
    assert ids(r.manager.current["nvidia"]) == ids(published)  # carried forward, untouched
    assert r.allocators["nvidia"].updates == []  # the allocator keeps serving as it was
    assert len(r.publisher.calls) == 1 and len(r.capacity.calls) == 1  # nothing changed, nothing written
    assert r.manager.ready() == (True, "ok")


def test_a_clean_empty_pass_undetects_and_a_later_failure_does_not_resurrect() -> None:
    first = h100()
    r = rig(first, with_outcomes(first, nvidia=Detected([])), with_outcomes(first, nvidia=Unmeasured("timeout")))
    r.manager.run_pass()
    all_ids = set(ids(r.manager.current["nvidia"]))
    r.manager.run_pass()
    assert "nvidia" not in r.manager.current
    (given,) = r.allocators["nvidia"].updates
    assert unhealthy(given) == all_ids  # every token Unhealthy, ids kept
    assert r.capacity.calls[-1] == {}  # the budget went with them
    assert r.publisher.calls[-1][0] == [] and r.publisher.calls[-1][2] == []

    r.manager.run_pass()  # unmeasured: nothing was held, nothing comes back
    assert "nvidia" not in r.manager.current
    assert len(r.allocators["nvidia"].updates) == 1
    assert len(r.publisher.calls) == 2


def test_a_manufacturer_never_detected_stays_absent_when_unmeasured() -> None:
    both = _detected("mixed-cambricon-metax", ("cambricon", "metax"))
    first = with_outcomes(both, metax=Unmeasured("libmxsml.so would not load"))
    r = rig(first, manufacturers=("cambricon", "metax"))
    r.manager.run_pass()
    assert set(r.manager.current) == {"cambricon"}
    assert r.built == [["cambricon"]]
    assert {g.manufacturer for g in r.publisher.calls[-1][0]} == {"cambricon"}


def test_detection_that_raises_is_an_unmeasured_pass() -> None:
    first = h100()
    r = rig(first, OSError("the node view /host could not be read"))
    r.manager.run_pass()
    r.manager.run_pass()
    assert len(ids(r.manager.current["nvidia"])) == 8
    assert r.manager.passes == 2


# -- fast-failed ----------------------------------------------------------------------------------------


def test_fast_failed_holds_back_an_empty_first_pass_and_repeats_it_loudly(caplog: pytest.LogCaptureFixture) -> None:
    first = h100()
    empty = with_outcomes(first, nvidia=Detected([]))
    r = rig(empty, with_outcomes(first, nvidia=Unmeasured("no driver")), first)
    with caplog.at_level(logging.WARNING, logger="gpustack_operator.deviceplugin.manager"):
        assert not r.manager.run_pass()
        assert not r.manager.run_pass()
    held = [rec for rec in caplog.records if "held back" in rec.getMessage()]
    assert len(held) == 2  # every period
    assert r.built == [] and r.capacity.calls == [] and r.publisher.calls == []  # nothing published
    ready, why = r.manager.ready()
    assert not ready and "held back" in why and "--no-fast-failed" in why

    assert r.manager.run_pass()  # the driver answered
    assert r.built == [["nvidia"]]
    assert len(r.publisher.calls) == 1
    assert r.manager.ready() == (True, "ok")


def test_no_fast_failed_publishes_the_empty_first_pass() -> None:
    empty = with_outcomes(h100(), nvidia=Detected([]))
    r = rig(empty, no_fast_failed=True)
    assert r.manager.run_pass()
    assert r.publisher.calls[0][0] == [] and r.capacity.calls == [{}]
    assert r.built == []
    assert r.manager.ready() == (True, "ok")


def test_fast_failed_applies_only_to_a_single_manufacturer() -> None:
    both = _detected("mixed-cambricon-metax", ("cambricon", "metax"))
    empty = with_outcomes(both, cambricon=Detected([]), metax=Detected([]))
    r = rig(empty, manufacturers=("cambricon", "metax"))
    assert r.manager.run_pass()
    assert r.publisher.calls[0][0] == []


def test_after_the_first_pass_an_empty_pass_is_not_held_back() -> None:
    first = h100()
    r = rig(first, with_outcomes(first, nvidia=Detected([])))
    r.manager.run_pass()
    assert r.manager.run_pass()
    assert r.manager.held_back is None and "nvidia" not in r.manager.current


# -- the allocators follow the passes --------------------------------------------------------------------


def test_update_gets_the_gone_accelerator_unhealthy_and_then_healthy_again() -> None:
    first = h100()
    gone_id = ids(first.groups)[3]
    r = rig(first, without(first, "nvidia", gone_id), h100(), h100())
    r.manager.run_pass()
    r.manager.run_pass()
    (given,) = r.allocators["nvidia"].updates
    assert ids(given) == ids(first.groups)[:3] + ids(first.groups)[4:] + [gone_id]  # same tokens, gone one last
    assert unhealthy(given) == {gone_id}
    published = r.publisher.calls[-1]
    assert gone_id not in ids(published[0])  # the Devices spec is the detection
    assert gone_id not in {a.id for g in published[2] for a in g.accelerators}  # and its status follows it
    assert r.capacity.calls[-1][f"{NVIDIA_BASE}.sliced.memory-percentage"] == "700"

    r.manager.run_pass()  # back
    back = r.allocators["nvidia"].updates[-1]
    assert unhealthy(back) == set() and sorted(ids(back)) == sorted(ids(first.groups))
    assert r.capacity.calls[-1][f"{NVIDIA_BASE}.sliced.memory-percentage"] == "800"
    r.manager.run_pass()  # the same again: no update
    assert len(r.allocators["nvidia"].updates) == 2


def test_a_real_allocator_turns_the_gone_cards_tokens_unhealthy_and_back(tmp_path: Path) -> None:
    first = h100()
    gone_id = ids(first.groups)[5]
    group_id = first.groups[0].id
    allocator, _pods, _responder = make_allocator(tmp_path, first.groups)
    req = api.make_request(str(host("h100-sxm-8x")), ["nvidia"])
    script = Script(first, without(first, "nvidia", gone_id), h100())
    manager = DeviceManager(req, ManagerOptions(), allocators={"nvidia": allocator}, detect=script)

    def health(token: str) -> bool:
        (state,) = [d for d in allocator.devices(NVIDIA_BASE) if d.id == token]
        return state.healthy

    token = token_id(group_id, gone_id, 0)
    manager.run_pass()
    assert health(token)
    manager.run_pass()
    assert not health(token)  # gone: the same token id, Unhealthy
    assert all(d.healthy for d in allocator.devices(NVIDIA_BASE) if d.id != token)
    manager.run_pass()
    assert health(token)  # back, without restarting anything


def test_merge_known_keeps_a_gone_group_whole_and_unhealthy() -> None:
    groups = h100().groups
    merged = merge_known(groups, [])
    assert ids(merged) == ids(groups) and unhealthy(merged) == set(ids(groups))
    assert not any(a.status.unhealthy for g in groups for a in g.accelerators)  # the input is not touched


def test_newly_detected_manufacturers_are_reported_once() -> None:
    first = h100()
    r = rig(with_outcomes(first, nvidia=Detected([])), first, first, no_fast_failed=True)
    r.manager.run_pass()
    assert r.built == []
    r.manager.run_pass()
    r.manager.run_pass()
    assert r.built == [["nvidia"]]


def test_a_failed_build_is_reported_again_next_pass() -> None:
    first = h100()
    req = api.make_request(str(host("h100-sxm-8x")), ["nvidia"])
    calls: list[list[str]] = []

    def on_detected(names: list[str], result: NodeDetection) -> None:
        calls.append(names)
        if len(calls) == 1:
            raise RuntimeError("the plugin socket directory is gone")

    manager = DeviceManager(req, ManagerOptions(), on_detected=on_detected, detect=Script(first, first))
    manager.run_pass()
    manager.run_pass()
    assert calls == [["nvidia"], ["nvidia"]]


# -- the sinks: only on change, failures retried -----------------------------------------------------------


def test_a_ledger_change_republishes_between_periods() -> None:
    r = rig(h100())
    r.manager.run_pass()
    assert not r.manager.refresh()  # nothing changed
    r.allocators["nvidia"].ledger_changed()  # a version bump whose status is the same
    assert r.manager.refresh()
    assert len(r.publisher.calls) == 1 and len(r.capacity.calls) == 1  # same status, same keys: no call
    first_id = ids(r.manager.current["nvidia"])[0]
    r.allocators["nvidia"].ledger_changed({first_id: 800000})
    assert r.manager.refresh()
    assert len(r.publisher.calls) == 2
    (status,) = [a for g in r.publisher.calls[-1][2] for a in g.accelerators if a.id == first_id]
    assert status.allocated == 800000
    assert len(r.capacity.calls) == 1  # the keys did not change


def test_a_failed_capacity_sync_is_retried_next_period_and_blocks_readiness() -> None:
    first = h100()
    r = rig(first, first)
    r.capacity.fail = "PATCH /api/v1/nodes/h100/status: 503"
    r.manager.run_pass()
    ready, why = r.manager.ready()
    assert not ready and "503" in why
    r.capacity.fail = None
    r.manager.run_pass()
    assert len(r.capacity.calls) == 2 and r.capacity.calls[0] == r.capacity.calls[1]
    assert r.manager.ready() == (True, "ok")


def test_a_failed_publish_is_retried_next_period() -> None:
    first = h100()
    r = rig(first, first, first)
    r.publisher.answer = ("wrote", "failed")
    r.publisher.errors = {"devices": "PUT devices/h100: 500"}
    r.manager.run_pass()
    assert not r.manager.ready()[0] and "500" in r.manager.ready()[1]
    r.publisher.answer = ("unchanged", "wrote")
    r.manager.run_pass()
    r.manager.run_pass()
    assert len(r.publisher.calls) == 2  # retried once, then unchanged
    assert r.manager.ready() == (True, "ok")


def test_a_publisher_that_raises_is_logged_not_fatal() -> None:
    class Broken(Publisher):
        def publish(self, *args: Any, **kwargs: Any) -> tuple[str, str]:
            raise ConnectionError("the API server is gone")

    first = h100()
    r = rig(first)
    r.manager.publisher = Broken()
    assert r.manager.run_pass()
    assert not r.manager.ready()[0]


def test_a_failed_inventory_keeps_the_last_interfaces() -> None:
    first = dataclasses.replace(h100(), interfaces=InventoryOk([]))
    r = rig(first, dataclasses.replace(h100(), interfaces=InventoryFailed("sysfs unreadable")))
    r.manager.run_pass()
    r.manager.run_pass()
    assert isinstance(r.manager.interfaces, InventoryOk)
    assert len(r.publisher.calls) == 1


def test_readiness_waits_for_the_plugins() -> None:
    r = rig(h100())
    registered = False
    r.manager.set_registered_check(lambda: registered)
    assert r.manager.ready() == (False, "no detection pass has completed yet")
    r.manager.run_pass()
    assert r.manager.ready() == (False, "the device plugins are not registered with the kubelet yet")
    registered = True
    assert r.manager.ready() == (True, "ok")


# -- the thread, liveness -------------------------------------------------------------------------------


def test_the_thread_detects_again_when_poked_and_stops() -> None:
    first = h100()
    r = rig(first, first, first, monitor_period=3600.0)
    r.manager.start()
    try:
        assert r.manager.wait_passes(1, 30)
        assert r.manager.live() == (True, "ok")
        r.manager.poke()
        assert r.manager.wait_passes(2, 30)
    finally:
        r.manager.stop()
    assert r.manager.live() == (False, "the detection loop is not running")


def test_liveness_fails_when_no_pass_completed_within_three_periods() -> None:
    now = [1000.0]
    first = h100()
    req = api.make_request(str(host("h100-sxm-8x")), ["nvidia"])
    manager = DeviceManager(req, ManagerOptions(monitor_period=3600.0), detect=Script(first), clock=lambda: now[0])
    manager.start()
    try:
        assert manager.wait_passes(1, 30)
        now[0] += 3 * 3600.0
        assert manager.live() == (True, "ok")
        now[0] += 1.0
        ok, why = manager.live()
        assert not ok and "3 periods" in why
    finally:
        manager.stop()


# -- options and flags -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15s", 15.0), ("1m30s", 90.0), ("500ms", 0.5), ("5m", 300.0), ("1h", 3600.0), ("2.5", 2.5), ("1.5s", 1.5)],
)
def test_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, "--monitor-period") == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "0s", "-5s", "15x", "s", "1m30", "nan", "inf", "9999h", "1e3s", "15 s"])
def test_bad_durations_name_the_flag(text: str) -> None:
    with pytest.raises(ManagerUsageError, match="--monitor-period"):
        parse_duration(text, "--monitor-period")


@given(st.text(max_size=30))
def test_any_duration_text_is_a_positive_bounded_number_or_a_usage_error(text: str) -> None:
    try:
        seconds = parse_duration(text, "--monitor-period")
    except ManagerUsageError as exc:
        assert "--monitor-period" in str(exc)
    else:
        assert 0 < seconds <= 7 * 24 * 3600


@given(st.lists(st.tuples(st.integers(0, 500), st.sampled_from(["ms", "s", "m", "h"])), min_size=1, max_size=4))
def test_composed_durations_sum_their_parts(parts: list[tuple[int, str]]) -> None:
    unit = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
    total = sum(n * unit[u] for n, u in parts)
    text = "".join(f"{n}{u}" for n, u in parts)
    if 0 < total <= 7 * 24 * 3600:
        assert parse_duration(text, "--x") == pytest.approx(total)
    else:
        with pytest.raises(ManagerUsageError):
            parse_duration(text, "--x")


@pytest.mark.parametrize(
    ("kwargs", "flag"),
    [
        ({"monitor_period": 0}, "--monitor-period"),
        ({"monitor_period": float("nan")}, "--monitor-period"),
        ({"secure_port": 70000}, "--secure-port"),
        ({"secure_port": -1}, "--secure-port"),
        ({"bind_address": "localhost"}, "--bind-address"),
        ({"kube_conn_qps": 0}, "--kube-conn-qps"),
        ({"kube_conn_burst": 0}, "--kube-conn-burst"),
        ({"kube_conn_timeout": -1}, "--kube-conn-timeout"),
        ({"cert_dir": ""}, "--cert-dir"),
    ],
)
def test_options_refuse_bad_values_naming_the_flag(kwargs: dict[str, Any], flag: str) -> None:
    with pytest.raises(ManagerUsageError, match=flag):
        ManagerOptions(**kwargs)


def serve_args(*more: str) -> argparse.Namespace:
    return build_parser().parse_args(["dm", "serve", *more])


def test_serve_flags_default_to_the_spec() -> None:
    opts = manager_options(serve_args())
    assert opts == ManagerOptions(
        monitor_period=15.0,
        no_fast_failed=False,
        secure_port=32443,
        bind_address="0.0.0.0",
        cert_dir=None,
        kube_conn_qps=200.0,
        kube_conn_burst=400,
        kube_conn_timeout=300.0,
    )


def test_serve_flags_are_carried() -> None:
    opts = manager_options(
        serve_args(
            "--no-fast-failed",
            "--monitor-period=1m",
            "--secure-port=9443",
            "--bind-address=127.0.0.1",
            "--cert-dir=/etc/dm-certs",
            "--kube-conn-qps=5",
            "--kube-conn-burst=10",
            "--kube-conn-timeout=30s",
        )
    )
    assert (opts.no_fast_failed, opts.monitor_period, opts.secure_port, opts.bind_address) == (
        True,
        60.0,
        9443,
        "127.0.0.1",
    )
    assert (opts.cert_dir, opts.kube_conn_qps, opts.kube_conn_burst, opts.kube_conn_timeout) == (
        "/etc/dm-certs",
        5.0,
        10,
        30.0,
    )
    assert opts.request_timeout == 10.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--monitor-period=0s"], "argument --monitor-period: '0s' must be longer than 0"),
        (["--monitor-period=soon"], "argument --monitor-period: 'soon' is not a duration"),
        (["--secure-port=65536"], "argument --secure-port: 65536 is not a TCP port"),
        (["--secure-port=https"], "argument --secure-port: 'https' is not a port number"),
        (["--bind-address=my-node"], "argument --bind-address: 'my-node' is not an IP address"),
        (["--kube-conn-qps=0"], "argument --kube-conn-qps: '0' must be greater than 0"),
        (["--kube-conn-burst=1.5"], "argument --kube-conn-burst: '1.5' is not a whole number"),
        (["--kube-conn-timeout=-1s"], "argument --kube-conn-timeout: '-1s' is not a duration"),
    ],
)
def test_serve_flag_usage_errors_exit_2_naming_the_flag(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        serve_args(*args)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_failed_sync_is_not_taken_for_the_keys_written_before_it() -> None:
    first = h100()
    r = rig(first, without(first, "nvidia", ids(first.groups)[0]), h100())
    r.manager.run_pass()
    r.capacity.fail = "timeout"
    r.manager.run_pass()  # the smaller budget is not written
    r.capacity.fail = None
    r.manager.run_pass()  # the first budget again: the Node may hold either, so it is synced
    assert len(r.capacity.calls) == 3 and r.capacity.calls[2] == r.capacity.calls[0]


def test_make_sinks_owns_every_asked_manufacturers_keys_and_bounds_requests() -> None:
    import kubernetes.client
    from gpustack_operator.deviceplugin.manager import make_sinks
    from gpustack_operator.kube.nodestatus import NodeCapacityWriter
    from gpustack_operator.kube.publish import Publisher as RealPublisher

    req = api.make_request(str(host("h100-sxm-8x")), ["nvidia", "amd"])
    capacity, publisher = make_sinks(kubernetes.client.ApiClient(), "h100", req, ManagerOptions(kube_conn_timeout=3.0))
    assert isinstance(capacity, NodeCapacityWriter) and isinstance(publisher, RealPublisher)
    assert capacity.bases == ["amd.com/gpu", "nvidia.com/gpu"]
    assert capacity.timeout == 3.0 and publisher.timeout == 3.0


def test_readiness_does_not_wait_for_a_pass_in_progress() -> None:
    import threading

    first = h100()
    entered, release = threading.Event(), threading.Event()
    r = rig(first)

    def slow_build(names: list[str], result: NodeDetection) -> None:
        entered.set()
        release.wait(30)  # serve recovering from a slow API server

    r.manager.on_detected = slow_build
    worker = threading.Thread(target=r.manager.run_pass)
    worker.start()
    try:
        assert entered.wait(30)
        ready, why = r.manager.ready()  # answered while the pass holds the loop's lock
        assert (ready, why) == (False, "the first pass is not published yet (in progress)")
    finally:
        release.set()
        worker.join(30)
