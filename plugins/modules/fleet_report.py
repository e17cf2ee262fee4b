#!/usr/bin/python
# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)


DOCUMENTATION = r"""
---
module: fleet_report
short_description: Aggregate per-host preflight results into one fleet report
version_added: "0.1.0"
description:
  - Runs on the controller. Takes what the C(preflight) module registered on every host (or nothing,
    for a host the play never reached), optionally each host's expected inventory, and writes under
    O(dest) C(preflight-<timestamp>.yaml), C(.documents.yaml), C(.html) and C(.junit.xml).
  - The YAML carries the summary, the causes (the same reason grouped across hosts, once host names,
    paths, PCI addresses, UUIDs and counts are taken out), the fleet totals by model (with driver and
    runtime versions), the capability totals, and per host, worst first, its status, one-line reason,
    RDMA links down, inventory, expected inventory and differences, its capability summary, and - for
    a host that is not ok - the whole preflight document it registered.
  - The whole documents of the ok hosts are in the side file C(preflight-<timestamp>.documents.yaml),
    named in the YAML's C(documents) (and in each such host's C(document)), so the YAML a person opens
    grows with what is wrong, not with the fleet; nothing registered is dropped.
  - "Capabilities: each host's preflight rows (C(checks): C(mig-partitioning), C(container-share),
    C(cu-mask-topology), C(sliced-runtime-loaded), C(co-tenancy), C(stale-container-sweep), ...) are
    summarised per manufacturer and capability (accelerators by state, the deepest depth reached, the
    modes, the distinct reasons of the unavailable rows) and totalled across the fleet (hosts ok,
    unavailable - any accelerator's row unavailable -, not-declared, and not answered: the hosts whose
    group carries no row, because their detection failed or their document predates the rows, which
    are ok for no capability)."
  - An unavailable capability row is a cause (titled with its manufacturer and capabilities), and the
    one-line reason of a host whose detection is ok names its first unavailable capability. A row that
    cannot be read (not a mapping, no capability or accelerator, an unknown state or depth) is reported
    as a malformed row, counted as unavailable, never a failure of the report.
  - The HTML is one self-contained page without JavaScript, worst first - failed, unreachable,
    unavailable, mismatch, degraded, then ok - one row per host (models x count - or, for an answer it
    cannot name a model for, what it knows in words -, driver and runtime version, expected inventory,
    RDMA links, topology policy - why it was not read in the cell's title -, and the one-line reason of
    a host that is not ok, its answers behind it, its capability rows grouped there too); the causes
    grouped across hosts, their hosts first; the fleet by model; the capability table (manufacturer x
    capability - hosts ok, unavailable, not-declared, not answered, with the modes and deepest depth -
    one click away); filters by status, degraded, manufacturer, cause, model and capability answer
    (radio buttons and CSS, combinable). Each host text on the page is cut at 800 characters (the YAML
    has every word), so 1,000 hosts stay under 2 MB.
  - A host whose RDMA links are down (a link verdict other than ok or unverified) keeps its status - a
    down link stops no allocation - and is marked C(degraded) (its own colour and filter on the page, a
    line on the console, C(degraded) in the YAML); it fails only with O(fail_degraded).
  - The JUnit file has one testcase per host (V(unavailable) or V(mismatch) = failure, unreachable or
    failed = error), so a CI dashboard counts nodes and keeps each node's history; a failure's message
    is the one-line reason, then one line per failing capability and distinct reason.
  - Unreachable hosts are listed, never dropped. A host is V(mismatch) when its preflight is ok but it
    differs from its O(expect) entry (or that entry cannot be read).
  - The C(preflight) role prints C(summary_line), C(console) and the paths once, then fails each host of
    C(failing) with the same words (C(fail_message)), so Ansible prints its error once for the fleet and
    each failing host's reason appears once.
  - Needs only the Python standard library on the controller (PyYAML when present, else the YAML file
    is written as JSON, which is YAML); not the C(gpustack-operator) package.
options:
  hosts:
    description: The inventory hosts the report covers, in the order of O(results).
    type: list
    elements: str
    required: true
  results:
    description:
      - What the C(preflight) task registered on each host of O(hosts), position by position;
        null (or an undefined variable) for a host the play never reached.
    type: list
    elements: raw
    required: true
  expect:
    description:
      - Expected inventories by host (a host not named has none) - the C(preflight) role passes each
        host's C(preflight_expect) inventory variable (host or group).
      - "Each is a mapping of manufacturer to accelerator count (V({nvidia: 8})), or to C(count) and
        C(model), a text the detected model name must contain (V({nvidia: {count: 8, model: H100}}))."
      - V(0) asserts none. Manufacturers not named are not compared. An expectation that cannot be read
        makes its host V(mismatch), saying why.
    type: dict
  dest:
    description: Directory the four files are written to (created when missing).
    type: path
    required: true
  fail_degraded:
    description:
      - Count a host whose RDMA links are down as failing (in RV(failing) and as a JUnit failure of type
        C(degraded)); the C(preflight) role sets it for C(preflight_fail_on=degraded).
      - By default such a host is marked degraded and passes (a broken RDMA link does not fail the run).
    type: bool
    default: false
attributes:
  check_mode:
    support: none
    description: It writes controller-local report files, so a checked play runs it with C(check_mode=false).
  diff_mode:
    support: none
    description: It writes new report files; there is nothing to diff.
  platform:
    support: full
    platforms: posix
    description: Runs on the controller.
author:
  - GPUStack operator team (@gpustack)
"""

EXAMPLES = r"""
- name: Preflight every host, keeping going on failures
  gpustack.accelerators.preflight:
    fail_on: never
  register: preflight_result
  ignore_errors: true
  ignore_unreachable: true

- name: Write the fleet report on the controller
  gpustack.accelerators.fleet_report:
    dest: "{{ playbook_dir }}/../reports"
    hosts: "{{ ansible_play_hosts_all }}"
    results: "{{ ansible_play_hosts_all | map('extract', hostvars) | map(attribute='preflight_result', default=none) | list }}"
    expect:
      gpu-node-01: {nvidia: 8}
      gpu-node-02: {nvidia: {count: 8, model: H100}}
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
paths:
  description: The files written.
  returned: success
  type: dict
  sample:
    yaml: reports/preflight-20261129T101500Z.yaml
    documents: reports/preflight-20261129T101500Z.documents.yaml
    html: reports/preflight-20261129T101500Z.html
    junit: reports/preflight-20261129T101500Z.junit.xml
summary:
  description: Host counts by status, and C(degraded) - the hosts whose RDMA links are down, whatever their status.
  returned: success
  type: dict
  sample: {hosts: 6, ok: 4, unavailable: 1, unreachable: 0, failed: 0, mismatch: 1, degraded: 1}
summary_line:
  description:
    - The summary in one line (failed, mismatched and degraded only when there are some).
    - Every count noun agrees with its count (C(1 host), never C(1 hosts)).
  returned: success
  type: str
  sample: "fleet preflight: 6 hosts, 4 ok, 1 unavailable, 0 unreachable, 1 mismatched; 1 degraded (RDMA links down)"
console:
  description:
    - "One line per host that is not ok, worst first - C(<host>: <status> - <reason>)."
    - "Then one per ok host whose RDMA links are down - C(<host>: degraded - RDMA link down - <links>)."
  returned: success
  type: list
  elements: str
  sample:
    - "nodriver-01: unavailable — NVIDIA: driver not loaded — the PCI bus shows 2 accelerator(s) of this manufacturer where its driver named 0 (...)"
failing:
  description: The lines by host of the hosts that fail the run - not ok, and degraded with O(fail_degraded).
  returned: success
  type: dict
  sample: {nodriver-01: "nodriver-01: unavailable — NVIDIA: driver not loaded — ..."}
fail_message:
  description: The words each failing host fails with in the C(preflight) role - the same for all of them, so Ansible prints its error once.
  returned: success
  type: str
  sample: "preflight not ok: this host's reason is its line in the fleet summary above (reports/preflight-20261129T101500Z.html)"
causes:
  description: The causes grouped across hosts, worst first, most hosts first.
  returned: success
  type: list
  elements: dict
  contains:
    title:
      description: The cause in a few words, with the manufacturers it is about.
      type: str
      sample: "NVIDIA: driver not loaded"
    text:
      description: The reason, what is particular to one host taken out.
      type: str
    status:
      description: The host status it makes (C(failed), C(unreachable), C(unavailable) or C(mismatch)).
      type: str
    hosts:
      description: The hosts it applies to.
      type: list
      elements: str
    capabilities:
      description: The capabilities whose unavailable rows it is (only for a cause from capability rows).
      type: list
      elements: str
      returned: when the cause comes from capability rows
capabilities:
  description: The capability rows totalled across the fleet (the YAML report's C(capabilities)).
  returned: success
  type: dict
  contains:
    totals:
      description:
        - One per manufacturer x capability some host answered, by manufacturer then capability.
        - A host is V(unavailable) for a capability when any of its accelerators' rows is (or cannot be
          read), else V(ok) when any is ok, else V(not-declared); V(not-answered) are the hosts of that
          manufacturer whose group carries no row at all.
      type: list
      elements: dict
      contains:
        manufacturer:
          description: The manufacturer.
          type: str
          sample: nvidia
        capability:
          description: The capability (the rows' C(capability)).
          type: str
          sample: co-tenancy
        modes:
          description: The modes its rows were asked in, across the fleet.
          type: list
          elements: str
          sample: [partitioned, sliced]
        depth:
          description: The deepest depth any host's row reached (C(declared), C(simulated), C(measured)).
          type: str
          sample: simulated
        counts:
          description: Hosts by state.
          type: dict
          sample: {ok: 1, unavailable: 2, not-declared: 0, not-answered: 1}
        hosts:
          description: The hosts by state (the same keys as C(counts)).
          type: dict
          sample: {ok: [a100-01], unavailable: [hgx-01, hgx-02], not-declared: [], not-answered: [old-01]}
        reasons:
          description: The distinct reasons of its unavailable rows (host particulars taken out) with their hosts.
          type: list
          elements: dict
          sample: [{text: "the allocator refused a synthetic half-accelerator slice: ...", hosts: [hgx-01, hgx-02]}]
    notAnswered:
      description: Per manufacturer and note, the hosts with its accelerators whose group carries no capability row.
      type: list
      elements: dict
      sample: [{manufacturer: nvidia, note: "only question 1 (detection) is answered by this version", hosts: [old-01]}]
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpustack.accelerators.plugins.module_utils import fleet_report as fleet


def main():
    module = AnsibleModule(
        argument_spec=dict(
            hosts=dict(type="list", elements="str", required=True),
            results=dict(type="list", elements="raw", required=True),
            expect=dict(type="dict"),
            dest=dict(type="path", required=True),
            fail_degraded=dict(type="bool", default=False),
        ),
        supports_check_mode=False,
    )
    hosts, results = module.params["hosts"], module.params["results"]
    expect = module.params["expect"] or {}
    dest = module.params["dest"]
    if not dest.strip() or "\0" in dest:
        # never "" (the current directory) or a NUL: say what to set instead
        module.fail_json(msg="dest is empty: name the directory the fleet report is written to (preflight_report_dir)")
    if os.path.exists(dest) and not os.path.isdir(dest):
        module.fail_json(msg="dest %s exists and is not a directory" % dest)
    if len(hosts) != len(results):
        module.fail_json(msg="hosts and results must align: %d hosts, %d results" % (len(hosts), len(results)))
    strangers = sorted(set(expect) - set(hosts))
    if strangers:
        module.fail_json(msg="expect names hosts the report does not cover: %s" % ", ".join(strangers))
    pairs = []
    for host, result in zip(hosts, results):
        if result is not None and not isinstance(result, dict):
            module.fail_json(
                msg="the result for %s is a %s, not a registered preflight result" % (host, type(result).__name__)
            )
        pairs.append((host, result))
    try:
        report = fleet.build(pairs, expect=expect, fail_degraded=module.params["fail_degraded"])
    except fleet.MalformedReportError as exc:
        module.fail_json(msg="a registered result carries no valid preflight report: %s" % exc)
    try:
        paths = fleet.write(report, module.params["dest"])
    except (ValueError, OSError) as exc:
        module.fail_json(msg="the fleet report could not be written to %s: %s" % (module.params["dest"], exc))
    module.exit_json(
        changed=True,
        paths=paths,
        summary=report["summary"],
        summary_line=fleet.summary_line(report["summary"]),
        console=fleet.console_lines(report),
        failing=fleet.failing_hosts(report),
        fail_message="preflight not ok: this host's reason is its line in the fleet summary above (%s)" % paths["html"],
        causes=[fleet.cause_document(c) for c in report["causes"]],
        capabilities=fleet.capabilities_document(report["capabilities"]),
    )


if __name__ == "__main__":
    main()
