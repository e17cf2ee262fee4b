# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The fleet report: every host's registered preflight result, aggregated on the controller.

Standard library only (PyYAML when it is importable -- ansible-core brings it --, JSON otherwise,
which is YAML too): the controller that runs the ``fleet_report`` module need not carry the
``gpustack-operator`` package. It reads the plain dicts Ansible registered, checking the shape of
what it reads, so a malformed registered report is named as such.

Output, under one directory, for one timestamp (:func:`write`):

- ``preflight-<stamp>.yaml``: the summary, the causes (identical reasons grouped across hosts), the
  fleet totals by model, the capability totals, the notes, and per host (worst first) its status,
  one-line reason, RDMA links down, expected inventory and differences, its capability summary, and
  the whole preflight document it registered where it is not ok (or degraded);
- ``.documents.yaml``: the whole documents of the other hosts (named in the main file);
- ``.html``: one self-contained page, no JavaScript (filters are radio buttons and CSS);
- ``.junit.xml``: one testcase per host.

This module is the public face; the parts live beside it, each below the next:
``fleet_report_read`` (the vocabulary, reading one document), ``fleet_report_causes`` (one host's
entry), ``fleet_report_fleet`` (the fleet, the console), ``fleet_report_yaml``,
``fleet_report_html_host`` (a host's row) and ``fleet_report_html`` (the page), ``fleet_report_junit``.
"""

import os

from ansible_collections.gpustack.accelerators.plugins.module_utils import fleet_report_yaml as _yaml
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_causes import (
    TITLES,
    UNMEASURED_PREFIX,
    capability_order,
    classify,
    degraded_line,
    headline,
    host_capabilities,
    host_causes,
    normalise,
    one_line,
    title_of,
    unnamed_groups,
)
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_fleet import (
    CONSOLE_WIDTH,
    STATE_LETTERS,
    build,
    console_lines,
    failing_hosts,
    fails,
    fleet_capabilities,
    notes,
    summary_line,
)
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_html import (
    COLOURS,
    HOSTS_PER_CAUSE,
    to_html,
)
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_html_host import (
    TEXT_SHOWN,
    cut,
    row_lines,
)
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_junit import (
    capability_failures,
    junit_failures,
    to_junit,
)
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_read import (
    CAPABILITIES,
    DEPTHS,
    HOST_STATES,
    MANUFACTURERS,
    NAMES,
    RANK,
    RUNTIMES,
    STATES,
    STATUSES,
    UNREADABLE,
    USABLE_LINKS,
    MalformedReportError,
    check_expect,
    check_report,
    compare,
    failing,
    failures,
    group_rows,
    inventory,
    link_problems,
    plural,
    read_row,
)
from ansible_collections.gpustack.accelerators.plugins.module_utils.fleet_report_yaml import (
    HAS_YAML,
    capabilities_document,
    cause_document,
    document,
    documents_document,
)

__all__ = [
    "CAPABILITIES",
    "COLOURS",
    "CONSOLE_WIDTH",
    "DEPTHS",
    "HAS_YAML",
    "HOSTS_PER_CAUSE",
    "HOST_STATES",
    "MANUFACTURERS",
    "NAMES",
    "RANK",
    "RUNTIMES",
    "STATES",
    "STATE_LETTERS",
    "STATUSES",
    "TEXT_SHOWN",
    "TITLES",
    "UNMEASURED_PREFIX",
    "UNREADABLE",
    "USABLE_LINKS",
    "MalformedReportError",
    "build",
    "capabilities_document",
    "capability_failures",
    "capability_order",
    "cause_document",
    "check_expect",
    "check_report",
    "classify",
    "compare",
    "console_lines",
    "cut",
    "degraded_line",
    "document",
    "documents_document",
    "failing",
    "failing_hosts",
    "fails",
    "failures",
    "fleet_capabilities",
    "group_rows",
    "headline",
    "host_capabilities",
    "host_causes",
    "inventory",
    "junit_failures",
    "link_problems",
    "normalise",
    "notes",
    "one_line",
    "plural",
    "read_row",
    "row_lines",
    "summary_line",
    "title_of",
    "to_documents_yaml",
    "to_html",
    "to_junit",
    "to_yaml",
    "unnamed_groups",
    "write",
]


def to_yaml(report):
    """The main YAML document (:func:`document`) as YAML, or JSON where PyYAML is missing (or
    :data:`HAS_YAML` is set false)."""
    return _yaml.dump(document(report), HAS_YAML)


def to_documents_yaml(report):
    """The side file (:func:`documents_document`): the whole documents of the hosts that are ok."""
    return _yaml.dump(documents_document(report), HAS_YAML)


def write(report, dest):
    """Write ``preflight-<stamp>.yaml``, ``.documents.yaml``, ``.html`` and ``.junit.xml`` under
    ``dest`` (created when missing; each file written beside and renamed into place); return their
    paths (``yaml``, ``documents``, ``html``, ``junit``)."""
    if not os.path.isdir(dest):
        os.makedirs(dest)
    stamp = _yaml.stamp(report)
    paths = {
        "yaml": os.path.join(dest, _yaml.main_name(report)),
        "documents": os.path.join(dest, _yaml.documents_name(report)),
        "html": os.path.join(dest, "preflight-%s.html" % stamp),
        "junit": os.path.join(dest, "preflight-%s.junit.xml" % stamp),
    }
    renders = (("yaml", to_yaml), ("documents", to_documents_yaml), ("html", to_html), ("junit", to_junit))
    for kind, render in renders:
        tmp = paths[kind] + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(render(report))
        os.replace(tmp, paths[kind])
    return paths
