# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet report, part 3: the fleet -- every host's entry, the causes grouped across hosts, the
totals by model and by capability, the notes, and what the console prints.

:func:`build` is the report every output (YAML, HTML, JUnit, the module's return) is written from.
"""

import re
from datetime import datetime, timezone

from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_causes import (
    capability_order,
    classify,
    degraded_line,
    normalise,
)
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_read import (
    DEPTHS,
    HOST_STATES,
    NAMES,
    RANK,
    plural,
)

CONSOLE_WIDTH = 300  # a console line is cut there; the page and the YAML carry the whole reason
STATE_LETTERS = {"ok": "o", "unavailable": "u", "not-declared": "n", "not-answered": "a"}


def _natural(host):
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", host)]


def summary_line(summary):
    """``fleet preflight: 19 hosts, 16 ok, 2 unavailable, 0 unreachable, 1 mismatched; 2 degraded (RDMA
    links down)`` -- failed, mismatched and degraded only when there are some."""
    text = "fleet preflight: %s, %d ok, %d unavailable, %d unreachable" % (
        plural(summary["hosts"], "host"),
        summary["ok"],
        summary["unavailable"],
        summary["unreachable"],
    )
    if summary["failed"]:
        text += ", %d failed" % summary["failed"]
    if summary["mismatch"]:
        text += ", %d mismatched" % summary["mismatch"]
    if summary.get("degraded"):
        text += "; %d degraded (RDMA links down)" % summary["degraded"]
    return text


def _versions(counter, item, key):
    value = item.get(key)
    if value:
        counter[value] = counter.get(value, 0) + 1


def build(results, expect=None, now=None, fail_degraded=False):
    """The fleet report (a plain dict) from ``(host, registered result)`` pairs; ``expect`` maps a
    host to its ``preflight_expect``; ``fail_degraded``: a host whose RDMA links are down fails too
    (``preflight_fail_on: degraded``), in :func:`failing_hosts` and the JUnit file."""
    expect = expect or {}
    entries = [classify(host, result, expect.get(host)) for host, result in results]
    summary = {"hosts": len(entries), "ok": 0, "unavailable": 0, "unreachable": 0, "failed": 0, "mismatch": 0}
    summary["degraded"] = 0  # hosts whose RDMA links are down, whatever their status
    causes = {}
    for entry in entries:
        summary[entry["status"]] += 1
        if entry["degraded"]:
            summary["degraded"] += 1
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
            not e["degraded"],  # an ok host whose links are down before the plainly ok ones
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
        "failDegraded": bool(fail_degraded),
    }


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


def _line(host, status, reason):
    line = "%s: %s — %s" % (host, status, reason)
    return line if len(line) <= CONSOLE_WIDTH else line[: CONSOLE_WIDTH - 1] + "…"


def console_lines(report):
    """One line per host that is not ok, worst first -- ``<host>: <status> — <reason>`` (cut at
    CONSOLE_WIDTH) --, then one per ok host whose RDMA links are down: ``<host>: degraded — RDMA link
    down — <links>``."""
    return list(_lines(report).values())


def _lines(report):
    lines = {}
    for entry in report["hosts"]:
        if entry["status"] != "ok":
            lines[entry["host"]] = _line(entry["host"], entry["status"], entry["reason"])
        elif entry["degraded"]:
            lines[entry["host"]] = _line(entry["host"], "degraded", degraded_line(entry))
    return lines


def fails(report, entry):
    """Whether the host fails the run: it is not ok, or its RDMA links are down and the report was
    built to fail those (``fail_degraded``: ``preflight_fail_on: degraded``)."""
    return entry["status"] != "ok" or bool(report.get("failDegraded") and entry["degraded"])


def failing_hosts(report):
    """The hosts that fail the run (:func:`fails`), each with its console line, worst first."""
    lines = _lines(report)
    return {e["host"]: lines[e["host"]] for e in report["hosts"] if fails(report, e)}
