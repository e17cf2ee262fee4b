"""The shape of a preflight row and which rows an accelerator gets (issue 16, "Preflight says what the
spec says").

* Row shape (supplement §2.8, §3.8): an ``ok`` or ``not-declared`` row carries its words in ``detail``
  and no ``reason``; an ``unavailable`` row carries ``reason`` and no ``detail``; the management and
  sliced rows carry the mode the spec's table gives them (``sidecar-visibility`` is ``visibility``,
  partition-backed or not). The model refuses any other row, however it is built -- a copy included.
  The invariants are written here independently of the model's validator.
* Families (supplement §2.7): the two sliced rows for every accelerator declaring logical slicing,
  whatever its manufacturer's tier; the two management rows alone for a partition-backed one; none of
  the four for one declaring neither family.
"""

from __future__ import annotations

from typing import Any

import pytest
from gpustack_operator.ledger.models import (
    Accelerator,
    AcceleratorLogicalSliced,
    AcceleratorPhysicalSliced,
    AcceleratorPhysicalSlicedProfile,
    AcceleratorStatus,
    DevicesGroup,
)
from gpustack_operator.manufacturers import REGISTRY
from gpustack_operator.preflight import capability
from gpustack_operator.preflight.models import Check, Depth, Report, State
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

FOUR = {"sidecar-visibility", "co-tenancy", "sliced-runtime-loaded", "sliced-quota-in-force"}
SLICED_ROWS = {"sliced-runtime-loaded", "sliced-quota-in-force"}


def shape_problem(row: dict[str, Any]) -> str | None:
    """The spec's row shape, written out again for the test (never the product's own check)."""
    state, detail, reason = row.get("state"), row.get("detail"), row.get("reason")
    words = detail if state in ("ok", "not-declared") else reason
    other = reason if state in ("ok", "not-declared") else detail
    if not isinstance(words, str) or not words.strip():
        return f"a {state} row without its words"
    if other is not None:
        return f"a {state} row carrying the other field too"
    capability_name, mode = row.get("capability"), row.get("mode")
    if capability_name == "sidecar-visibility" and mode != "visibility":
        return "sidecar-visibility answers for the visibility mode"
    if capability_name in SLICED_ROWS and mode != "sliced":
        return "the sliced rows answer for the sliced mode"
    if capability_name == "co-tenancy" and mode not in ("sliced", "partitioned"):
        return "co-tenancy answers for a sliced or a partitioned accelerator"
    return None


def row(**fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"accelerator": "GPU-0", "capability": "co-tenancy", "mode": "sliced", "state": "ok"}
    base.update(fields)
    return base


@pytest.mark.parametrize(
    "fields",
    [
        {"state": "ok"},  # no detail
        {"state": "ok", "detail": "  "},
        {"state": "ok", "detail": "fine", "reason": "but why"},
        {"state": "ok", "reason": "words in the wrong field"},
        {"state": "unavailable", "detail": "words in the wrong field"},
        {"state": "unavailable"},
        {"state": "unavailable", "reason": "broken", "detail": "and fine"},
        {"state": "not-declared"},
        {"state": "not-declared", "detail": "none", "reason": "none"},
        {"capability": "sidecar-visibility", "mode": "partitioned", "detail": "declared"},
        {"capability": "sidecar-visibility", "mode": "sliced", "detail": "simulated"},
        {"capability": "sliced-runtime-loaded", "mode": "exclusive", "detail": "simulated"},
        {"capability": "co-tenancy", "mode": "visibility", "detail": "simulated"},
    ],
)
def test_a_row_of_the_wrong_shape_cannot_be_built(fields: dict[str, Any]) -> None:
    wrong = row(**fields)
    assert shape_problem(wrong) is not None  # the case is wrong by the test's own reading
    with pytest.raises(ValidationError):
        Check.model_validate(wrong)


@pytest.mark.parametrize(
    "fields",
    [
        {"detail": "two slices on one accelerator"},
        {"state": "unavailable", "reason": "a slice saw the whole card"},
        {"capability": "mig-partitioning", "mode": "partitioned", "state": "not-declared", "detail": "MIG is off"},
        {"capability": "sidecar-visibility", "mode": "visibility", "depth": "declared", "detail": "partition-backed"},
        {"capability": "co-tenancy", "mode": "partitioned", "depth": "declared", "detail": "partition-backed"},
        {"capability": "stale-container-sweep", "mode": "unnamed", "state": "unavailable", "reason": "sweep failed"},
    ],
)
def test_a_row_of_the_right_shape_round_trips(fields: dict[str, Any]) -> None:
    right = row(**fields)
    assert shape_problem(right) is None
    built = Check.model_validate(right)
    assert Check.model_validate(built.wire()) == built


def test_a_copy_cannot_make_a_row_wrong() -> None:
    ok = Check(accelerator="GPU-0", capability="co-tenancy", mode="sliced", state=State.OK, detail="fine")
    with pytest.raises(ValidationError):
        ok.model_copy(update={"reason": "an ok row with a reason"})
    with pytest.raises(ValidationError):
        ok.model_copy(update={"state": State.UNAVAILABLE})  # unavailable, and its words still in detail
    fixed = ok.model_copy(update={"state": State.UNAVAILABLE, "detail": None, "reason": "now it is refused"})
    assert fixed.state is State.UNAVAILABLE and fixed.reason == "now it is refused" and fixed.detail is None


def test_a_row_cannot_be_made_wrong_by_assignment() -> None:
    ok = Check(accelerator="GPU-0", capability="co-tenancy", mode="sliced", state=State.OK, detail="fine")
    with pytest.raises(ValidationError):
        ok.reason = "an ok row with a reason"


def test_a_report_document_with_a_wrong_row_is_refused() -> None:
    """The fleet report re-reads documents as this model: a wrong row in one is named, not taken."""
    doc = {
        "accelerators": [
            {
                "manufacturer": "nvidia",
                "timestamp": "t",
                "detection": {"state": "ok", "accelerators": 1},
                "checks": [row(capability="sidecar-visibility", mode="partitioned", reason="ok but reasoned")],
            }
        ]
    }
    with pytest.raises(ValidationError) as info:
        Report.model_validate(doc)
    assert "sidecar-visibility" in str(info.value)


_TEXT = st.one_of(st.none(), st.just(""), st.just("  "), st.text(max_size=20))
_ROWS = st.fixed_dictionaries(
    {
        "accelerator": st.one_of(st.text(max_size=8), st.integers(), st.none()),
        "capability": st.sampled_from([*FOUR, "mig-partitioning", "smlu-mode", "stale-container-sweep", ""]),
        "mode": st.sampled_from(["sliced", "partitioned", "visibility", "exclusive", "unnamed", ""]),
        "state": st.one_of(st.sampled_from(["ok", "unavailable", "not-declared"]), st.text(max_size=12)),
        "depth": st.one_of(st.sampled_from(["declared", "simulated", "measured"]), st.text(max_size=12)),
    },
    optional={"detail": _TEXT, "reason": _TEXT, "command": _TEXT, "evidence": _TEXT, "extra": _TEXT},
)


@pytest.mark.hostile
@given(_ROWS)
def test_any_row_document_is_taken_only_in_the_right_shape(fields: dict[str, Any]) -> None:
    """A row read back from a document (the fleet report's reading): a ValidationError naming the
    problem, or a row of the spec's shape -- never another exception, never a wrong row taken."""
    try:
        built = Check.model_validate(fields)
    except ValidationError:
        return
    assert shape_problem(built.wire()) is None


# -- which rows an accelerator gets ------------------------------------------------------------------

ENV = capability.Env(resolved=None, settings=None, detect=None, host=None, host_problem=None)  # type: ignore[arg-type]


def accelerator(status: AcceleratorStatus) -> tuple[DevicesGroup, Accelerator]:
    acc = Accelerator(id="ACC-0", index=0, physical_indexes=[0], status=status)
    return DevicesGroup(id="g", manufacturer="x", name="X", memory=32768, accelerators=[acc]), acc


SLICEABLE = AcceleratorStatus(logical_sliced=AcceleratorLogicalSliced(count=4))
PARTITIONED = AcceleratorStatus(
    physical_sliced=AcceleratorPhysicalSliced(count=7, profiles=[AcceleratorPhysicalSlicedProfile(name="1g.10gb")])
)
NEITHER = [AcceleratorStatus(), AcceleratorStatus(logical_sliced=AcceleratorLogicalSliced(count=0))]


@pytest.mark.parametrize("manufacturer", sorted(REGISTRY))
def test_every_manufacturer_that_slices_reports_the_two_sliced_rows(manufacturer: str) -> None:
    """§2.7: the two sliced rows are produced for an accelerator declaring logical slicing -- on every
    tier, the injection-only ones included (an absent row reads as "cannot be sliced")."""
    group, acc = accelerator(SLICEABLE)
    rows = capability.accelerator_rows(manufacturer, ENV, None, group, acc)
    assert {r.capability for r in rows} == FOUR
    assert {r.mode for r in rows if r.capability in SLICED_ROWS} == {"sliced"}


@pytest.mark.parametrize("manufacturer", sorted(REGISTRY))
@pytest.mark.parametrize("status", NEITHER, ids=["no-logical-slicing", "zero-slices"])
def test_an_accelerator_declaring_neither_family_reports_none_of_the_four(
    manufacturer: str, status: AcceleratorStatus
) -> None:
    group, acc = accelerator(status)
    assert capability.accelerator_rows(manufacturer, ENV, None, group, acc) == []


@pytest.mark.parametrize("manufacturer", ["nvidia", "thead", "hygon"])
def test_a_partition_backed_accelerator_reports_the_management_rows_in_the_right_shape(manufacturer: str) -> None:
    group, acc = accelerator(PARTITIONED)
    rows = {r.capability: r for r in capability.accelerator_rows(manufacturer, ENV, None, group, acc)}
    assert set(rows) == {"sidecar-visibility", "co-tenancy"}
    assert (rows["sidecar-visibility"].mode, rows["co-tenancy"].mode) == ("visibility", "partitioned")
    for r in rows.values():
        assert (r.state, r.depth) == (State.OK, Depth.DECLARED)
        assert r.detail is not None and "1g.10gb" in r.detail and r.reason is None
