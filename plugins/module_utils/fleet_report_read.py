# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet report, part 1: reading one host's registered preflight result.

The vocabulary every other part shares (statuses, states, depths, capabilities, manufacturer names),
the shape checks of a registered preflight document (:func:`check_report`; a part that is wrong is a
:class:`MalformedReportError` naming it), the capability rows read one by one (:func:`read_row`: a row
that is not a preflight row is a malformed row, reported beside the others and counted unavailable,
never a failure of the whole report), what a host has (:func:`inventory`), what it should have
(:func:`check_expect`, :func:`compare`), and its RDMA links that are not usable (:func:`link_problems`).

Standard library only: the controller that runs the ``fleet_report`` module need not carry the
``gpustack-operator`` package.
"""

import re

# Worst first: nothing is known of a host whose task failed or that could not be reached; an
# unavailable answer is a node that cannot hand out what it has; a mismatch hands out less (or
# other) than its inventory says.
STATUSES = ("failed", "unreachable", "unavailable", "mismatch", "ok")
RANK = {status: index for index, status in enumerate(STATUSES)}
STATES = ("ok", "unavailable", "not-declared")
DEPTHS = ("declared", "simulated", "measured")  # shallowest first: the deepest a capability reached wins
# the capability rows in the order the tables list them (the driver-read rows, the sliced and
# visibility rows, Ascend A5's, then the rows any manufacturer may carry); others follow, by name
CAPABILITIES = (
    "mig-partitioning",
    "container-share",
    "cu-mask-topology",
    "smlu-mode",
    "sgpu-mode",
    "sliced-runtime-loaded",
    "sliced-quota-in-force",
    "sidecar-visibility",
    "co-tenancy",
    "ascend-docker-runtime",
    "hccl-ranktable",
    "stale-container-sweep",
    "preflight-panicked",
)
CAPABILITY_RANK = {name: index for index, name in enumerate(CAPABILITIES)}
UNREADABLE = "(unreadable)"  # the capability of a row whose capability cannot be read
# a fleet total's host states: the rows' three, and a host whose group carries no row at all
HOST_STATES = (*STATES, "not-answered")
NOT_ANSWERED = "this document carries no capability row for this manufacturer"
NAMES = {
    "amd": "AMD",
    "ascend": "Ascend",
    "cambricon": "Cambricon",
    "hygon": "Hygon",
    "iluvatar": "Iluvatar",
    "metax": "MetaX",
    "mthreads": "Moore Threads",
    "nvidia": "NVIDIA",
    "thead": "T-Head",
}
MANUFACTURERS = tuple(sorted(NAMES))
# what each manufacturer's runtime version is the version of (the detect pass's runtimeVersion)
RUNTIMES = {"nvidia": "CUDA", "amd": "ROCm", "ascend": "CANN", "hygon": "DTK"}
# The RDMA link verdicts a link is usable in (supplement §7: ``ok`` and ``unverified`` count as usable,
# ``failed`` does not); any other verdict -- ``failed``, or one this report does not know -- is a link
# down, which marks its host degraded (never a failure: "a broken RDMA link does not fail the run").
USABLE_LINKS = ("ok", "unverified")

_DETAIL_PART = re.compile(r"^(?P<model>.*) x(?P<count>\d+)$")
# "host" -> "hosts"; the nouns whose plural is not <noun>s
_PLURALS = {"capability": "capabilities", "is": "are", "was": "were", "this": "these"}


def plural(count, noun):
    """``1 host``, ``2 hosts``, ``0 hosts``: a count and its noun, agreeing."""
    return "%d %s" % (count, noun if count == 1 else _PLURALS.get(noun, noun + "s"))


class MalformedReportError(ValueError):
    """A registered result whose preflight report does not have the preflight document's shape."""


def _kind(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, int):
        return "an int"
    return "a %s" % type(value).__name__


def _str(value, where, optional=True):
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise MalformedReportError("%s is %s, not a string" % (where, _kind(value)))
    return value


def _count(value, where):
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int):
        raise MalformedReportError("%s is %s, not a count" % (where, _kind(value)))
    if value < 0:
        raise MalformedReportError("%s is %d, not a count" % (where, value))
    return value


def _mapping(value, where, optional=True):
    if value is None and optional:
        return None
    if not isinstance(value, dict):
        raise MalformedReportError("%s is %s, not a mapping" % (where, _kind(value)))
    return value


def _list(value, where):
    if value is None:
        return []
    if not isinstance(value, list):
        raise MalformedReportError("%s is %s, not a list" % (where, _kind(value)))
    return value


def _state(value, where):
    if value not in STATES:
        raise MalformedReportError("%s is %r, not one of %s" % (where, value, ", ".join(STATES)))
    return value


def check_report(report):
    """Check the parts of a preflight document the fleet report reads (unknown keys are kept, for a
    newer preflight); raise :class:`MalformedReportError` naming the first part that is wrong."""
    _mapping(report, "report", optional=False)
    for i, group in enumerate(_list(report.get("accelerators"), "report.accelerators")):
        where = "report.accelerators[%d]" % i
        _mapping(group, where, optional=False)
        if not _str(group.get("manufacturer"), where + ".manufacturer", optional=False):
            raise MalformedReportError(where + ".manufacturer is empty")
        detection = _mapping(group.get("detection"), where + ".detection", optional=False)
        _state(detection.get("state"), where + ".detection.state")
        _count(detection.get("accelerators"), where + ".detection.accelerators")
        for key in ("detail", "reason", "depth", "driverVersion", "runtimeVersion"):
            _str(detection.get(key), "%s.detection.%s" % (where, key))
        hostview = _mapping(detection.get("host"), where + ".detection.host")
        if hostview is not None:
            _str(hostview.get("command"), where + ".detection.host.command")
            _count(hostview.get("accelerators"), where + ".detection.host.accelerators")
            _str(hostview.get("reason"), where + ".detection.host.reason")
            _list(hostview.get("missingMounts"), where + ".detection.host.missingMounts")
        # the capability rows are read one by one (group_rows): a malformed row is reported as such,
        # beside the others, rather than costing the whole host its report
        _str(group.get("note"), where + ".note")
    network = _mapping(report.get("network"), "report.network")
    if network is not None:
        _str(network.get("note"), "report.network.note")
        for j, check in enumerate(_list(network.get("checks"), "report.network.checks")):
            cwhere = "report.network.checks[%d]" % j
            _mapping(check, cwhere, optional=False)
            for key in ("interface", "state", "reason"):
                _str(check.get(key), "%s.%s" % (cwhere, key))
    topology = _mapping(report.get("topology"), "report.topology")
    if topology is not None:
        _str(topology.get("policy"), "report.topology.policy")
        _str(topology.get("note"), "report.topology.note")
    return report


def _brief(value, limit=60):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def read_row(check, index=None):
    """One capability row (``checks[index]``) as the report reads it: ``accelerator``, ``capability``,
    ``mode``, ``state``, ``depth``, ``detail``, ``reason``, ``command``, ``index`` and ``problem``.

    A row that is not a preflight row -- not a mapping, no accelerator or capability, a state other
    than ok / unavailable / not-declared, a depth other than declared / simulated / measured, a text
    that is not a string -- has state ``malformed``, ``problem`` saying what is wrong and reason
    ``malformed row: <problem>``; it counts as unavailable (the report cannot tell it is not). A
    missing mode or depth is the preflight's default (``unnamed``, ``declared``)."""
    row = {
        "index": index,
        "accelerator": None,
        "capability": UNREADABLE,
        "mode": "unnamed",
        "state": "malformed",
        "depth": None,
        "detail": None,
        "reason": None,
        "command": None,
        "problem": None,
    }
    problems = []
    if not isinstance(check, dict):
        problems.append("it is %s, not a mapping" % _kind(check))
    else:
        for key in ("accelerator", "capability"):
            value = check.get(key)
            if isinstance(value, str) and value.strip():
                row[key] = value
            else:
                problems.append(
                    "its %s is %s" % (key, "missing" if value is None else "empty" if value == "" else _kind(value))
                )
        mode = check.get("mode")
        if mode is None or (isinstance(mode, str) and mode.strip()):
            row["mode"] = mode or "unnamed"
        else:
            problems.append("its mode is %s, not a name" % _kind(mode))
        depth = check.get("depth")
        if depth is None or depth in DEPTHS:
            row["depth"] = depth or "declared"
        else:
            problems.append("its depth is %s, not one of %s" % (_brief(depth), ", ".join(DEPTHS)))
        for key in ("detail", "reason", "command"):
            value = check.get(key)
            if value is None or isinstance(value, str):
                row[key] = value
            else:
                problems.append("its %s is %s, not a string" % (key, _kind(value)))
        state = check.get("state")
        if isinstance(state, str) and state in STATES:
            if not problems:
                row["state"] = state
        else:
            problems.append(
                "its state is %s, not one of %s" % ("missing" if state is None else _brief(state), ", ".join(STATES))
            )
    if problems:
        row["problem"] = "; ".join(problems)
        row["reason"] = "malformed row: " + row["problem"]
    return row


def group_rows(group):
    """The group's capability rows (``checks``), each read by :func:`read_row`; ``checks`` that is not
    a list is one malformed row saying so."""
    checks = group.get("checks")
    if checks is None:
        return []
    if not isinstance(checks, list):
        row = read_row({}, None)
        row["problem"] = "checks is %s, not a list" % _kind(checks)
        row["reason"] = "malformed row: " + row["problem"]
        return [row]
    return [read_row(check, index) for index, check in enumerate(checks)]


def failing(row):
    """An unavailable row, or one the report cannot read (which it cannot count as ok)."""
    return row["state"] in ("unavailable", "malformed")


def _row_failure(manufacturer, row):
    if row["state"] == "malformed":
        where = "checks" if row["index"] is None else "checks[%d]" % row["index"]
        return "%s: malformed capability row %s: %s" % (manufacturer, where, row["problem"])
    return "%s: %s on %s: %s" % (manufacturer, row["capability"], row["accelerator"], row["reason"])


def failures(report, rows=None):
    """Every unavailable accelerator answer, in words (the preflight module's ``failures``), and every
    capability row the report cannot read. ``rows``: the groups' rows, when already read."""
    out = []
    for i, group in enumerate(report.get("accelerators") or []):
        detection = group["detection"]
        if detection["state"] == "unavailable":
            out.append("%s: detection: %s" % (group["manufacturer"], detection.get("reason")))
        for row in rows[i] if rows is not None else group_rows(group):
            if failing(row):
                out.append(_row_failure(group["manufacturer"], row))
    return out


def inventory(report):
    """What the host has: one item per model (``manufacturer``, ``model``, ``count``, ``driverVersion``,
    ``runtimeVersion``) out of the ok answers' details (``<model> x<count>, ...``); an unavailable
    answer that still counted accelerators gives one item with no model."""
    items = []
    for group in (report or {}).get("accelerators") or []:
        detection = group["detection"]
        count = detection.get("accelerators") or 0
        if detection["state"] == "not-declared" or (detection["state"] == "unavailable" and not count):
            continue
        base = {
            "manufacturer": group["manufacturer"],
            "state": detection["state"],
            "driverVersion": detection.get("driverVersion"),
            "runtimeVersion": detection.get("runtimeVersion"),
        }
        parts = []
        if detection["state"] == "ok" and detection.get("detail"):
            for part in detection["detail"].split(", "):
                match = _DETAIL_PART.match(part)
                if match is None:
                    parts = []
                    break
                parts.append((match.group("model"), int(match.group("count"))))
        if not parts or sum(n for _model, n in parts) != count:
            parts = [(detection.get("detail") if detection["state"] == "ok" else None, count)]
        for model, n in parts:
            item = dict(base, model=model, count=n)
            items.append(item)
    return items


def check_expect(value):
    """A host's ``preflight_expect`` as ``{manufacturer: {"count": n[, "model": text]}}``, or the
    reason it cannot be read. ``{nvidia: 8}`` or ``{nvidia: {count: 8, model: H100}}``."""
    if value is None or value in ({}, ""):
        return None, None
    if not isinstance(value, dict):
        return None, "preflight_expect is %s, not a mapping of manufacturer to count" % _kind(value)
    out = {}
    for key in sorted(value, key=str):
        want = value[key]
        name = str(key).strip().lower()
        if name not in NAMES:
            return None, "preflight_expect names %r, not a manufacturer (%s)" % (key, ", ".join(MANUFACTURERS))
        model = None
        if isinstance(want, dict):
            unknown = sorted(set(want) - {"count", "model"}, key=str)
            if unknown:
                return None, "preflight_expect.%s takes count and model, not %s" % (name, ", ".join(map(str, unknown)))
            model = want.get("model")
            if model is not None and (not isinstance(model, str) or not model.strip()):
                return None, "preflight_expect.%s.model is %s, not a model name" % (name, _kind(model))
            want = want.get("count")
        if isinstance(want, str) and want.strip().isdigit():
            want = int(want)
        if isinstance(want, bool) or not isinstance(want, int) or want < 0:
            return None, "preflight_expect.%s is %r, not a count of accelerators" % (name, want)
        out[name] = {"count": want}
        if model:
            out[name]["model"] = model.strip()
    return out, None


def compare(expected, report, items):
    """Each way the host differs from ``expected``: ``{manufacturer, expected, found, text}``."""
    groups = {g["manufacturer"]: g for g in (report or {}).get("accelerators") or []}
    out = []
    for name, want in sorted(expected.items()):
        label = NAMES[name] + (" " + want["model"] if want.get("model") else "")
        if name not in groups:
            out.append(
                {
                    "manufacturer": name,
                    "expected": want["count"],
                    "found": None,
                    "text": "%s: expected %d, not asked (not among the manufacturers this preflight asked about)"
                    % (label, want["count"]),
                }
            )
            continue
        mine = [i for i in items if i["manufacturer"] == name and i["state"] == "ok"]
        if want.get("model"):
            needle = want["model"].lower()
            found = sum(i["count"] for i in mine if i["model"] and needle in i["model"].lower())
        else:
            found = sum(i["count"] for i in mine)
        if found == want["count"]:
            continue
        if found < want["count"]:
            text = "%s: expected %d, found %d (%d missing)" % (label, want["count"], found, want["count"] - found)
        else:
            text = "%s: expected %d, found %d (%d more)" % (label, want["count"], found, found - want["count"])
        others = [i for i in mine if want.get("model") and not (i["model"] and needle in i["model"].lower())]
        if others:
            text += "; it has " + ", ".join("%s x%d" % (i["model"] or NAMES[name], i["count"]) for i in others)
        if groups[name]["detection"]["state"] == "unavailable":
            text += "; its answer is unavailable"
        out.append({"manufacturer": name, "expected": want["count"], "found": found, "text": text})
    return out


def links_down(report):
    """The network section's rows whose verdict is not a usable one (:data:`USABLE_LINKS`)."""
    checks = ((report or {}).get("network") or {}).get("checks") or []
    return [c for c in checks if isinstance(c, dict) and c.get("state") not in USABLE_LINKS]


def link_problems(report):
    """The host's RDMA links that are not usable, one line per verdict and reason with the links that
    share them: ``ib1, ib3 failed: the RDMA link is not usable: ...``. Empty when every link is usable
    or the document has no network section."""
    alike = {}
    for check in links_down(report):
        key = (check.get("state") or "no verdict", check.get("reason") or "")
        alike.setdefault(key, []).append(check.get("interface") or "an interface with no name")
    return [
        "%s %s%s" % (", ".join(interfaces), state, ": " + reason if reason else "")
        for (state, reason), interfaces in alike.items()
    ]
