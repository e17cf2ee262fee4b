"""The fleet report: every host's preflight document, a summary, and a readable HTML matrix.

Input is what Ansible registered per host (the ``preflight`` module's result, or an unreachable
marker); output is ``preflight-<timestamp>.yaml`` and ``.html``. The HTML is one self-contained page
with no JavaScript: a hosts × manufacturers matrix coloured by detection state, each cell linking to
that host's rows.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

import yaml
from pydantic import BaseModel, Field

from gpustack_operator.preflight.models import Group, Report


class HostStatus(StrEnum):
    OK = "ok"  # every answer ok or not-declared
    UNAVAILABLE = "unavailable"  # at least one unavailable answer
    UNREACHABLE = "unreachable"  # Ansible could not reach the host
    FAILED = "failed"  # the task failed for another reason (e.g. the package is missing)


class HostEntry(BaseModel):
    host: str
    status: HostStatus
    message: str | None = None
    report: Report | None = None


class Summary(BaseModel):
    hosts: int = 0
    ok: int = 0
    unavailable: int = 0
    unreachable: int = 0
    failed: int = 0

    def line(self) -> str:
        text = (
            f"fleet preflight: {self.hosts} hosts, {self.ok} ok, {self.unavailable} unavailable, "
            f"{self.unreachable} unreachable"
        )
        return text + (f", {self.failed} failed" if self.failed else "")


class FleetReport(BaseModel):
    generated: str
    summary: Summary
    hosts: list[HostEntry] = Field(default_factory=list)

    @property
    def manufacturers(self) -> list[str]:
        names = {g.manufacturer for h in self.hosts if h.report for g in h.report.accelerators}
        return sorted(names)


def classify(host: str, result: Mapping[str, Any] | None) -> HostEntry:
    """Turn one host's registered result into an entry."""
    if result is None:
        return HostEntry(host=host, status=HostStatus.UNREACHABLE, message="no result: the play never ran on it")
    if result.get("unreachable"):
        return HostEntry(host=host, status=HostStatus.UNREACHABLE, message=str(result.get("msg", "unreachable")))
    raw = result.get("report")
    if not isinstance(raw, Mapping):
        return HostEntry(
            host=host,
            status=HostStatus.FAILED,
            message=str(result.get("msg", "the preflight returned no report")),
        )
    report = Report.model_validate(raw)
    status = HostStatus.UNAVAILABLE if report.failures() else HostStatus.OK
    return HostEntry(
        host=host,
        status=status,
        message=result.get("msg") if status != HostStatus.OK else None,
        report=report,
    )


def build(results: Iterable[tuple[str, Mapping[str, Any] | None]], now: datetime | None = None) -> FleetReport:
    entries = sorted((classify(h, r) for h, r in results), key=lambda e: e.host)
    summary = Summary(hosts=len(entries))
    for entry in entries:
        setattr(summary, entry.status.value, getattr(summary, entry.status.value) + 1)
    stamp = (now or datetime.now(UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return FleetReport(generated=stamp, summary=summary, hosts=entries)


def to_yaml(report: FleetReport) -> str:
    doc: dict[str, Any] = {
        "generated": report.generated,
        "summary": report.summary.model_dump(),
        "hosts": {},
    }
    for entry in report.hosts:
        item: dict[str, Any] = {"status": entry.status.value}
        if entry.message:
            item["message"] = entry.message
        if entry.report is not None:
            item["report"] = entry.report.wire()
        doc["hosts"][entry.host] = item
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


_CSS = """
body{font-family:system-ui,sans-serif;margin:1.5rem;color:#1b1f24}
table{border-collapse:collapse;margin:1rem 0}
th,td{border:1px solid #c8ccd0;padding:.35rem .6rem;text-align:left;vertical-align:top}
th{background:#f2f4f6}
.ok{background:#d4f4dd}.unavailable{background:#f9d0d0}.not-declared{background:#eceff1;color:#555}
.unreachable{background:#ffe3b3}.failed{background:#f9d0d0}.none{background:#fff;color:#999}
.summary span{margin-right:1rem;padding:.1rem .4rem}
details summary{cursor:pointer;font-weight:600}
details ul{margin:.3rem 0 0 0;padding-left:1rem;font-size:.9em}
.depth{font-weight:400;color:#444;font-size:.85em}
nav.filters a{margin-right:.8rem}
.filter-anchor{display:block}
#only-unavailable:target ~ table#matrix tbody tr:not(.has-unavailable){display:none}
#only-ok:target ~ table#matrix tbody tr:not(.status-ok){display:none}
#only-unreachable:target ~ table#matrix tbody tr:not(.status-unreachable):not(.status-failed){display:none}
#only-not-declared:target ~ table#matrix tbody tr:not(.has-not-declared){display:none}
section.host{border-top:2px solid #c8ccd0;margin-top:1.5rem;padding-top:.5rem}
code{font-size:.9em}
"""

STATES = ("ok", "unavailable", "not-declared")


def _anchor(host: str, manufacturer: str | None = None) -> str:
    base = "h-" + "".join(c if c.isalnum() else "-" for c in host)
    return f"{base}--{manufacturer}" if manufacturer else base


def _row_states(entry: HostEntry) -> set[str]:
    states: set[str] = set()
    for g in entry.report.accelerators if entry.report else []:
        states.add(g.detection.state.value)
        states.update(c.state.value for c in g.checks or [])
    return states


def _cell(entry: HostEntry, g: Group) -> str:
    """One matrix cell: the detection answer, expandable (no JavaScript) to every row behind it."""
    e = html.escape
    d = g.detection
    label = f"{d.state.value} · {d.accelerators}" if d.accelerators else d.state.value
    worst = d.state.value
    items = [
        f'<li class="{d.state.value}">detection: {d.state.value} <span class="depth">({d.depth.value})</span>'
        f" — {e(d.detail or d.reason or '')}</li>"
    ]
    if d.host is not None:
        seen = f"{d.host.accelerators} accelerator(s)" if d.host.reason is None else e(d.host.reason)
        items.append(f"<li>host: <code>{e(d.host.command)}</code> — {seen}</li>")
    for c in g.checks or []:
        if c.state.value == "unavailable":
            worst = "unavailable"
        items.append(
            f'<li class="{c.state.value}">{e(c.capability)} ({e(c.mode)}) on <code>{e(c.accelerator)}</code>: '
            f'{c.state.value} <span class="depth">({c.depth.value})</span> — {e(c.detail or c.reason or "")}</li>'
        )
    return (
        f'<td class="state {worst}" data-manufacturer="{e(g.manufacturer)}" data-state="{d.state.value}">'
        f'<details><summary>{e(label)} <span class="depth">{d.depth.value}</span></summary>'
        f'<ul>{"".join(items)}</ul><a href="#{_anchor(entry.host, g.manufacturer)}">details</a></details></td>'
    )


def to_html(report: FleetReport) -> str:
    """A self-contained page, readable without JavaScript: summary, state filters (CSS ``:target``),
    the hosts x manufacturers matrix (cells open to their rows), then every host's rows in full."""
    e = html.escape
    manus = report.manufacturers
    s = report.summary
    out: list[str] = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>Fleet preflight {e(report.generated)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Fleet preflight</h1><p>Generated {e(report.generated)}</p>",
        '<p class="summary">'
        f'<span id="sum-hosts">hosts: {s.hosts}</span><span class="ok" id="sum-ok">ok: {s.ok}</span>'
        f'<span class="unavailable" id="sum-unavailable">unavailable: {s.unavailable}</span>'
        f'<span class="unreachable" id="sum-unreachable">unreachable: {s.unreachable}</span>'
        + (f'<span class="failed" id="sum-failed">failed: {s.failed}</span>' if s.failed else "")
        + "</p>",
        '<nav class="filters">Show: <a href="#all">all hosts</a><a href="#only-unavailable">with an unavailable '
        'answer</a><a href="#only-ok">ok</a><a href="#only-not-declared">with a not-declared answer</a>'
        '<a href="#only-unreachable">unreachable or failed</a></nav>',
        '<span class="filter-anchor" id="all"></span><span class="filter-anchor" id="only-unavailable"></span>'
        '<span class="filter-anchor" id="only-ok"></span><span class="filter-anchor" id="only-not-declared"></span>'
        '<span class="filter-anchor" id="only-unreachable"></span>',
        '<table id="matrix"><thead><tr><th>host</th><th>status</th>',
    ]
    out += [f"<th>{e(m)}</th>" for m in manus]
    out.append("</tr></thead><tbody>")
    for entry in report.hosts:
        classes = [f"status-{entry.status.value}", *(f"has-{st}" for st in sorted(_row_states(entry)))]
        out.append(
            f'<tr class="{" ".join(classes)}" data-host="{e(entry.host)}">'
            f'<th><a href="#{_anchor(entry.host)}">{e(entry.host)}</a></th>'
            f'<td class="{entry.status.value}">{entry.status.value}</td>'
        )
        groups = {g.manufacturer: g for g in entry.report.accelerators} if entry.report else {}
        for m in manus:
            g = groups.get(m)
            if g is None:
                out.append(f'<td class="state none" data-manufacturer="{e(m)}">—</td>')
            else:
                out.append(_cell(entry, g))
        out.append("</tr>")
    out.append("</tbody></table>")
    for entry in report.hosts:
        out.append(
            f'<section class="host" id="{_anchor(entry.host)}"><h2>{e(entry.host)} — '
            f'<span class="{entry.status.value}">{entry.status.value}</span></h2>'
        )
        if entry.message:
            out.append(f"<p>{e(entry.message)}</p>")
        for g in entry.report.accelerators if entry.report else []:
            d = g.detection
            out.append(f'<h3 id="{_anchor(entry.host, g.manufacturer)}">{e(g.manufacturer)}</h3>')
            out.append(
                "<table><tr><th>question</th><th>state</th><th>depth</th><th>accelerators</th>"
                "<th>detail / reason</th></tr>"
            )
            out.append(
                f'<tr><td>detection</td><td class="{d.state.value}">{d.state.value}</td>'
                f"<td>{d.depth.value}</td><td>{d.accelerators}</td>"
                f"<td>{e(d.detail or d.reason or '')}</td></tr>"
            )
            for c in g.checks or []:
                out.append(
                    f"<tr><td>{e(c.capability)} ({e(c.mode)}) on <code>{e(c.accelerator)}</code></td>"
                    f'<td class="{c.state.value}">{c.state.value}</td><td>{c.depth.value}</td><td></td>'
                    f"<td>{e(c.detail or c.reason or '')}</td></tr>"
                )
            out.append("</table>")
            if g.note:
                out.append(f"<p><em>{e(g.note)}</em></p>")
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"


def to_junit(report: FleetReport) -> str:
    """JUnit XML for CI systems: one testcase per host x manufacturer (``unavailable`` = failure);
    an unreachable or failed host is one erroring testcase, never dropped."""
    suite = ET.Element("testsuite", name="gpustack-preflight", timestamp=report.generated)
    tests = failures = errors = 0
    for entry in report.hosts:
        if entry.report is None:
            tests += 1
            errors += 1
            case = ET.SubElement(suite, "testcase", classname=entry.host, name="preflight")
            ET.SubElement(case, "error", message=entry.status.value, type=entry.status.value).text = (
                entry.message or entry.status.value
            )
            continue
        for g in entry.report.accelerators:
            tests += 1
            case = ET.SubElement(suite, "testcase", classname=entry.host, name=g.manufacturer)
            bad = [f"detection: {g.detection.reason}"] if g.detection.state.value == "unavailable" else []
            bad += [
                f"{c.capability} on {c.accelerator}: {c.reason}"
                for c in g.checks or []
                if c.state.value == "unavailable"
            ]
            if bad:
                failures += 1
                ET.SubElement(case, "failure", message=bad[0], type="unavailable").text = "\n".join(bad)
            out = f"detection: {g.detection.state.value} ({g.detection.depth.value}), {g.detection.accelerators}"
            ET.SubElement(case, "system-out").text = out + (f"\n{g.note}" if g.note else "")
    suite.set("tests", str(tests))
    suite.set("failures", str(failures))
    suite.set("errors", str(errors))
    ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def write(report: FleetReport, dest: str | Path) -> dict[str, str]:
    """Write ``preflight-<timestamp>.yaml``, ``.html`` and ``.junit.xml`` under ``dest``; return their paths."""
    directory = Path(dest)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = report.generated.replace("-", "").replace(":", "")
    paths = {
        kind: directory / f"preflight-{stamp}.{ext}"
        for kind, ext in (("yaml", "yaml"), ("html", "html"), ("junit", "junit.xml"))
    }
    for kind, text in (("yaml", to_yaml(report)), ("html", to_html(report)), ("junit", to_junit(report))):
        tmp = paths[kind].with_suffix(paths[kind].suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(paths[kind])
    return {k: str(v) for k, v in paths.items()}
