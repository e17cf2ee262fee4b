# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet report, part 5: one host's row of the page.

Status (``degraded`` for an ok host whose RDMA links are down), name (wrapped, never cut), what it
has (or, for an answer the report cannot name a model for, what it knows in words), versions,
expected inventory, topology policy (why it was not read in the cell's title), and the one-line
reason of a host that is not ok with its answers behind it -- for an ok host its RDMA links and a
count of its capabilities.

Every text a host sent is escaped and shown at most :data:`TEXT_SHOWN` characters long, and a row
lists at most :data:`ITEMS_SHOWN` answers, models or versions and :data:`ROW_LINES_SHOWN` capability
lines (the rest counted; the YAML carries every word), so a document of any size makes a row of
bounded size but for its filter classes (one per manufacturer and capability answer it carries):
1,000 hosts of the simulated fleet's documents stay under 2 MB (bench/report_bench.py).
"""

import html
import re

from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_causes import (
    _memo,
    capability_order,
    degraded_line,
    headline,
    unnamed_groups,
)
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_fleet import CONSOLE_WIDTH
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_read import (
    NAMES,
    RUNTIMES,
    USABLE_LINKS,
    plural,
)

TEXT_SHOWN = 800  # characters of one host text (a reason, a note, a command) on the page
ROW_LINES_SHOWN = 8  # capability lines behind a host's reason, failing first (the YAML has them all)
ITEMS_SHOWN = 12  # answers behind a host's reason, models and versions in its cells (the YAML has them all)
SHORT_ID = 13  # characters of an accelerator id on the page (the YAML has each in full)
NAME_SHOWN = 60  # characters of a manufacturer name a document gives (the nine known are shorter)
NO_TOPOLOGY = "this document carries no topology section"
_ANCHOR = re.compile(r"[^A-Za-z0-9_-]")
_LINE_ORDER = {"malformed": 0, "unavailable": 1, "ok": 2, "not-declared": 3}
_STATE_CLASS = {"malformed": "short", "unavailable": "short", "ok": "met", "not-declared": "muted"}


def cut(text, width):
    """``text`` at most ``width`` characters, an ellipsis where it was cut."""
    return text if len(text) <= width else text[: width - 1] + "…"


def _e(text, width=TEXT_SHOWN):
    return html.escape(cut(text, width))


def anchor(prefix, text):
    return prefix + _ANCHOR.sub("-", text)


def ident(name):
    """A manufacturer's name as an id or class: a document from a host may name one this report does
    not know, in any characters; only ``[A-Za-z0-9_-]`` reach the page's markup and CSS."""
    return _ANCHOR.sub("-", name)


def manufacturers_of(entry):
    """The manufacturers a host row is filtered by: what it has, what it is expected to have, what
    its causes name."""
    return sorted(
        {i["manufacturer"] for i in entry["inventory"]}
        | set(entry["expected"] or {})
        | {m for c in entry["causes"] for m in c["manufacturers"]}
    )


def _capped(items, what):
    """``items``, at most :data:`ITEMS_SHOWN` of them and a last one counting the rest."""
    if len(items) <= ITEMS_SHOWN:
        return items
    return [
        *items[: ITEMS_SHOWN - 1],
        '<span class="muted">%s more (in the YAML)</span>' % plural(len(items) - ITEMS_SHOWN + 1, what),
    ]


def has_text(entry):
    """``NVIDIA H100 80GB HBM3 ×8 · …`` and ``driver · runtime`` for one host row; an answer the
    report cannot name a model for says what it knows (``NVIDIA: driver not loaded, 2 on the bus``)."""
    models, versions = [], []
    for item in entry["inventory"]:
        if item["state"] != "ok":
            continue  # an unavailable answer is said in words below
        name = item["model"] or "%s (no model named)" % NAMES.get(item["manufacturer"], item["manufacturer"])
        models.append("%s ×%d" % (_e(name), item["count"]))
    models += ['<span class="short">%s</span>' % _e(words) for words in unnamed_groups(entry)]
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
    versions = [_e(v) for v in versions]
    return " · ".join(_capped(models, "model")), " / ".join(_capped(versions, "version"))


def expected_text(entry):
    """``found/expected`` per expected manufacturer (green when met, red when not), names in the title."""
    e = html.escape
    expected = entry["expected"]
    if not expected:
        if entry["differences"]:
            return '<span class="short" title="%s">?</span>' % _e(entry["differences"][0]["text"])
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
            parts.append('<span class="short" title="%s">%s/%d</span>' % (_e(diff["text"]), found, want["count"]))
    return " ".join(parts)


def network_text(entry):
    """The RDMA links in a few words: ``RDMA 8/8 ok`` (muted), or which are not (a warning)."""
    checks = ((entry.get("report") or {}).get("network") or {}).get("checks") or []
    if not checks:
        return ""
    up = sum(1 for c in checks if c.get("state") == "ok")
    if up == len(checks):
        return '<span class="muted">RDMA %d/%d ok</span>' % (up, len(checks))
    words = [
        "%s %s" % (c.get("interface"), c.get("state")) for c in checks if c.get("state") != "ok" and isinstance(c, dict)
    ]
    usable = all(c.get("state") in USABLE_LINKS for c in checks if isinstance(c, dict))
    return '<span class="%s">RDMA %d/%d ok: %s</span>' % (
        "muted" if usable else "warn",
        up,
        len(checks),
        _e(", ".join(words)),
    )


def details(entry):
    """Everything behind a host's verdict, for a host that is not ok (its answers, each at most
    :data:`TEXT_SHOWN` characters)."""
    items = []
    if (
        entry["report"] is None
        and entry["message"]
        and entry["message"].strip() != (entry["reason"] or "").split(" — ", 1)[-1]
    ):
        items.append("<li>%s</li>" % _e(entry["message"]))
    for group in (entry["report"] or {}).get("accelerators") or []:
        d = group["detection"]
        name = _e(NAMES.get(group["manufacturer"], group["manufacturer"]), NAME_SHOWN)
        if d["state"] == "unavailable":
            items.append("<li><b>%s</b> detection: %s</li>" % (name, _e(d.get("reason") or "")))
            host = d.get("host")
            if host:
                seen = (
                    _e(host["reason"]) if host.get("reason") else plural(host.get("accelerators") or 0, "accelerator")
                )
                missing = host.get("missingMounts")
                if missing:
                    seen += "; missing mounts: " + _e(", ".join(map(str, missing)))
                items.append(
                    "<li>%s host's own CLI <code>%s</code>: %s</li>" % (name, _e(host.get("command") or ""), seen)
                )
        summary = entry["capabilities"].get(group["manufacturer"])
        if summary and not summary["answered"] and d["state"] == "ok":  # a failed detection says why itself
            items.append("<li><b>%s</b> capabilities not answered: %s</li>" % (name, _e(summary["note"])))
    for diff in entry["differences"]:
        items.append('<li class="short">%s</li>' % _e(diff["text"]))
    network = network_text(entry)
    if network:
        items.append("<li>%s</li>" % network)
    items = [i if i.startswith("<li") else "<li>%s</li>" % i for i in _capped(items, "answer")]
    return ("<ul>%s</ul>" % "".join(items) if items else "") + rows_html(entry)


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


def _short_id(text):
    return text if len(text) <= SHORT_ID + 1 else text[:SHORT_ID] + "…"


def rows_html(entry, lines=None):
    """The host's capability rows, grouped (:func:`row_lines`), failing first and at most
    :data:`ROW_LINES_SHOWN` of them: capabilities, mode, state, depth, accelerators, words, and the
    command a row ran or emitted."""
    e = html.escape
    lines = row_lines(entry) if lines is None else lines
    if not lines:
        return ""
    lines = sorted(lines, key=lambda ln: _LINE_ORDER[ln["state"]] > 1)  # failing first, in every manufacturer
    several = len({line["manufacturer"] for line in lines}) > 1
    above = {cause["example"] for cause in entry["causes"]}  # the host's one line, just above
    items = []
    for line in lines[:ROW_LINES_SHOWN]:
        n = len(line["accelerators"])
        if n > 1 and n == line["of"]:
            which = "all %d" % n
        elif n == line["of"] == 1 or not n:
            which = _e(", ".join(map(_short_id, line["accelerators"])))
        else:
            which = "%d of %d: %s" % (n, line["of"], _e(", ".join(map(_short_id, line["accelerators"]))))
        text = line["text"]
        if line["state"] in ("unavailable", "malformed") and text:
            first = headline(text)
            if first in above and text.startswith(first):
                text = ("reason above" + text[len(first) :]).rstrip()
        items.append(
            '<li>%s%s <i>%s</i> <span class="%s">%s</span> <span class="muted">%s%s</span>%s%s</li>'
            % (
                "<b>%s</b> " % _e(NAMES.get(line["manufacturer"], line["manufacturer"]), NAME_SHOWN) if several else "",
                _e(", ".join(line["capabilities"])),
                _e(", ".join(line["modes"])),
                _STATE_CLASS[line["state"]],
                line["state"],
                e(line["depth"] or "?"),
                " · " + which if which else "",
                ": " + _e(text) if text else "",
                " <code>%s</code>" % _e(line["command"]) if line["command"] else "",
            )
        )
    if len(lines) > ROW_LINES_SHOWN:
        rest = lines[ROW_LINES_SHOWN:]
        items.append(
            '<li class="muted">%s more (%s; in the YAML)</li>'
            % (
                plural(len(rest), "line"),
                ", ".join(
                    "%d %s" % (sum(1 for ln in rest if ln["state"] == s), s)
                    for s in _LINE_ORDER
                    if any(ln["state"] == s for ln in rest)
                ),
            )
        )
    return '<ul class="caps">%s</ul>' % "".join(items)


def ok_why(entry):
    """An ok host's last cell: its RDMA links (which are down, for a degraded host) and how many of
    its capabilities are ok (its rows are in the YAML's side file), or that they were not answered."""
    network = network_text(entry)
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
    text = '<span class="muted">%s</span>' % _e(", ".join(words))
    return network + " · " + text if network else text


def row_html(entry, anchor_id):
    """One host: status, name, what it has, versions, expected, topology, and its one-line reason
    (its answers in full behind it) -- or, for an ok host, its RDMA links and capability count."""
    e = html.escape
    status = entry["status"]
    classes = ["s-" + status] + (["bad"] if status != "ok" else []) + (["dg"] if entry["degraded"] else [])
    classes += ["m-" + ident(m) for m in manufacturers_of(entry)] or ["m-none"]
    classes += entry["causeIds"] + entry["modelIds"] + entry.get("capabilityIds", [])
    has, versions = has_text(entry)
    if not has:
        has = '<span class="muted">%s</span>' % ("no accelerator" if entry["report"] is not None else "—")
    if status == "ok" and entry["degraded"]:
        cell = '<td class="st degraded" title="%s">degraded</td>' % _e(
            "ok for every allocation; " + degraded_line(entry)
        )
    else:
        cell = '<td class="st %s">%s</td>' % (status, status)
    if entry["reason"]:
        why = "<details><summary>%s</summary>%s</details>" % (_e(entry["reason"], CONSOLE_WIDTH), details(entry))
    else:
        why = ok_why(entry)
    return (
        '<tr id="%s" class="%s" data-host="%s" data-status="%s">%s<th>%s</th>'
        '<td>%s</td><td>%s</td><td>%s</td>%s<td class="why">%s</td></tr>'
        % (
            anchor_id,
            " ".join(classes),
            e(entry["host"]),
            status,
            cell,
            e(entry["host"]),
            has,
            versions,
            expected_text(entry),
            topology_cell(entry),
            why,
        )
    )


def topology_cell(entry):
    """The kubelet's topology policy; when it was not read (``unknown``) or the document has no
    topology section, why, in the cell's title."""
    if entry["report"] is None:
        return "<td></td>"
    topology = entry["report"].get("topology")
    if not topology:
        return '<td class="muted" title="%s">—</td>' % NO_TOPOLOGY
    note = topology.get("note")
    policy = html.escape(topology.get("policy") or "unknown")
    return '<td title="%s">%s</td>' % (_e(note), policy) if note else "<td>%s</td>" % policy
