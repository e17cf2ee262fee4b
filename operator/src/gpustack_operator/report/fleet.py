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

import yaml
from pydantic import BaseModel, Field

from gpustack_operator.preflight.models import Report


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
        return HostEntry(
            host=host, status=HostStatus.UNREACHABLE, message="no result: the play never ran on it"
        )
    if result.get("unreachable"):
        return HostEntry(
            host=host, status=HostStatus.UNREACHABLE, message=str(result.get("msg", "unreachable"))
        )
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


def build(
    results: Iterable[tuple[str, Mapping[str, Any] | None]], now: datetime | None = None
) -> FleetReport:
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
td.state a{color:inherit;text-decoration:none;display:block}
.ok{background:#d4f4dd}.unavailable{background:#f9d0d0}.not-declared{background:#eceff1;color:#555}
.unreachable{background:#ffe3b3}.failed{background:#f9d0d0}.none{background:#fff;color:#999}
.summary span{margin-right:1rem}
section.host{border-top:2px solid #c8ccd0;margin-top:1.5rem;padding-top:.5rem}
code{font-size:.9em}
"""


def _anchor(host: str, manufacturer: str | None = None) -> str:
    base = "h-" + "".join(c if c.isalnum() else "-" for c in host)
    return f"{base}--{manufacturer}" if manufacturer else base


def to_html(report: FleetReport) -> str:
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
        '<table id="matrix"><thead><tr><th>host</th><th>status</th>',
    ]
    out += [f"<th>{e(m)}</th>" for m in manus]
    out.append("</tr></thead><tbody>")
    for entry in report.hosts:
        out.append(
            f'<tr data-host="{e(entry.host)}"><th><a href="#{_anchor(entry.host)}">{e(entry.host)}</a></th>'
            f'<td class="{entry.status.value}">{entry.status.value}</td>'
        )
        groups = {g.manufacturer: g for g in entry.report.accelerators} if entry.report else {}
        for m in manus:
            g = groups.get(m)
            if g is None:
                out.append(f'<td class="state none" data-manufacturer="{e(m)}">—</td>')
                continue
            d = g.detection
            label = f"{d.state.value} · {d.accelerators}" if d.accelerators else d.state.value
            title = e(d.reason or d.detail or "")
            out.append(
                f'<td class="state {d.state.value}" data-manufacturer="{e(m)}" data-state="{d.state.value}" '
                f'title="{title}"><a href="#{_anchor(entry.host, m)}">{e(label)}</a></td>'
            )
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


def write(report: FleetReport, dest: str | Path) -> dict[str, str]:
    """Write ``preflight-<timestamp>.yaml`` and ``.html`` under ``dest``; return their paths."""
    directory = Path(dest)
    directory.mkdir(parents=True, exist_ok=True)
    stamp = report.generated.replace("-", "").replace(":", "")
    paths = {"yaml": directory / f"preflight-{stamp}.yaml", "html": directory / f"preflight-{stamp}.html"}
    for kind, text in (("yaml", to_yaml(report)), ("html", to_html(report))):
        tmp = paths[kind].with_suffix(paths[kind].suffix + ".tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(paths[kind])
    return {k: str(v) for k, v in paths.items()}
