# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet report: every host's registered preflight result, aggregated on the controller.

Standard library only (PyYAML when it is importable -- ansible-core brings it --, JSON otherwise,
which is YAML too): the controller that runs the ``fleet_report`` module need not carry the
``gpustack-operator`` package. It reads the plain dicts Ansible registered, checking the shape of
what it reads, so a malformed registered report is named as such.

Output, under one directory, for one timestamp:

- ``preflight-<stamp>.yaml``: the summary, the causes (identical reasons grouped across hosts), the
  fleet totals by model, the capability totals (``capabilities``: per manufacturer x capability, the
  hosts ok / unavailable / not-declared / not answered), and per host (worst first) its status,
  one-line reason, expected inventory and differences, its capability summary and the whole
  preflight document it registered;
- ``.html``: one self-contained page, no JavaScript (filters are radio buttons and CSS);
- ``.junit.xml``: one testcase per host.

The capability rows (each group's ``checks``) are read row by row (:func:`read_row`): a row that is
not a preflight row is a malformed row, reported beside the others and counted unavailable, never a
failure of the whole report.
"""

import html
import json
import os
import re
from datetime import datetime, timezone
from xml.etree import ElementTree as ET

try:
    import yaml

    HAS_YAML = True
except ImportError:  # the report is still written, as JSON (a YAML document)
    yaml = None
    HAS_YAML = False

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
CAUSE_CAPABILITIES = 3  # capabilities named in a cause's title; the rest are counted
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
CONSOLE_WIDTH = 300  # a console line is cut there; the page and the YAML carry the whole reason
HOSTS_PER_CAUSE = 12  # host names listed under a cause on the page (the filter shows them all)

UNMEASURED_PREFIX = (
    "the detect pass could not measure this manufacturer, so whether its accelerators are present is unknown: "
)
# (pattern over a reason, short title), first match wins: the words an operator acts on
TITLES = [
    # a capability row's words (first: they may quote a runtime's own "timed out" or "killed by SIG")
    (re.compile(r"^malformed row: "), "malformed row"),
    (re.compile(r"stale-container sweep could not be completed"), "stale preflight containers not cleared"),
    (re.compile(r"preflight panicked and was contained"), "preflight panicked"),
    (re.compile(r"slicing library \S+ is not staged"), "slicing library not staged"),
    (re.compile(r"device node \S+ does not exist"), "device node missing"),
    (re.compile(r"offers no driver seam"), "not simulated: no driver seam"),
    (re.compile(r"--dry-run withholds"), "not asked under --dry-run"),
    (
        re.compile(r"killed by SIG|detect pass (?:exited with status|ended without answering|did not answer)"),
        "vendor library crashed",
    ),
    # before "driver not loaded": the container's library may say so where the host's own CLI sees them
    (re.compile(r"^the host's own .* where this container detected"), "this container sees fewer than the host"),
    (re.compile(r"driver not loaded|couldn't communicate with the \S+ driver", re.I), "driver not loaded"),
    (re.compile(r"enumerates fewer accelerators than the bus shows"), "fewer accelerators than the bus shows"),
    (re.compile(r"^the PCI bus shows .*; the driver said"), "on the bus, no driver answering"),
    (re.compile(r"could not identify"), "accelerators it could not identify"),
    (re.compile(r"could not name"), "accelerators it could not name"),
    (
        re.compile(r"Failed to import the required Python library \(gpustack-operator\)"),
        "gpustack-operator not installed",
    ),
    (re.compile(r"is not an OCI image reference"), "probe image refused"),
    (re.compile(r"connection refused", re.I), "connection refused"),
    (re.compile(r"timed out|timeout", re.I), "connection timed out"),
    (re.compile(r"could not resolve hostname|name or service not known", re.I), "host name not resolved"),
    (re.compile(r"no route to host|network is unreachable", re.I), "no route to host"),
    (re.compile(r"permission denied", re.I), "permission denied"),
]
# host-specific parts stripped from a reason so that identical causes group across hosts
_PCI = re.compile(r"\b[0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]\b")
_UUID = re.compile(r"\b(?:GPU-|MIG-)?[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
_PATH = re.compile(r"(?<![\w.~/-])/[^\s:;,()'\"]+")
_HEX = re.compile(r"\b0x[0-9a-fA-F]+\b")
_SUFFIX = re.compile(r"(?<=[A-Za-z]-)\d+(?![\w.])")  # preflight-0, preflight-1: one name each
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d+)*(?![\w])")
_ELLIPSES = re.compile(r"…(?:(?:, | )…)+")
_SPACE = re.compile(r"\s+")
_SENTENCE_END = re.compile(r"\. (?=[A-Z])")
_DETAIL_PART = re.compile(r"^(?P<model>.*) x(?P<count>\d+)$")
_ANCHOR = re.compile(r"[^A-Za-z0-9_-]")


# one cause per kind of difference from preflight_expect, whatever the manufacturer (each host's row
# and details name its own manufacturer and counts)
MISMATCH_TEXT = {
    "fewer accelerators than expected": "its preflight is ok, but it has fewer accelerators than its preflight_expect "
    "says (one fallen off the bus, not seated, disabled, or another model)",
    "more accelerators than expected": "its preflight is ok, but it has more accelerators than its preflight_expect says",
    "expected manufacturer not asked": "its preflight_expect names a manufacturer this preflight did not ask about "
    "(preflight_manufacturers / gpustack_manufacturers)",
    "expected inventory not understood": "its preflight_expect is not a mapping of manufacturer to count "
    "(or to count and model)",
}


class MalformedReportError(ValueError):
    """A registered result whose preflight report does not have the preflight document's shape."""


# --- reading one host's result ---------------------------------------------------------------------


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


# --- reasons and causes ----------------------------------------------------------------------------


def normalise(text, host=None):
    """The reason with what is particular to one host taken out (its name, paths, PCI addresses,
    UUIDs, hex ids, counts other than 0), so the same cause reads the same on every host."""
    out = text
    if host:
        out = out.replace(host, "…")
    out = _PCI.sub("…", out)
    out = _UUID.sub("…", out)
    out = _PATH.sub("…", out)
    out = _HEX.sub("…", out)
    out = _SUFFIX.sub("N", out)
    out = _NUMBER.sub(lambda m: m.group(0) if m.group(0) == "0" else "N", out)
    out = _ELLIPSES.sub("…", out)
    return _SPACE.sub(" ", out).strip()


_MEMO = {}
_MEMO_SIZE = 4096


def _memo(kind, text, host):
    """``normalise(text, host)`` (kind ``n``) or ``normalise(headline(text), host)`` (kind ``h``),
    remembered: the same words come back on every accelerator of a host."""
    key = (kind, text, host if host and host in text else None)  # most words never name their host
    found = _MEMO.get(key)
    if found is None:
        if len(_MEMO) >= _MEMO_SIZE:
            _MEMO.clear()
        found = _MEMO[key] = normalise(headline(text) if kind == "h" else text, host)
    return found


def headline(reason):
    """The part of a reason that names the cause: the could-not-measure preamble, secondary ``; and``
    clauses and the sentences after the first (the remedy) left out."""
    text = _SPACE.sub(" ", reason or "").strip()
    if text.startswith(UNMEASURED_PREFIX):
        text = text[len(UNMEASURED_PREFIX) :]
    text = text.split("; and ", 1)[0]
    return _SENTENCE_END.split(text, 1)[0].rstrip(".")


def title_of(reason, status):
    for pattern, title in TITLES:
        if pattern.search(reason or ""):
            return title
    if (reason or "").startswith(UNMEASURED_PREFIX):
        return "could not measure"
    return status


def _who(manufacturers):
    if not manufacturers:
        return ""
    if len(manufacturers) == 1:
        return NAMES.get(manufacturers[0], manufacturers[0])
    if len(manufacturers) == len(NAMES):
        return "all %d manufacturers" % len(NAMES)
    return ", ".join(NAMES.get(m, m) for m in manufacturers)


def capability_order(name):
    """The tables' order of capabilities: :data:`CAPABILITIES`, then the others by name."""
    return (CAPABILITY_RANK.get(name, len(CAPABILITIES)), name)


def _capabilities_text(capabilities):
    if len(capabilities) <= CAUSE_CAPABILITIES:
        return ", ".join(capabilities)
    shown = ", ".join(capabilities[: CAUSE_CAPABILITIES - 1])
    return "%s and %d more" % (shown, len(capabilities) - CAUSE_CAPABILITIES + 1)


def host_causes(entry):
    """The host's causes: ``{key, status, title, text, example, manufacturers, capabilities}``;
    answers of several manufacturers that read the same once normalised are one cause, and so are
    capability rows of several capabilities (titled ``<manufacturer> <capabilities>: <title>``)."""
    host, status = entry["host"], entry["status"]
    if status in ("failed", "unreachable"):
        message = entry.get("message") or status
        first = headline(message.splitlines()[0] if message.strip() else status)
        text = normalise(first, host)
        return [
            {
                "key": (status, text),
                "status": status,
                "title": title_of(message, status),
                "text": text,
                "example": first,
                "manufacturers": [],
                "capabilities": [],
            }
        ]
    found = {}
    groups = (entry.get("report") or {}).get("accelerators") or []
    for group, rows in zip(groups, entry.get("rows") or [[]] * len(groups)):  # rows: read only
        # the detection answer, then each capability row that is unavailable (or cannot be read): the
        # first cause of a host whose detection is ok names its first unavailable capability
        answers = []
        if group["detection"]["state"] == "unavailable":
            answers.append((None, group["detection"].get("reason") or ""))
        answers += [(row["capability"], row["reason"] or "no reason given") for row in rows if failing(row)]
        for capability, reason in dict.fromkeys(answers):  # eight accelerators refused alike: once
            first = headline(reason)
            text = _memo("h", reason, host)
            title = title_of(reason, "unavailable")
            key = (capability is not None, title, text)
            if key not in found:
                found[key] = {"title": title, "text": text, "example": first, "manufacturers": [], "capabilities": []}
            if group["manufacturer"] not in found[key]["manufacturers"]:
                found[key]["manufacturers"].append(group["manufacturer"])
            if capability is not None and capability not in found[key]["capabilities"]:
                found[key]["capabilities"].append(capability)
    causes = []
    for (_row, title, text), cause in found.items():
        who = _who(cause["manufacturers"])
        capabilities = sorted(cause["capabilities"], key=capability_order)
        if capabilities:
            who = "%s %s" % (who, _capabilities_text(capabilities))
        causes.append(
            dict(
                cause,
                capabilities=capabilities,
                key=("unavailable", tuple(cause["manufacturers"]), tuple(capabilities), title, text),
                status="unavailable",
                title="%s: %s" % (who, title) if who else title,
            )
        )
    if status == "mismatch":
        for diff in entry["differences"]:
            if diff["manufacturer"] is None:
                kind = "expected inventory not understood"
            elif diff["found"] is None:
                kind = "expected manufacturer not asked"
            elif diff["found"] < diff["expected"]:
                kind = "fewer accelerators than expected"
            else:
                kind = "more accelerators than expected"
            causes.append(
                {
                    "key": ("mismatch", kind),
                    "status": "mismatch",
                    "title": kind,
                    "text": MISMATCH_TEXT[kind],
                    "example": diff["text"],
                    "manufacturers": [diff["manufacturer"]] if diff["manufacturer"] else [],
                    "capabilities": [],
                }
            )
    merged = {}  # two manufacturers short on one host: one cause, one host
    for cause in causes:
        first = merged.setdefault(cause["key"], cause)
        if first is not cause:
            first["example"] += "; " + cause["example"]
            first["manufacturers"] += [m for m in cause["manufacturers"] if m not in first["manufacturers"]]
    return list(merged.values())


def one_line(entry):
    """The host's reason in one line: its causes' titles and their own (not normalised) words."""
    if entry["status"] == "ok":
        return None
    parts = ["%s — %s" % (c["title"], c["example"]) if c["example"] else c["title"] for c in entry["causes"]]
    if entry["status"] == "unavailable":
        parts += [d["text"] for d in entry["differences"]]
    return "; ".join(parts) or entry["status"]


def host_capabilities(entry):
    """The host's capability rows summarised, by manufacturer: ``{answered: true, capabilities: {name:
    {state, accelerators: {ok, unavailable, not-declared[, malformed]}, depth, modes[, reasons]}}}``.

    A capability's ``state`` is the host's: ``unavailable`` when any accelerator's row is (or cannot
    be read), else ``ok`` when any is ok, else ``not-declared``; ``depth`` the deepest its rows reached;
    ``reasons`` the distinct reasons of its failing rows, what is particular to the host taken out.
    A manufacturer whose group carries no row although it has accelerators (its detection failed, or
    a document from before the rows) is ``{answered: false, note}``: it is ok for no capability."""
    out = {}
    host = entry["host"]
    groups = (entry.get("report") or {}).get("accelerators") or []
    for group, rows in zip(groups, entry.get("rows") or []):
        name = group["manufacturer"]
        detection = group["detection"]
        if not rows:
            if detection["state"] != "not-declared" and name not in out:
                out[name] = {
                    "answered": False,
                    "note": group.get("note") or detection.get("reason") or NOT_ANSWERED,
                }
            continue
        mine = out.get(name)
        if mine is None or not mine["answered"]:
            mine = out[name] = {"answered": True, "capabilities": {}}
        for row in rows:
            cap = mine["capabilities"].get(row["capability"])
            if cap is None:
                cap = mine["capabilities"][row["capability"]] = {
                    "state": None,
                    "accelerators": dict.fromkeys(STATES, 0),
                    "depth": None,
                    "modes": [],
                    "reasons": [],
                }
            counts = cap["accelerators"]
            counts[row["state"]] = counts.get(row["state"], 0) + 1
            if row["state"] != "malformed":  # not an answer: neither its depth nor its mode counts
                if cap["depth"] is None or DEPTHS.index(row["depth"]) > DEPTHS.index(cap["depth"]):
                    cap["depth"] = row["depth"]
                if row["mode"] not in cap["modes"]:
                    cap["modes"].append(row["mode"])
            if failing(row):
                text = _memo("h", row["reason"] or "no reason given", host)
                if text not in cap["reasons"]:
                    cap["reasons"].append(text)
    for summary in out.values():
        if not summary["answered"]:
            continue
        ordered = {}
        for name in sorted(summary["capabilities"], key=capability_order):
            cap = summary["capabilities"][name]
            counts = cap["accelerators"]
            if counts["unavailable"] or counts.get("malformed"):
                cap["state"] = "unavailable"
            else:
                cap["state"] = "ok" if counts["ok"] else "not-declared"
            cap["modes"].sort()
            if not cap["reasons"]:
                del cap["reasons"]
            ordered[name] = cap
        summary["capabilities"] = ordered
    return out


def classify(host, result, expect=None):
    """One host's entry from what its preflight task registered (``None``: the play never ran on
    it). Raise :class:`MalformedReportError` when the registered report is not a preflight document."""
    if result is None:
        entry = {
            "host": host,
            "status": "unreachable",
            "message": "no result: the play never ran on it",
            "report": None,
        }
    elif not isinstance(result, dict):
        raise MalformedReportError("the result for %s is %s, not a registered preflight result" % (host, _kind(result)))
    elif result.get("unreachable"):
        entry = {
            "host": host,
            "status": "unreachable",
            "message": str(result.get("msg", "unreachable")),
            "report": None,
        }
    elif not isinstance(result.get("report"), dict):
        if "report" in result and result["report"] is not None:
            raise MalformedReportError("%s: report is %s, not a mapping" % (host, _kind(result["report"])))
        entry = {
            "host": host,
            "status": "failed",
            "message": str(result.get("msg", "the preflight returned no report")),
            "report": None,
        }
    else:
        report = result["report"]
        try:
            check_report(report)
        except MalformedReportError as exc:
            raise MalformedReportError("%s: %s" % (host, exc)) from None
        rows = [group_rows(group) for group in report.get("accelerators") or []]
        failed = failures(report, rows)
        entry = {
            "host": host,
            "status": "unavailable" if failed else "ok",
            "message": (result.get("msg") or "preflight: " + "; ".join(failed)) if failed else None,
            "report": report,
            "rows": rows,
        }
    entry.setdefault("rows", [])
    entry["capabilities"] = host_capabilities(entry)
    entry["inventory"] = inventory(entry["report"])
    expected, problem = check_expect(expect)
    entry["expected"] = expected
    entry["differences"] = []
    if problem is not None:
        entry["differences"] = [{"manufacturer": None, "expected": None, "found": None, "text": problem}]
    elif expected and entry["report"] is not None:
        entry["differences"] = compare(expected, entry["report"], entry["inventory"])
    if entry["differences"] and entry["status"] == "ok":
        entry["status"] = "mismatch"
    entry["causes"] = host_causes(entry)
    entry["reason"] = one_line(entry)
    return entry


# --- the fleet -------------------------------------------------------------------------------------


def _natural(host):
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", host)]


def summary_line(summary):
    text = "fleet preflight: %d hosts, %d ok, %d unavailable, %d unreachable" % (
        summary["hosts"],
        summary["ok"],
        summary["unavailable"],
        summary["unreachable"],
    )
    if summary["failed"]:
        text += ", %d failed" % summary["failed"]
    if summary["mismatch"]:
        text += ", %d mismatched" % summary["mismatch"]
    return text


def _versions(counter, item, key):
    value = item.get(key)
    if value:
        counter[value] = counter.get(value, 0) + 1


def build(results, expect=None, now=None):
    """The fleet report (a plain dict) from ``(host, registered result)`` pairs; ``expect`` maps a
    host to its ``preflight_expect``."""
    expect = expect or {}
    entries = [classify(host, result, expect.get(host)) for host, result in results]
    summary = {"hosts": len(entries), "ok": 0, "unavailable": 0, "unreachable": 0, "failed": 0, "mismatch": 0}
    causes = {}
    for entry in entries:
        summary[entry["status"]] += 1
        for cause in entry["causes"]:
            grouped = causes.get(cause["key"])
            if grouped is None:
                grouped = causes[cause["key"]] = dict(cause, hosts=[], _examples=set())
            grouped["hosts"].append(entry["host"])
            grouped["_examples"].add(cause["example"])
    ordered = sorted(causes.values(), key=lambda c: (RANK[c["status"]], -len(c["hosts"]), c["title"], c["text"]))
    for index, cause in enumerate(ordered):
        cause["id"] = "c%d" % (index + 1)
        cause["hosts"].sort(key=_natural)
        if len(cause.pop("_examples")) == 1:  # the same words on every host: nothing to take out
            cause["text"] = cause["example"]
    order = {cause["key"]: index for index, cause in enumerate(ordered)}
    for entry in entries:
        entry["causeIds"] = [causes[c["key"]]["id"] for c in entry["causes"]]
    entries.sort(
        key=lambda e: (
            RANK[e["status"]],
            min([order[c["key"]] for c in e["causes"]] or [len(order)]),
            _natural(e["host"]),
        )
    )
    models = {}
    for entry in entries:
        mine = set()
        for item in entry["inventory"]:
            if item["state"] != "ok":
                continue
            key = (item["manufacturer"], item["model"] or "")
            model = models.get(key)
            if model is None:
                model = models[key] = {
                    "model": item["model"] or NAMES.get(item["manufacturer"], item["manufacturer"]),
                    "manufacturer": item["manufacturer"],
                    "hosts": 0,
                    "accelerators": 0,
                    "driverVersions": {},
                    "runtimeVersions": {},
                    "_members": [],
                }
            if key not in mine:
                mine.add(key)
                model["hosts"] += 1
                model["_members"].append(entry)
            model["accelerators"] += item["count"]
            _versions(model["driverVersions"], item, "driverVersion")
            _versions(model["runtimeVersions"], item, "runtimeVersion")
        entry["modelIds"] = []
    model_list = sorted(models.values(), key=lambda m: (-m["accelerators"], m["manufacturer"], m["model"]))
    for index, model in enumerate(model_list):
        model["id"] = "d%d" % (index + 1)
        for entry in model.pop("_members"):
            entry["modelIds"].append(model["id"])
    capabilities = fleet_capabilities(entries)
    classes = {}
    for index, item in enumerate(capabilities["totals"]):
        item["id"] = "k%d" % (index + 1)
        for state, hosts in item["hosts"].items():
            for host in hosts:
                classes.setdefault(host, []).append(item["id"] + STATE_LETTERS[state])
    for entry in entries:
        entry["capabilityIds"] = classes.get(entry["host"], [])
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "generated": stamp,
        "summary": summary,
        "causes": ordered,
        "models": model_list,
        "capabilities": capabilities,
        "notes": notes(entries),
        "hosts": entries,
    }


STATE_LETTERS = {"ok": "o", "unavailable": "u", "not-declared": "n", "not-answered": "a"}


def fleet_capabilities(entries):
    """The fleet's capability totals: ``totals``, one per manufacturer x capability any host answered
    (``manufacturer``, ``capability``, ``modes``, ``depth``: the deepest any host reached, ``counts``
    and ``hosts`` by host state -- ok, unavailable, not-declared, and not-answered: the hosts of that
    manufacturer whose group carries no row --, ``reasons``: ``{text, hosts}`` of the unavailable
    rows); and ``notAnswered``: ``{manufacturer, note, hosts}`` per manufacturer and note."""
    totals, missing, notes_by = {}, {}, {}
    for entry in entries:
        host = entry["host"]
        for name, summary in entry["capabilities"].items():
            if not summary["answered"]:
                missing.setdefault(name, []).append(host)
                key = (name, normalise(summary["note"], host))
                note = notes_by.get(key)
                if note is None:
                    note = notes_by[key] = {"manufacturer": name, "note": key[1], "hosts": [], "_raw": set()}
                note["hosts"].append(host)
                note["_raw"].add(summary["note"])
                continue
            for capability, cap in summary["capabilities"].items():
                item = totals.get((name, capability))
                if item is None:
                    item = totals[(name, capability)] = {
                        "manufacturer": name,
                        "capability": capability,
                        "modes": [],
                        "depth": None,
                        "counts": None,
                        "hosts": {state: [] for state in HOST_STATES},
                        "_reasons": {},
                    }
                item["hosts"][cap["state"]].append(host)
                item["modes"] += [m for m in cap["modes"] if m not in item["modes"]]
                if cap["depth"] and (item["depth"] is None or DEPTHS.index(cap["depth"]) > DEPTHS.index(item["depth"])):
                    item["depth"] = cap["depth"]
                for text in cap.get("reasons") or ():
                    item["_reasons"].setdefault(text, []).append(host)
    out = []
    for key in sorted(totals, key=lambda k: (k[0], capability_order(k[1]))):
        item = totals[key]
        item["hosts"]["not-answered"] = list(missing.get(key[0], []))
        for hosts in item["hosts"].values():
            hosts.sort(key=_natural)
        item["counts"] = {state: len(item["hosts"][state]) for state in HOST_STATES}
        item["modes"].sort()
        reasons = item.pop("_reasons")
        item["reasons"] = [
            {"text": text, "hosts": sorted(hosts, key=_natural)}
            for text, hosts in sorted(reasons.items(), key=lambda kv: (-len(kv[1]), kv[0]))
        ]
        out.append(item)
    not_answered = []
    for note in sorted(notes_by.values(), key=lambda n: (n["manufacturer"], -len(n["hosts"]), n["note"])):
        raw = note.pop("_raw")
        if len(raw) == 1:  # the same words on every host: shown as they are
            note["note"] = raw.pop()
        note["hosts"].sort(key=_natural)
        not_answered.append(note)
    return {"totals": out, "notAnswered": not_answered}


def notes(entries):
    """What the answers say beside their verdicts (group notes, the topology note of an unknown
    policy, the network section's note, RDMA links that are not ok), once each with its host count."""
    found = {}

    def add(kind, text, host, manufacturer=None):
        if not text:
            return
        key = (kind, normalise(text, host))
        note = found.get(key)
        if note is None:
            note = found[key] = {
                "kind": kind,
                "text": key[1],
                "hosts": 0,
                "manufacturers": [],
                "_seen": set(),
                "_raw": set(),
            }
        note["_raw"].add(text)
        if host not in note["_seen"]:
            note["_seen"].add(host)
            note["hosts"] += 1
        if manufacturer and manufacturer not in note["manufacturers"]:
            note["manufacturers"].append(manufacturer)

    for entry in entries:
        report = entry.get("report") or {}
        for group in report.get("accelerators") or []:
            # an ok answer's note (what was not checked); a not-declared or unavailable answer's note
            # only restates its verdict, which the row and the causes already say
            if group["detection"]["state"] == "ok":
                add("note", group.get("note"), entry["host"], group["manufacturer"])
        topology = report.get("topology") or {}
        if topology.get("note"):
            add("topology %s" % topology.get("policy", "unknown"), topology["note"], entry["host"])
        network = report.get("network") or {}
        add("network", network.get("note"), entry["host"])
        for check in network.get("checks") or []:
            if check.get("state") != "ok":
                add("RDMA link %s" % check.get("state"), check.get("reason") or check.get("state"), entry["host"])
    out = sorted(found.values(), key=lambda n: (-n["hosts"], n["kind"], n["text"]))
    for note in out:
        del note["_seen"]
        raw = note.pop("_raw")
        if len(raw) == 1:  # the same words on every host: shown as they are
            note["text"] = raw.pop()
        note["manufacturers"].sort()
    return out


def console_lines(report):
    """One line per host that is not ok: ``<host>: <status> — <reason>`` (cut at CONSOLE_WIDTH)."""
    lines = []
    for entry in report["hosts"]:
        if entry["status"] == "ok":
            continue
        line = "%s: %s — %s" % (entry["host"], entry["status"], entry["reason"])
        lines.append(line if len(line) <= CONSOLE_WIDTH else line[: CONSOLE_WIDTH - 1] + "…")
    return lines


# --- YAML ------------------------------------------------------------------------------------------


def cause_document(cause):
    """A cause as the YAML and the module return it (``capabilities`` when its rows name some)."""
    out = {"title": cause["title"], "status": cause["status"], "text": cause["text"], "hosts": list(cause["hosts"])}
    if cause.get("capabilities"):
        out["capabilities"] = list(cause["capabilities"])
    return out


def capabilities_document(capabilities):
    """The fleet's capability totals as the YAML and the module return them."""
    keys = ("manufacturer", "capability", "modes", "depth", "counts", "hosts", "reasons")
    return {
        "totals": [{k: item[k] for k in keys} for item in capabilities["totals"]],
        "notAnswered": [dict(note) for note in capabilities["notAnswered"]],
    }


def document(report):
    """The YAML document: summary, causes, models, capabilities, notes, then every host (worst first)
    with its capability summary and its whole registered preflight document under ``report``."""
    doc = {
        "generated": report["generated"],
        "summary": dict(report["summary"]),
        "causes": [cause_document(c) for c in report["causes"]],
        "models": [
            {k: m[k] for k in ("model", "manufacturer", "hosts", "accelerators", "driverVersions", "runtimeVersions")}
            for m in report["models"]
        ],
        "capabilities": capabilities_document(report["capabilities"]),
        "notes": [
            {k: n[k] for k in ("kind", "text", "hosts", "manufacturers") if n[k] or k == "hosts"}
            for n in report["notes"]
        ],
        "hosts": {},
    }
    for entry in report["hosts"]:
        item = {"status": entry["status"]}
        if entry["reason"]:
            item["reason"] = entry["reason"]
        if entry["message"]:
            item["message"] = entry["message"]
        if entry["inventory"]:
            item["inventory"] = [
                {k: v for k, v in i.items() if v is not None and k != "state"} for i in entry["inventory"]
            ]
        if entry["expected"]:
            item["expected"] = entry["expected"]
        if entry["differences"]:
            item["differences"] = [d["text"] for d in entry["differences"]]
        if entry["capabilities"]:
            item["capabilities"] = entry["capabilities"]
        if entry["report"] is not None:
            item["report"] = entry["report"]
        doc["hosts"][entry["host"]] = item
    return doc


if HAS_YAML:

    class _Dumper(getattr(yaml, "CSafeDumper", None) or yaml.SafeDumper):  # libyaml's emitter when built with it
        """Safe, and never an anchor: two hosts that registered equal documents each get theirs in full."""

        def ignore_aliases(self, data):
            return True


def to_yaml(report):
    """The document as YAML (PyYAML), or as JSON -- a YAML document too -- where PyYAML is missing."""
    doc = document(report)
    if not HAS_YAML:
        return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"
    return yaml.dump(doc, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120)


# --- HTML ------------------------------------------------------------------------------------------

# The state colours (tests/integration/test_html_chromium.py reads them off the screenshots).
COLOURS = {
    "ok": "#d4f4dd",
    "unavailable": "#f9d0d0",
    "unreachable": "#ffe3b3",
    "failed": "#f4c2e4",
    "mismatch": "#fff0a8",
}

_CSS = (
    """
body{font:14px/1.35 system-ui,sans-serif;margin:0 1.2rem 0;color:#1b1f24;counter-reset:shown}
header{display:flex;flex-wrap:wrap;align-items:baseline;gap:.2rem 1rem;margin:.6rem 0 .2rem}
h1{font-size:1.4rem;margin:0}h2{font-size:1.05rem;margin:.6rem 0 .3rem}
header .summary{margin:0}
.muted,.gen{color:#5a6470}
table{border-collapse:collapse}
th,td{border-bottom:1px solid #dde1e5;padding:.2rem .45rem;text-align:left;vertical-align:top}
thead th{background:#f2f4f6;position:sticky;top:0;z-index:1;border-bottom:1px solid #c8ccd0}
.ok{background:%(ok)s}.unavailable{background:%(unavailable)s}.unreachable{background:%(unreachable)s}
.failed{background:%(failed)s}.mismatch{background:%(mismatch)s}
label{cursor:pointer}
.chip{display:inline-block;padding:.15rem .55rem;margin:0 .35rem .3rem 0;border-radius:.8rem;border:1px solid #c8ccd0}
.chip.plain{background:#fff}
.top{display:flex;gap:2rem;align-items:flex-start}
#causes{flex:1 1 0;min-width:0}#models{flex:0 1 auto;max-width:45%%}
#causes ol{margin:.2rem 0;padding-left:1.6rem}
#causes li{margin:.1rem 0;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
#causes .chip{margin:0 .2rem 0 0;padding:0 .5rem}
#causes .n{font-weight:600}#causes .hosts{color:#5a6470}
#models td,#models th{padding:.1rem .45rem;white-space:nowrap}
#models .num{text-align:right}
nav.filters{margin:.6rem 0 .3rem;font-size:.93em}nav.filters b{margin-right:.3rem}
nav.filters label{margin-right:.4rem;text-decoration:underline dotted}
#models tfoot td{font-weight:600;border-bottom:0}
#hosts{width:100%%;table-layout:fixed}
#hosts tbody tr{counter-increment:shown}
#hosts tbody th{font-weight:600;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
#hosts td{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
#hosts td.st{font-weight:600}
#hosts td.why{white-space:normal}
#hosts td.why details>summary{white-space:nowrap;overflow:hidden;text-overflow:ellipsis;cursor:pointer}
#hosts td.why ul{margin:.2rem 0;padding-left:1.1rem;white-space:normal}
#hosts td.why code{font-size:.9em;word-break:break-all}
.short{color:#a40000;font-weight:600}.met{color:#1f6f32}.warn{color:#8a5a00}
#shown{position:sticky;bottom:0;background:#fff;margin:0;padding:.3rem 0;border-top:1px solid #c8ccd0}
#shown .n::before{content:counter(shown)}
#notes ul{padding-left:1.2rem}#notes li{margin:.2rem 0}
#capabilities{margin:.5rem 0 .2rem}#capabilities>summary{cursor:pointer}
#capabilities h2{display:inline;margin:0}#capabilities table{width:100%%}
#capabilities td,#capabilities th{padding:.1rem .45rem;white-space:nowrap}
#capabilities .num{text-align:right}#capabilities td.why{white-space:normal;min-width:28em}
#capabilities label{text-decoration:underline dotted;font-weight:600}
#capabilities p.na{margin:.4rem 0 0}#capabilities ul{margin:.1rem 0;padding-left:1.2rem}
#hosts td.why ul.caps{font-size:.93em}#hosts ul.caps i{color:#5a6470}
"""
    % COLOURS
)


def _anchor(prefix, text):
    return prefix + _ANCHOR.sub("-", text)


def _ident(name):
    """A manufacturer's name as an id or class: a document from a host may name one this report does
    not know, in any characters; only ``[A-Za-z0-9_-]`` reach the page's markup and CSS."""
    return _ANCHOR.sub("-", name)


def _versions_text(counter):
    if not counter:
        return ""
    if len(counter) == 1:
        return next(iter(counter))
    return ", ".join("%s (%d)" % (v, n) for v, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def _has_text(entry):
    """``NVIDIA H100 80GB HBM3 ×8 · …`` and ``driver · runtime`` for one host row."""
    e = html.escape
    models, versions = [], []
    for item in entry["inventory"]:
        name = item["model"] or "%s (not named)" % NAMES.get(item["manufacturer"], item["manufacturer"])
        text = "%s ×%d" % (e(name), item["count"])
        models.append(text if item["state"] == "ok" else '<span class="short">%s</span>' % text)
    # what an unavailable answer could not count: its manufacturer, unknown how many
    unknown = [
        g["manufacturer"]
        for g in (entry.get("report") or {}).get("accelerators") or []
        if g["detection"]["state"] == "unavailable" and not g["detection"].get("accelerators")
    ]
    if len(unknown) > 2:
        models.append('<span class="short">? (%d unavailable)</span>' % len(unknown))
    else:
        models += ['<span class="short">%s ?</span>' % e(NAMES.get(m, m)) for m in unknown]
    for item in entry["inventory"]:
        runtime = item.get("runtimeVersion")
        label = RUNTIMES.get(item["manufacturer"])
        text = " · ".join(
            v
            for v in (
                item.get("driverVersion"),
                ("%s %s" % (label, runtime) if label else runtime) if runtime else None,
            )
            if v
        )
        if text and text not in versions:
            versions.append(text)
    return " · ".join(models), e(" / ".join(versions))


def _expected_text(entry):
    """``found/expected`` per expected manufacturer (green when met, red when not), names in the title."""
    e = html.escape
    expected = entry["expected"]
    if not expected:
        if entry["differences"]:
            return '<span class="short" title="%s">?</span>' % e(entry["differences"][0]["text"])
        return ""
    short = {d["manufacturer"]: d for d in entry["differences"]}
    parts = []
    for name, want in sorted(expected.items()):
        label = "%s %s" % (NAMES[name], want["model"]) if want.get("model") else NAMES[name]
        diff = short.get(name)
        if entry["report"] is None:
            parts.append(
                '<span class="muted" title="%s: expected %d, not asked">?/%d</span>'
                % (e(label), want["count"], want["count"])
            )
        elif diff is None:
            parts.append(
                '<span class="met" title="%s: as expected">%d/%d</span>' % (e(label), want["count"], want["count"])
            )
        else:
            found = "–" if diff["found"] is None else str(diff["found"])
            parts.append('<span class="short" title="%s">%s/%d</span>' % (e(diff["text"]), found, want["count"]))
    return " ".join(parts)


def _network_text(entry):
    """The RDMA links in a few words: ``RDMA 8/8 ok`` (muted), or which are not ok (a warning)."""
    checks = ((entry.get("report") or {}).get("network") or {}).get("checks") or []
    if not checks:
        return ""
    up = sum(1 for c in checks if c.get("state") == "ok")
    if up == len(checks):
        return '<span class="muted">RDMA %d/%d ok</span>' % (up, len(checks))
    down = ", ".join("%s %s" % (c.get("interface"), c.get("state")) for c in checks if c.get("state") != "ok")
    return '<span class="warn">RDMA %d/%d ok: %s</span>' % (up, len(checks), html.escape(down))


def _details(entry):
    """Everything behind a host's verdict, for a host that is not ok (its answers in full)."""
    e = html.escape
    items = []
    if (
        entry["report"] is None
        and entry["message"]
        and entry["message"].strip() != (entry["reason"] or "").split(" — ", 1)[-1]
    ):
        items.append("<li>%s</li>" % e(entry["message"]))
    for group in (entry["report"] or {}).get("accelerators") or []:
        d = group["detection"]
        name = e(NAMES.get(group["manufacturer"], group["manufacturer"]))
        if d["state"] == "unavailable":
            items.append("<li><b>%s</b> detection: %s</li>" % (name, e(d.get("reason") or "")))
            host = d.get("host")
            if host:
                seen = (
                    e(host["reason"]) if host.get("reason") else "%d accelerator(s)" % (host.get("accelerators") or 0)
                )
                missing = host.get("missingMounts")
                if missing:
                    seen += "; missing mounts: " + e(", ".join(map(str, missing)))
                items.append(
                    "<li>%s host's own CLI <code>%s</code>: %s</li>" % (name, e(host.get("command") or ""), seen)
                )
        summary = entry["capabilities"].get(group["manufacturer"])
        if summary and not summary["answered"] and d["state"] == "ok":  # a failed detection says why itself
            items.append("<li><b>%s</b> capabilities not answered: %s</li>" % (name, e(summary["note"])))
    for diff in entry["differences"]:
        items.append('<li class="short">%s</li>' % e(diff["text"]))
    network = _network_text(entry)
    if network:
        items.append("<li>%s</li>" % network)
    return ("<ul>%s</ul>" % "".join(items) if items else "") + _rows_html(entry)


_LINE_ORDER = {"malformed": 0, "unavailable": 1, "ok": 2, "not-declared": 3}
_STATE_CLASS = {"malformed": "short", "unavailable": "short", "ok": "met", "not-declared": "muted"}


def row_lines(entry):
    """The host's capability rows for the page, grouped: one line per manufacturer, modes, state,
    depth, words, command and set of accelerators, the capabilities that share them together (eight
    accelerators answering alike are one line; four capabilities refused for one reason, one line;
    one capability answering alike in four modes, one line)."""
    host = entry["host"]
    groups = (entry.get("report") or {}).get("accelerators") or []
    lines = []
    for group, rows in zip(groups, entry.get("rows") or []):
        if not rows:
            continue
        everyone = {row["accelerator"] for row in rows if row["accelerator"]}
        by = {}
        for row in rows:
            text = "; ".join(t for t in (row["detail"], row["reason"]) if t)
            command = row["command"] or ""
            key = (
                row["capability"],
                row["mode"],
                row["state"],
                row["depth"],
                _memo("n", text, host),
                _memo("n", command, host) if command else "",
            )
            found = by.get(key)
            if found is None:
                found = by[key] = {"accelerators": [], "texts": set(), "commands": set()}
            if row["accelerator"] and row["accelerator"] not in found["accelerators"]:
                found["accelerators"].append(row["accelerator"])
            found["texts"].add(text)
            found["commands"].add(command)
        # one capability answering alike in several modes is one line with its modes, then
        # capabilities answering alike in the same modes are one line
        modes = {}
        for (capability, mode, state, depth, text, command), found in by.items():
            # one host's words as they are, unless its accelerators' differ (then what they share)
            text = next(iter(found["texts"])) if len(found["texts"]) == 1 else text
            command = next(iter(found["commands"])) if len(found["commands"]) == 1 else command
            key = (capability, state, depth, text, command, tuple(sorted(found["accelerators"])))
            modes.setdefault(key, []).append(mode)
        merged = {}
        for (capability, state, depth, text, command, accelerators), names in modes.items():
            key = (tuple(sorted(names)), state, depth, text, command, accelerators)
            line = merged.get(key)
            if line is None:
                line = merged[key] = {
                    "manufacturer": group["manufacturer"],
                    "capabilities": [],
                    "modes": list(key[0]),
                    "state": state,
                    "depth": depth,
                    "text": text,
                    "command": command,
                    "accelerators": list(accelerators),
                    "of": len(everyone),
                }
            line["capabilities"].append(capability)
        for line in merged.values():
            line["capabilities"].sort(key=capability_order)
        lines += sorted(
            merged.values(), key=lambda ln: (_LINE_ORDER[ln["state"]], capability_order(ln["capabilities"][0]))
        )
    return lines


def _rows_html(entry, lines=None):
    """The host's capability rows, grouped (:func:`row_lines`): capabilities, mode, state, depth,
    accelerators, words, and the command a row ran or emitted."""
    e = html.escape
    lines = row_lines(entry) if lines is None else lines
    if not lines:
        return ""
    several = len({line["manufacturer"] for line in lines}) > 1
    above = {cause["example"] for cause in entry["causes"]}  # the host's one line, just above
    items = []
    for line in lines:
        n = len(line["accelerators"])
        if n > 1 and n == line["of"]:
            which = "all %d" % n
        elif n == line["of"] == 1 or not n:
            which = e(", ".join(map(_short_id, line["accelerators"])))
        else:
            which = "%d of %d: %s" % (n, line["of"], e(", ".join(map(_short_id, line["accelerators"]))))
        text = line["text"]
        if line["state"] in ("unavailable", "malformed") and text:
            first = headline(text)
            if first in above and text.startswith(first):
                text = ("reason above" + text[len(first) :]).rstrip()
        items.append(
            '<li>%s%s <i>%s</i> <span class="%s">%s</span> <span class="muted">%s%s</span>%s%s</li>'
            % (
                "<b>%s</b> " % e(NAMES.get(line["manufacturer"], line["manufacturer"])) if several else "",
                e(", ".join(line["capabilities"])),
                e(", ".join(line["modes"])),
                _STATE_CLASS[line["state"]],
                line["state"],
                e(line["depth"] or "?"),
                " · " + which if which else "",
                ": " + e(text) if text else "",
                " <code>%s</code>" % e(line["command"]) if line["command"] else "",
            )
        )
    return '<ul class="caps">%s</ul>' % "".join(items)


SHORT_ID = 13  # characters of an accelerator id on the page (the YAML has each in full)


def _short_id(text):
    return text if len(text) <= SHORT_ID + 1 else text[:SHORT_ID] + "…"


def _ok_why(entry):
    """An ok host's last cell: its RDMA links and, behind them, its capability rows (or that its
    capabilities were not answered)."""
    e = html.escape
    network = _network_text(entry)
    answered, missing = [], []
    for name, summary in entry["capabilities"].items():
        if summary["answered"]:
            answered += [cap["state"] for cap in summary["capabilities"].values()]
        else:
            missing.append(NAMES.get(name, name))
    words = []
    if answered:
        words.append("capabilities %d/%d ok" % (answered.count("ok"), len(answered)))
    if missing:
        words.append(("%s not answered" % ", ".join(missing)) if answered else "capabilities not answered")
    if not words:
        return network
    text = '<span class="muted">%s</span>' % e(", ".join(words))
    if network:
        text = network + " · " + text
    if not answered:
        return text
    return '<details class="caps"><summary>%s</summary>%s</details>' % (text, _rows_html(entry))


REASONS_SHOWN = 3  # reasons in a capability total's row on the page (the YAML has them all)


def _capability_radios(report):
    """(radio id, host class) of each capability total's host state that some host is in."""
    return [
        ("f%s%s" % (item["id"], STATE_LETTERS[state]), item["id"] + STATE_LETTERS[state])
        for item in report["capabilities"]["totals"]
        for state in HOST_STATES
        if item["counts"][state]
    ]


def _capabilities_html(report):
    """The fleet's capabilities, one click away (a line of counts until then, so the hosts stay on
    the first screen): manufacturer x capability -> hosts ok / unavailable / not-declared / not
    answered (each count a filter of the hosts), the modes, the deepest depth, the reasons; then the
    manufacturers some hosts answered no capability for, with the note their groups carry."""
    e = html.escape
    caps = report["capabilities"]
    totals, missing = caps["totals"], caps["notAnswered"]
    if not totals and not missing:
        return []
    answered = short = unanswered = 0
    for entry in report["hosts"]:
        summaries = entry["capabilities"].values()
        if any(s["answered"] for s in summaries):
            answered += 1
        if any(c["state"] == "unavailable" for s in summaries if s["answered"] for c in s["capabilities"].values()):
            short += 1
        if any(not s["answered"] for s in summaries):
            unanswered += 1
    digest = "%d host%s answered, %d of them unavailable for a capability · %d not answered" % (
        answered,
        "" if answered == 1 else "s",
        short,
        unanswered,
    )
    out = ['<details id="capabilities"><summary><h2>Capabilities</h2> <span class="muted">%s</span></summary>' % digest]
    if totals:
        out.append(
            "<table><thead><tr><th>manufacturer</th><th>capability</th><th>mode</th><th>depth</th>"
            '<th class="num">ok</th><th class="num">unavailable</th><th class="num">not-declared</th>'
            '<th class="num">not answered</th><th>why unavailable (hosts: reason)</th></tr></thead><tbody>'
        )
        for item in totals:
            cells = []
            for state in HOST_STATES:
                n = item["counts"][state]
                if n:
                    cells.append(
                        '<td class="num"><label for="f%s%s" class="%s">%d</label></td>'
                        % (item["id"], STATE_LETTERS[state], _STATE_CLASS.get(state, "warn"), n)
                    )
                else:
                    cells.append('<td class="num muted">0</td>')
            why = "; ".join("%d: %s" % (len(r["hosts"]), e(r["text"])) for r in item["reasons"][:REASONS_SHOWN])
            if len(item["reasons"]) > REASONS_SHOWN:
                why += "; %d more reasons (in the YAML)" % (len(item["reasons"]) - REASONS_SHOWN)
            out.append(
                '<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td>%s<td class="why">%s</td></tr>'
                % (
                    e(NAMES.get(item["manufacturer"], item["manufacturer"])),
                    e(item["capability"]),
                    e(", ".join(item["modes"])),
                    e(item["depth"] or ""),
                    "".join(cells),
                    why,
                )
            )
        out.append("</tbody></table>")
    if missing:
        out.append('<p class="na">Not answered (no capability row in the document):</p><ul>')
        for note in missing:
            n = len(note["hosts"])
            out.append(
                "<li><b>%s</b> %d host%s: %s</li>"
                % (e(NAMES.get(note["manufacturer"], note["manufacturer"])), n, "" if n == 1 else "s", e(note["note"]))
            )
        out.append("</ul>")
    return [*out, "</details>"]


def _filters_css(report, manufacturers):
    hide, mark = [], []

    def rule(radio, keep):
        hide.append("#%s:checked~#hosts tbody tr:not(.%s)" % (radio, keep))
        mark.append("#%s:checked~* label[for=%s]" % (radio, radio))

    rule("fs-bad", "bad")
    for status in STATUSES:
        rule("fs-" + status, "s-" + status)
    for name in manufacturers:
        rule("fm-" + _ident(name), "m-" + _ident(name))
    rule("fm-none", "m-none")
    for cause in report["causes"]:
        rule("f" + cause["id"], cause["id"])
    for model in report["models"]:
        rule("f" + model["id"], model["id"])
    for radio, keep in _capability_radios(report):
        rule(radio, keep)
    for radio in ("fs-all", "fm-all", "fc-all"):
        mark.append("#%s:checked~* label[for=%s]" % (radio, radio))
    return ",\n".join(hide) + "{display:none}\n" + ",\n".join(mark) + "{outline:2px solid #1b1f24;font-weight:600}\n"


def _radios(report, manufacturers):
    """The filters' state: radio buttons, siblings of everything they act on (CSS ``~``); one group
    per axis (status, manufacturer, cause or model or capability answer), each starting at "all"."""
    radios = ["fs-all", "fs-bad"] + ["fs-" + st for st in STATUSES]
    radios += ["fm-all"] + ["fm-" + _ident(m) for m in manufacturers] + ["fm-none"]
    radios += ["fc-all"] + ["f" + c["id"] for c in report["causes"]] + ["f" + m["id"] for m in report["models"]]
    radios += [radio for radio, _keep in _capability_radios(report)]
    return [
        '<input type="radio" name="%s" id="%s" hidden%s>'
        % (
            "fc" if radio.startswith(("fc", "fd", "fk")) else radio[:2],
            radio,
            " checked" if radio.endswith("-all") else "",
        )
        for radio in radios
    ]


def _header_html(report):
    e = html.escape
    s = report["summary"]
    bad = s["hosts"] - s["ok"]
    chips = ['<label for="fs-all" class="chip plain" id="sum-hosts">%d hosts</label>' % s["hosts"]]
    if bad:
        chips.append('<label for="fs-bad" class="chip plain" id="sum-bad">%d not ok</label>' % bad)
    for status in STATUSES:
        if s[status] or status in ("ok", "unavailable", "unreachable"):
            chips.append(
                '<label for="fs-%s" class="chip %s" id="sum-%s">%d %s</label>'
                % (status, status, status, s[status], status if status != "mismatch" else "differ from expected")
            )
    return '<header><h1>Fleet preflight</h1><span class="gen">%s</span><p class="summary">%s</p></header>' % (
        e(report["generated"]),
        "".join(chips),
    )


def _causes_html(report):
    """One line per cause, worst first: its host count and title (a filter), its words, its hosts."""
    e = html.escape
    out = ['<section id="causes"><h2>Why hosts are not ok</h2>']
    if not report["causes"]:
        return [*out, '<p class="muted">Every host is ok.</p></section>']
    out.append("<ol>")
    for cause in report["causes"]:
        hosts = cause["hosts"]
        shown = ", ".join(e(h) for h in hosts[:HOSTS_PER_CAUSE])
        if len(hosts) > HOSTS_PER_CAUSE:
            shown += " and %d more" % (len(hosts) - HOSTS_PER_CAUSE)
        out.append(
            '<li class="cause" data-cause="%s" title="%s"><label for="f%s" class="chip %s"><span class="n">%d host%s'
            '</span> %s</label> %s <span class="hosts">— %s</span></li>'
            % (
                cause["id"],
                e(cause["text"]),
                cause["id"],
                cause["status"],
                len(hosts),
                "" if len(hosts) == 1 else "s",
                e(cause["title"]),
                e(cause["text"]),
                shown,
            )
        )
    return [*out, "</ol></section>"]


def _models_html(report):
    """The fleet by model: accelerators, hosts, driver and runtime versions (with host counts when
    they differ), a total; each model a filter."""
    e = html.escape
    out = ['<section id="models"><h2>Fleet by model</h2>']
    if not report["models"]:
        return [*out, '<p class="muted">No host answered with an accelerator.</p></section>']
    out.append(
        '<table><thead><tr><th>model</th><th class="num">accelerators</th><th class="num">hosts</th>'
        "<th>driver</th><th>runtime</th></tr></thead><tbody>"
    )
    for model in report["models"]:
        runtime = _versions_text(model["runtimeVersions"])
        label = RUNTIMES.get(model["manufacturer"], "")
        out.append(
            '<tr><td><label for="f%s">%s</label> <span class="muted">%s</span></td><td class="num">%d</td>'
            '<td class="num">%d</td><td>%s</td><td>%s</td></tr>'
            % (
                model["id"],
                e(model["model"]),
                e(NAMES.get(model["manufacturer"], model["manufacturer"])),
                model["accelerators"],
                model["hosts"],
                e(_versions_text(model["driverVersions"])),
                e(("%s %s" % (label, runtime)).strip() if runtime else ""),
            )
        )
    out.append(
        '</tbody><tfoot><tr><td>%d model%s</td><td class="num">%d</td><td class="num">%d</td><td colspan="2">'
        "</td></tr></tfoot></table></section>"
        % (
            len(report["models"]),
            "" if len(report["models"]) == 1 else "s",
            sum(m["accelerators"] for m in report["models"]),
            sum(1 for entry in report["hosts"] if entry["modelIds"]),
        )
    )
    return out


def _nav_html(report, manufacturers):
    e = html.escape
    nav = ['<nav class="filters"><b>Show</b>']
    nav.append('<label for="fs-all">all</label><label for="fs-bad">not ok</label>')
    nav += ['<label for="fs-%s">%s</label>' % (st, st) for st in STATUSES if report["summary"][st]]
    nav.append(' · <label for="fm-all">any manufacturer</label>')
    nav += ['<label for="fm-%s">%s</label>' % (_ident(m), e(NAMES.get(m, m))) for m in manufacturers]
    nav.append('<label for="fm-none">no accelerator</label>')
    nav.append(' · <label for="fc-all">any cause / model / capability</label></nav>')
    return "".join(nav)


def _row_html(entry, anchor):
    """One host: status, name, what it has, versions, expected, topology, and its one-line reason
    (its answers in full behind it) -- or, for an ok host, its RDMA links."""
    e = html.escape
    status = entry["status"]
    classes = ["s-" + status] + (["bad"] if status != "ok" else [])
    mine = sorted(
        {i["manufacturer"] for i in entry["inventory"]}
        | set(entry["expected"] or {})
        | {m for c in entry["causes"] for m in c["manufacturers"]}
    )
    classes += ["m-" + _ident(m) for m in mine] or ["m-none"]
    classes += entry["causeIds"] + entry["modelIds"] + entry.get("capabilityIds", [])
    has, versions = _has_text(entry)
    if not has:
        has = '<span class="muted">%s</span>' % ("no accelerator" if entry["report"] is not None else "—")
    topology = ((entry.get("report") or {}).get("topology") or {}).get("policy") or ""
    if entry["reason"]:
        why = "<details><summary>%s</summary>%s</details>" % (e(entry["reason"]), _details(entry))
    else:
        why = _ok_why(entry)
    return (
        '<tr id="%s" class="%s" data-host="%s" data-status="%s"><td class="st %s">%s</td><th>%s</th>'
        '<td>%s</td><td>%s</td><td>%s</td><td>%s</td><td class="why">%s</td></tr>'
        % (
            anchor,
            " ".join(classes),
            e(entry["host"]),
            status,
            status,
            status,
            e(entry["host"]),
            has,
            versions,
            _expected_text(entry),
            e(topology),
            why,
        )
    )


def _notes_html(report):
    e = html.escape
    if not report["notes"]:
        return []
    out = ['<section id="notes"><details><summary>What the answers note (never a failure), once each</summary><ul>']
    for note in report["notes"]:
        who = ", ".join(NAMES.get(m, m) for m in note["manufacturers"])
        out.append(
            "<li><b>%d host%s</b> · %s%s: %s</li>"
            % (
                note["hosts"],
                "" if note["hosts"] == 1 else "s",
                e(note["kind"]),
                " (%s)" % e(who) if who else "",
                e(note["text"]),
            )
        )
    return [*out, "</ul></details></section>"]


def to_html(report):
    """One self-contained page without JavaScript: the verdict (counts by status), the causes grouped
    across hosts beside the fleet by model, then one row per host, worst first, each not-ok row with
    its reason inline and its answers behind it. Filters are radio buttons and CSS (status,
    manufacturer, cause or model), combinable; a CSS counter says how many rows are shown."""
    e = html.escape
    s = report["summary"]
    entries = report["hosts"]
    manufacturers = sorted(
        {i["manufacturer"] for entry in entries for i in entry["inventory"]}
        | {m for entry in entries for m in (entry["expected"] or {})}
        | {m for c in report["causes"] for m in c["manufacturers"]}
    )
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Fleet preflight %s: %d of %d hosts not ok</title>"
        % (e(report["generated"]), s["hosts"] - s["ok"], s["hosts"]),
        "<style>%s%s</style></head><body>" % (_CSS, _filters_css(report, manufacturers)),
    ]
    out += _radios(report, manufacturers)
    out.append(_header_html(report))
    out += ['<div class="top">', *_causes_html(report), *_models_html(report), "</div>"]
    out += _capabilities_html(report)
    out.append(_nav_html(report, manufacturers))
    out.append(
        '<table id="hosts"><colgroup><col style="width:8.2em"><col style="width:11.5em"><col style="width:18em">'
        '<col style="width:13.5em"><col style="width:6.2em"><col style="width:7.5em"><col>'
        "</colgroup><thead><tr><th>status</th><th>host</th><th>accelerators</th><th>driver · runtime</th>"
        "<th>expected</th><th>topology</th><th>reason · RDMA links</th></tr></thead><tbody>"
    )
    used = set()
    for entry in entries:
        anchor = _anchor("h-", entry["host"])
        while anchor in used:  # "a.b" and "a-b" would share one
            anchor += "-"
        used.add(anchor)
        out.append(_row_html(entry, anchor))
    out.append("</tbody></table>")
    out.append('<p id="shown"><span class="n"></span> of %d hosts shown</p>' % s["hosts"])
    out += _notes_html(report)
    out.append("</body></html>")
    return "\n".join(out) + "\n"


# --- JUnit -----------------------------------------------------------------------------------------


# what XML 1.0 cannot carry at all (a host's words may hold control characters): replaced, never
# written into a file a CI dashboard then cannot parse
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text):
    return _NOT_XML.sub("\ufffd", text)


def capability_failures(entry):
    """One line per manufacturer, capability and distinct reason of the host's failing capability
    rows: ``NVIDIA co-tenancy: <reason, what is particular to the host taken out>``."""
    lines = []
    for name, summary in entry["capabilities"].items():
        if not summary["answered"]:
            continue
        for capability, cap in summary["capabilities"].items():
            for reason in cap.get("reasons") or ():
                lines.append("%s %s: %s" % (NAMES.get(name, name), capability, reason))
    return lines


def junit_failures(entry):
    """Every failing answer in full, the rows that fail alike on several accelerators once with
    their accelerators: ``nvidia: co-tenancy on GPU-a, GPU-b: <reason>``."""
    report = entry["report"] or {}
    out = []
    for group, rows in zip(report.get("accelerators") or [], entry.get("rows") or []):
        name = group["manufacturer"]
        if group["detection"]["state"] == "unavailable":
            out.append("%s: detection: %s" % (name, group["detection"].get("reason")))
        alike = {}
        for row in rows:
            if not failing(row):
                continue
            if row["state"] == "malformed":
                out.append(_row_failure(name, row))
                continue
            alike.setdefault((row["capability"], row["reason"]), []).append(row["accelerator"])
        for (capability, reason), accelerators in alike.items():
            out.append("%s: %s on %s: %s" % (name, capability, ", ".join(accelerators), reason))
    return out


def to_junit(report):
    """JUnit XML shaped for CI dashboards: one testcase per host (classname ``gpustack-preflight``,
    name the host, the same identity run after run), unavailable or mismatched = failure (message:
    the one-line reason, then one line per failing capability and reason; text: every failing answer
    in full), unreachable or failed = error; system-out says what the host has."""
    suite = ET.Element("testsuite", name="gpustack-preflight", timestamp=report["generated"])
    counts = {"tests": 0, "failures": 0, "errors": 0}
    for entry in sorted(report["hosts"], key=lambda e: _natural(e["host"])):
        counts["tests"] += 1
        case = ET.SubElement(suite, "testcase", classname="gpustack-preflight", name=_xml(entry["host"]))
        status = entry["status"]
        if status in ("unreachable", "failed"):
            counts["errors"] += 1
            ET.SubElement(case, "error", message=_xml(entry["reason"] or status), type=status).text = _xml(
                entry["message"] or status
            )
        elif status in ("unavailable", "mismatch"):
            counts["failures"] += 1
            lines = junit_failures(entry) + [d["text"] for d in entry["differences"]]
            message = "\n".join([entry["reason"] or status, *capability_failures(entry)])
            ET.SubElement(case, "failure", message=_xml(message), type=status).text = _xml("\n".join(lines))
        has = ", ".join(
            "%s x%d%s"
            % (
                i["model"] or NAMES.get(i["manufacturer"], i["manufacturer"]),
                i["count"],
                "".join(
                    " (%s %s)" % (label, i[key])
                    for label, key in (
                        ("driver", "driverVersion"),
                        (RUNTIMES.get(i["manufacturer"], "runtime"), "runtimeVersion"),
                    )
                    if i.get(key)
                ),
            )
            for i in entry["inventory"]
        )
        if entry["report"] is not None:
            ET.SubElement(case, "system-out").text = _xml(has or "no accelerator")
    for key, value in counts.items():
        suite.set(key, str(value))
    if hasattr(ET, "indent"):  # Python >= 3.9
        ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


# --- writing ---------------------------------------------------------------------------------------


def write(report, dest):
    """Write ``preflight-<stamp>.yaml``, ``.html`` and ``.junit.xml`` under ``dest`` (created when
    missing; each file written beside and renamed into place); return their paths."""
    if not os.path.isdir(dest):
        os.makedirs(dest)
    stamp = report["generated"].replace("-", "").replace(":", "")
    paths = {
        "yaml": os.path.join(dest, "preflight-%s.yaml" % stamp),
        "html": os.path.join(dest, "preflight-%s.html" % stamp),
        "junit": os.path.join(dest, "preflight-%s.junit.xml" % stamp),
    }
    for kind, render in (("yaml", to_yaml), ("html", to_html), ("junit", to_junit)):
        tmp = paths[kind] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(render(report))
        os.replace(tmp, paths[kind])
    return paths
