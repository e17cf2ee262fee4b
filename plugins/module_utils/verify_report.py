# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The verify report (issue 19): per node, the host's view against the cluster's, in the fleet report's
style -- one timestamped set of files on the controller, the same console summary shape, a failing
node's differences as its JUnit failure message.

Its own small writer rather than a ``verify`` kind of ``fleet_report``: the fleet report is built
around preflight documents (causes grouped across hosts, capability rows, inventories by model, side
documents), none of which a verify entry has; an entry here is a host, its node, a status and its
lines. What it shares with the fleet report is the shape of the output, not the machinery.

Output under one directory, for one timestamp (:func:`write`):

- ``verify-<stamp>.yaml``: the summary, then per node (worst first) its host, node, status and
  differences (each ``{kind, text}``) or the error that kept it from being compared;
- ``verify-<stamp>.html``: one self-contained page (no JavaScript), a row per node;
- ``verify-<stamp>.junit.xml``: one testcase per host (classname ``gpustack-verify``): a node whose
  cluster view disagrees is a failure whose message is its differences, one per line; a node that
  could not be (fully) compared (its facts failed, it was unreachable, the facts were no detection
  document, a part of the cluster could not be read) is an error.

Standard library only (PyYAML when importable -- ansible-core brings it --, JSON otherwise, a YAML
document too), Python 3.7-compatible like the rest of module_utils.
"""

from __future__ import annotations

import datetime
import html
import json
import os
import re
from xml.etree import ElementTree as ET

try:
    import yaml

    HAS_YAML = True
except ImportError:  # the report is still written, as JSON (a YAML document)
    yaml = None
    HAS_YAML = False

STATUSES = ("error", "drift", "ok")  # worst first
CLASSNAME = "gpustack-verify"
COLOURS = {"ok": "#1a7f37", "drift": "#cf222e", "error": "#9a6700"}
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text):
    return _NOT_XML.sub("\ufffd", str(text))


def now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def stamp(generated):
    """The file names' timestamp: ``20261129T100000Z``."""
    return generated.replace("-", "").replace(":", "")


def entry(host, node, status, differences=None, error=None):
    """One node's entry: ``differences`` a list of ``{kind, text}``; ``error`` why it was not compared."""
    out = {"host": host, "node": node, "status": status}
    if differences:
        out["differences"] = list(differences)
    if error:
        out["error"] = error
    return out


def reason(item):
    """The entry's one line: its error, or its first difference (and how many more)."""
    if item["status"] == "error":
        return item.get("error") or "not compared"
    lines = [d["text"] for d in item.get("differences") or ()]
    if not lines:
        return "the cluster agrees with the host"
    more = " (+%d more)" % (len(lines) - 1) if len(lines) > 1 else ""
    return lines[0] + more


def _natural(text):
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", text)]


def ordered(entries):
    """Worst first, then by host (naturally: node-2 before node-10)."""
    return sorted(entries, key=lambda e: (STATUSES.index(e["status"]), _natural(e["host"])))


def build(entries, generated=None):
    summary = {"nodes": len(entries)}
    for status in STATUSES:
        summary[status] = sum(1 for e in entries if e["status"] == status)
    return {"generated": generated or now(), "summary": summary, "nodes": ordered(entries)}


def summary_line(summary):
    return "cluster verify: %d nodes, %d ok, %d drift, %d error" % (
        summary["nodes"],
        summary["ok"],
        summary["drift"],
        summary["error"],
    )


def console_lines(report):
    """One line per node that is not ok, worst first: ``<host> (node <node>): drift - <reason>``."""
    return [
        "%s (node %s): %s - %s" % (e["host"], e["node"], e["status"], reason(e))
        for e in report["nodes"]
        if e["status"] != "ok"
    ]


def failing_hosts(report):
    """host -> its console line, for every node that is not ok."""
    return {
        e["host"]: "%s (node %s): %s - %s" % (e["host"], e["node"], e["status"], reason(e))
        for e in report["nodes"]
        if e["status"] != "ok"
    }


def to_yaml(report):
    doc = {"generated": report["generated"], "summary": report["summary"], "nodes": report["nodes"]}
    if HAS_YAML:
        return yaml.safe_dump(doc, sort_keys=False, default_flow_style=False, allow_unicode=True, width=120)
    return json.dumps(doc, indent=2) + "\n"


def to_junit(report):
    suite = ET.Element("testsuite", name=CLASSNAME, timestamp=report["generated"])
    counts = {"tests": 0, "failures": 0, "errors": 0}
    for item in report["nodes"]:
        counts["tests"] += 1
        case = ET.SubElement(suite, "testcase", classname=CLASSNAME, name=_xml(item["host"]))
        lines = "\n".join(d["text"] for d in item.get("differences") or ())
        if item["status"] == "error":
            counts["errors"] += 1
            text = lines or item.get("error") or ""
            ET.SubElement(case, "error", message=_xml(reason(item)), type="error").text = _xml(text)
        elif item["status"] == "drift":
            counts["failures"] += 1
            failure = ET.SubElement(case, "failure", message=_xml(lines), type="drift")
            failure.text = _xml("node %s:\n%s" % (item["node"], lines))
        ET.SubElement(case, "system-out").text = _xml("node %s" % item["node"])
    for key, value in counts.items():
        suite.set(key, str(value))
    if hasattr(ET, "indent"):  # Python >= 3.9
        ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"


def to_html(report):
    esc = html.escape
    rows = []
    for item in report["nodes"]:
        status = item["status"]
        if status == "error" and not item.get("differences"):
            detail = "<p>%s</p>" % esc(item.get("error") or "")
        elif status != "ok":
            detail = "<ul>%s</ul>" % "".join(
                '<li><span class="kind">%s</span> %s</li>' % (esc(d["kind"]), esc(d["text"]))
                for d in item.get("differences") or ()
            )
        else:
            detail = "<p>the cluster agrees with the host</p>"
        rows.append(
            '<tr class="%s"><td>%s</td><td>%s</td><td><b style="color:%s">%s</b></td><td>%s</td></tr>'
            % (esc(status), esc(item["host"]), esc(item["node"]), COLOURS[status], esc(status), detail)
        )
    title = "GPUStack cluster verify %s" % report["generated"]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>%s</title>\n'
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;width:100%%}"
        "td,th{border-bottom:1px solid #ddd;padding:.4em;text-align:left;vertical-align:top}"
        "ul{margin:0;padding-left:1.2em}.kind{color:#57606a;font-size:.85em}</style></head>\n"
        "<body><h1>%s</h1>\n<p>%s</p>\n"
        "<table><thead><tr><th>host</th><th>node</th><th>status</th><th>host view vs cluster view</th></tr></thead>\n"
        "<tbody>\n%s\n</tbody></table></body></html>\n"
    ) % (esc(title), esc(title), esc(summary_line(report["summary"])), "\n".join(rows))


def write(report, dest):
    """The three files under ``dest`` (made when absent); their paths by kind."""
    os.makedirs(dest, exist_ok=True)
    base = os.path.join(dest, "verify-%s" % stamp(report["generated"]))
    paths = {"yaml": base + ".yaml", "html": base + ".html", "junit": base + ".junit.xml"}
    for kind, text in (("yaml", to_yaml(report)), ("html", to_html(report)), ("junit", to_junit(report))):
        tmp = paths[kind] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(tmp, paths[kind])
    return paths
