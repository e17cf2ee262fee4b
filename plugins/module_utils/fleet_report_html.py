# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet report, part 6: the HTML page.

One self-contained page without JavaScript: the verdict (counts by status, and the hosts whose RDMA
links are down), the causes grouped across hosts (their hosts first, never cut off) beside the fleet
by model, the capability table one click away, then one row per host, worst first
(:mod:`fleet_report_html_host`). Filters are radio buttons and CSS (status or degraded, manufacturer,
cause or model or capability answer), combinable; a CSS counter says how many rows are shown.
"""

import html

from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_fleet import STATE_LETTERS
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_html_host import (
    _STATE_CLASS,
    anchor,
    cut,
    ident,
    manufacturers_of,
    row_html,
)
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_read import (
    HOST_STATES,
    NAMES,
    RUNTIMES,
    STATUSES,
    plural,
)

# The state colours (tests/integration/test_html_chromium.py reads them off the screenshots).
COLOURS = {
    "ok": "#d4f4dd",
    "degraded": "#d6e4ff",
    "unavailable": "#f9d0d0",
    "unreachable": "#ffe3b3",
    "failed": "#f4c2e4",
    "mismatch": "#fff0a8",
}
HOSTS_PER_CAUSE = 12  # host names listed under a cause on the page (the filter shows them all)
REASONS_SHOWN = 3  # reasons in a capability total's row on the page (the YAML has them all)
CAUSE_TEXT_SHOWN = 600  # characters of a cause's words on the page (its title attribute has them all)

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
.ok{background:%(ok)s}.degraded{background:%(degraded)s}.unavailable{background:%(unavailable)s}
.unreachable{background:%(unreachable)s}.failed{background:%(failed)s}.mismatch{background:%(mismatch)s}
label{cursor:pointer}
.chip{display:inline-block;padding:.15rem .55rem;margin:0 .35rem .3rem 0;border-radius:.8rem;border:1px solid #c8ccd0}
.chip.plain{background:#fff}
.top{display:flex;gap:2rem;align-items:flex-start}
#causes{flex:1 1 0;min-width:0}#models{flex:0 1 auto;max-width:45%%}
#causes ol{margin:.2rem 0;padding-left:1.6rem}
#causes li{margin:.15rem 0}
#causes .chip{margin:0 .2rem 0 0;padding:0 .5rem}
#causes .n{font-weight:600}#causes .hosts{overflow-wrap:anywhere}
#causes .text{display:block;color:#5a6470;white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
#models td,#models th{padding:.1rem .45rem;white-space:nowrap}
#models .num{text-align:right}
nav.filters{margin:.6rem 0 .3rem;font-size:.93em}nav.filters b{margin-right:.3rem}
nav.filters label{margin-right:.4rem;text-decoration:underline dotted}
#models tfoot td{font-weight:600;border-bottom:0}
#hosts{width:100%%;table-layout:fixed}
#hosts tbody tr{counter-increment:shown}
#hosts tbody th{font-weight:600;overflow-wrap:anywhere}
#hosts td{white-space:nowrap;overflow:hidden;text-overflow:ellipsis}
#hosts td.st{font-weight:600}
#hosts td:nth-child(3),#hosts td:nth-child(4){white-space:normal}
#hosts td[title]:not(.st){text-decoration:underline dotted;cursor:help}
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


def _versions_text(counter):
    if not counter:
        return ""
    if len(counter) == 1:
        return next(iter(counter))
    return ", ".join("%s (%d)" % (v, n) for v, n in sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


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
    digest = "%s answered, %d of them unavailable for a capability · %d not answered" % (
        plural(answered, "host"),
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
                why += "; %s more (in the YAML)" % plural(len(item["reasons"]) - REASONS_SHOWN, "reason")
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
                "<li><b>%s</b> %s: %s</li>"
                % (e(NAMES.get(note["manufacturer"], note["manufacturer"])), plural(n, "host"), e(note["note"]))
            )
        out.append("</ul>")
    return [*out, "</details>"]


def _axis(radio):
    """The radio group (filter axis) a radio belongs to: ``fs`` status, ``fm`` manufacturer, ``fc``
    cause, model or capability answer."""
    return "fc" if radio.startswith(("fc", "fd", "fk")) else radio[:2]


def _filters_css(report, manufacturers):
    """The filters, in CSS alone. A row is shown unless an axis whose radio is checked does not keep
    it: each checked radio sets its axis's custom property to ``none`` on the table, the rows of the
    class it keeps set it back to ``initial`` (no value), and a row's ``display`` is the first of the
    three properties that has a value, else ``table-row`` -- so the axes combine (AND).

    Written so that a row matches only the rules of the classes it carries: a rule ending in
    ``tr:not(.<class>)`` (the page's first form) matched nearly every row, and each match walked every
    radio before the table, which cost Chromium ~1-2 s of style at 1,000 hosts (bench/report_bench.py).
    """
    rules = ["#hosts tbody tr{display:var(--fs,var(--fm,var(--fc,table-row)))}"]
    off, back, mark = [], [], []

    def rule(radio, keep):
        off.append("#%s:checked~#hosts" % radio)
        back.append("#%s:checked~#hosts tr.%s{--%s:initial}" % (radio, keep, _axis(radio)))
        mark.append("#%s:checked~* label[for=%s]" % (radio, radio))

    rule("fs-bad", "bad")
    for status in STATUSES:
        rule("fs-" + status, "s-" + status)
    rule("fs-degraded", "dg")
    for name in manufacturers:
        rule("fm-" + ident(name), "m-" + ident(name))
    rule("fm-none", "m-none")
    for cause in report["causes"]:
        rule("f" + cause["id"], cause["id"])
    for model in report["models"]:
        rule("f" + model["id"], model["id"])
    for radio, keep in _capability_radios(report):
        rule(radio, keep)
    for axis in ("fs", "fm", "fc"):
        selectors = [s for s in off if _axis(s[1:].split(":", 1)[0]) == axis]
        if selectors:
            rules.append(",".join(selectors) + "{--%s:none}" % axis)
    for radio in ("fs-all", "fm-all", "fc-all"):
        mark.append("#%s:checked~* label[for=%s]" % (radio, radio))
    rules += back
    return "\n".join(rules) + "\n" + ",\n".join(mark) + "{outline:2px solid #1b1f24;font-weight:600}\n"


def _radios(report, manufacturers):
    """The filters' state: radio buttons, siblings of everything they act on (CSS ``~``); one group
    per axis (status, manufacturer, cause or model or capability answer), each starting at "all"."""
    radios = ["fs-all", "fs-bad"] + ["fs-" + st for st in STATUSES] + ["fs-degraded"]
    radios += ["fm-all"] + ["fm-" + ident(m) for m in manufacturers] + ["fm-none"]
    radios += ["fc-all"] + ["f" + c["id"] for c in report["causes"]] + ["f" + m["id"] for m in report["models"]]
    radios += [radio for radio, _keep in _capability_radios(report)]
    return [
        '<input type="radio" name="%s" id="%s" hidden%s>'
        % (
            _axis(radio),
            radio,
            " checked" if radio.endswith("-all") else "",
        )
        for radio in radios
    ]


def _header_html(report):
    e = html.escape
    s = report["summary"]
    bad = s["hosts"] - s["ok"]
    chips = ['<label for="fs-all" class="chip plain" id="sum-hosts">%s</label>' % plural(s["hosts"], "host")]
    if bad:
        chips.append('<label for="fs-bad" class="chip plain" id="sum-bad">%d not ok</label>' % bad)
    for status in STATUSES:
        if s[status] or status in ("ok", "unavailable", "unreachable"):
            chips.append(
                '<label for="fs-%s" class="chip %s" id="sum-%s">%d %s</label>'
                % (status, status, status, s[status], status if status != "mismatch" else "differ from expected")
            )
    if s.get("degraded"):
        chips.append(
            '<label for="fs-degraded" class="chip degraded" id="sum-degraded" title="RDMA links down: never a '
            'failure unless preflight_fail_on says so">%d degraded</label>' % s["degraded"]
        )
    return '<header><h1>Fleet preflight</h1><span class="gen">%s</span><p class="summary">%s</p></header>' % (
        e(report["generated"]),
        "".join(chips),
    )


def _causes_html(report):
    """One line per cause, worst first: its host count and title (a filter), its hosts -- first, and
    wrapped rather than cut, however long their names -- then its words on a line of their own (cut
    to the width, all of them in the line's title)."""
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
            '<li class="cause" data-cause="%s" title="%s"><label for="f%s" class="chip %s"><span class="n">%s'
            '</span> %s</label> <span class="hosts">%s</span><span class="text">%s</span></li>'
            % (
                cause["id"],
                e(cause["text"]),
                cause["id"],
                cause["status"],
                plural(len(hosts), "host"),
                e(cause["title"]),
                shown,
                e(cut(cause["text"], CAUSE_TEXT_SHOWN)),
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
        '</tbody><tfoot><tr><td>%s</td><td class="num">%d</td><td class="num">%d</td><td colspan="2">'
        "</td></tr></tfoot></table></section>"
        % (
            plural(len(report["models"]), "model"),
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
    if report["summary"].get("degraded"):
        nav.append('<label for="fs-degraded">degraded</label>')
    nav.append(' · <label for="fm-all">any manufacturer</label>')
    nav += ['<label for="fm-%s">%s</label>' % (ident(m), e(NAMES.get(m, m))) for m in manufacturers]
    nav.append('<label for="fm-none">no accelerator</label>')
    nav.append(' · <label for="fc-all">any cause / model / capability</label></nav>')
    return "".join(nav)


def _notes_html(report):
    e = html.escape
    if not report["notes"]:
        return []
    out = ['<section id="notes"><details><summary>What the answers note (never a failure), once each</summary><ul>']
    for note in report["notes"]:
        who = ", ".join(NAMES.get(m, m) for m in note["manufacturers"])
        out.append(
            "<li><b>%s</b> · %s%s: %s</li>"
            % (
                plural(note["hosts"], "host"),
                e(note["kind"]),
                " (%s)" % e(who) if who else "",
                e(note["text"]),
            )
        )
    return [*out, "</ul></details></section>"]


def to_html(report):
    """One self-contained page without JavaScript: the verdict (counts by status, the degraded hosts),
    the causes grouped across hosts beside the fleet by model, then one row per host, worst first,
    each not-ok row with its reason inline and its answers behind it. Filters are radio buttons and
    CSS (status or degraded, manufacturer, cause or model or capability answer), combinable; a CSS
    counter says how many rows are shown."""
    e = html.escape
    s = report["summary"]
    entries = report["hosts"]
    manufacturers = sorted({m for entry in entries for m in manufacturers_of(entry)})
    out = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        "<title>Fleet preflight %s: %d of %s not ok</title>"
        % (e(report["generated"]), s["hosts"] - s["ok"], plural(s["hosts"], "host")),
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
        name = anchor("h-", entry["host"])
        while name in used:  # "a.b" and "a-b" would share one
            name += "-"
        used.add(name)
        out.append(row_html(entry, name))
    out.append("</tbody></table>")
    out.append('<p id="shown"><span class="n"></span> of %s shown</p>' % plural(s["hosts"], "host"))
    out += _notes_html(report)
    out.append("</body></html>")
    return "\n".join(out) + "\n"
