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
    for a host the play never reached) and writes, under O(dest), C(preflight-<timestamp>.yaml)
    (every host's document), C(.html) (a hosts x manufacturers matrix coloured by state, each cell
    opening its rows, filters by state, no JavaScript) and C(.junit.xml) (one testcase per host x
    manufacturer, C(unavailable) = failure, unreachable hosts = errors) for CI systems.
  - Unreachable hosts are listed, never dropped.
requirements:
  - the C(gpustack-operator) Python package on the controller
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
  dest:
    description: Directory the two files are written to (created when missing).
    type: path
    required: true
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
  register: preflight_result
  ignore_errors: true
  ignore_unreachable: true

- name: Write the fleet report on the controller
  gpustack.accelerators.fleet_report:
    dest: "{{ playbook_dir }}/../reports"
    hosts: "{{ groups['all'] }}"
    results: "{{ groups['all'] | map('extract', hostvars) | map(attribute='preflight_result', default=none) | list }}"
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
    html: reports/preflight-20261129T101500Z.html
    junit: reports/preflight-20261129T101500Z.junit.xml
summary:
  description: Host counts by status.
  returned: success
  type: dict
  sample: {hosts: 6, ok: 5, unavailable: 1, unreachable: 0, failed: 0}
summary_line:
  description: The summary in one line.
  returned: success
  type: str
  sample: "fleet preflight: 6 hosts, 5 ok, 1 unavailable, 0 unreachable"
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpustack.accelerators.plugins.module_utils.gpustack import require_gpustack


def main():
    module = AnsibleModule(
        argument_spec=dict(
            hosts=dict(type="list", elements="str", required=True),
            results=dict(type="list", elements="raw", required=True),
            dest=dict(type="path", required=True),
        ),
        supports_check_mode=False,
    )
    require_gpustack(module)
    from gpustack_operator.report import fleet

    hosts, results = module.params["hosts"], module.params["results"]
    if len(hosts) != len(results):
        module.fail_json(msg="hosts and results must align: %d hosts, %d results" % (len(hosts), len(results)))
    pairs = []
    for host, result in zip(hosts, results):
        if result is not None and not isinstance(result, dict):
            module.fail_json(
                msg="the result for %s is a %s, not a registered preflight result" % (host, type(result).__name__)
            )
        pairs.append((host, result))
    try:
        report = fleet.build(pairs)
    except ValueError as exc:
        module.fail_json(msg="a registered result carries no valid preflight report: %s" % exc)
    try:
        paths = fleet.write(report, module.params["dest"])
    except (ValueError, OSError) as exc:
        module.fail_json(msg="the fleet report could not be written to %s: %s" % (module.params["dest"], exc))
    module.exit_json(
        changed=True,
        paths=paths,
        summary=report.summary.model_dump(),
        summary_line=report.summary.line(),
    )


if __name__ == "__main__":
    main()
