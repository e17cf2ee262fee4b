# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet report, part 7: the JUnit file, shaped for CI dashboards -- one testcase per host."""

import re
from xml.etree import ElementTree as ET

from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_causes import degraded_line
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_fleet import _natural, fails
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_read import (
    NAMES,
    RUNTIMES,
    _row_failure,
    failing,
)

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
    in full), unreachable or failed = error; system-out says what the host has. A host whose RDMA
    links are down passes, system-out saying so -- a failure (type ``degraded``) only in a report
    built with ``fail_degraded``."""
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
        elif fails(report, entry):  # ok, its links down, and the run fails those
            counts["failures"] += 1
            line = degraded_line(entry)
            ET.SubElement(case, "failure", message=_xml(line), type="degraded").text = _xml(
                "\n".join(entry["degraded"])
            )
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
            out = has or "no accelerator"
            if entry["degraded"]:
                out += "\ndegraded: " + degraded_line(entry)
            ET.SubElement(case, "system-out").text = _xml(out)
    for key, value in counts.items():
        suite.set(key, str(value))
    if hasattr(ET, "indent"):  # Python >= 3.9
        ET.indent(suite)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(suite, encoding="unicode") + "\n"
