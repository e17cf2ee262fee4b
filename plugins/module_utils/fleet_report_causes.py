# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet report, part 2: one host's entry -- its status, its causes, its one-line reason.

A reason with what is particular to its host taken out (:func:`normalise`) reads the same on every
host, so identical causes group across the fleet; :func:`title_of` names a cause in the words an
operator acts on; :func:`classify` turns what a host's preflight task registered into its entry
(status, causes, one line, capability summary, inventory, differences from its expectation, and the
RDMA links that mark it degraded).
"""

import re

from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_read import (
    CAPABILITIES,
    CAPABILITY_RANK,
    DEPTHS,
    NAMES,
    NOT_ANSWERED,
    STATES,
    MalformedReportError,
    _kind,
    check_expect,
    check_report,
    compare,
    failing,
    failures,
    group_rows,
    inventory,
    link_problems,
    links_down,
    plural,
)

CAUSE_CAPABILITIES = 3  # capabilities named in a cause's title; the rest are counted

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
_BUS = re.compile(r"the PCI bus shows (\d+) accelerator")


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
    entry["degraded"] = link_problems(entry["report"])
    return entry


def degraded_line(entry):
    """Why a host is degraded, in one line: ``RDMA link down — ib1 failed: <reason>`` (``links`` and
    each verdict once, when several are down); ``None`` for a host whose links are all usable."""
    if not entry["degraded"]:
        return None
    down = len(links_down(entry["report"]))
    return "RDMA %s down — %s" % ("link" if down == 1 else "links", "; ".join(entry["degraded"]))


def unnamed_groups(entry):
    """What the report knows of the answers it cannot name a model for, in words: each unavailable
    answer, its manufacturer and title with what it counted, what the bus shows and what the host's
    own CLI sees (``NVIDIA: driver not loaded, 2 on the bus``); answers of several manufacturers that
    read alike and count nothing are one (``all 9 manufacturers: could not measure``)."""
    alike, words = {}, []
    for group in (entry.get("report") or {}).get("accelerators") or []:
        detection = group["detection"]
        if detection["state"] != "unavailable":
            continue
        reason = detection.get("reason") or ""
        title = title_of(reason, "unavailable")
        known = []
        if detection.get("accelerators"):
            known.append("%d counted" % detection["accelerators"])
        bus = _BUS.search(reason)
        if bus:
            known.append("%s on the bus" % bus.group(1))
        seen = (detection.get("host") or {}).get("accelerators")
        if seen and not detection.get("accelerators"):
            known.append("the host's own CLI sees %s" % plural(seen, "accelerator"))
        if known:
            words.append(
                "%s: %s" % (NAMES.get(group["manufacturer"], group["manufacturer"]), ", ".join([title, *known]))
            )
        else:
            alike.setdefault(title, []).append(group["manufacturer"])
    return ["%s: %s" % (_who(names), title) for title, names in alike.items()] + words
