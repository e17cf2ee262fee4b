#!/usr/bin/python
# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)


DOCUMENTATION = r"""
---
module: preflight
short_description: Run the GPUStack accelerator preflight on a host
version_added: "0.1.0"
description:
  - Runs C(gpustack-operator device-manager preflight) on the target and returns its report.
  - Every manufacturer asked about gets a detection answer C(ok), C(unavailable) or
    C(not-declared) with the depth it was reached at.
  - The task fails only when an answer is C(unavailable) (the exit-code rule of the preflight);
    C(msg) then names every unavailable answer and its reason. The report is returned either way.
requirements:
  - the C(gpustack-operator) Python package on the target (the C(install) role puts it there)
options:
  host_root:
    description:
      - Directory the node's root filesystem is reached at.
      - Defaults to the host's C(gpustack_host_root) inventory variable when set, else C(/host)
        when the node's root is mounted there, otherwise C(/).
    type: path
  manufacturers:
    description:
      - Manufacturers to preflight; defaults to the host's C(gpustack_manufacturers) inventory
        variable when set, else all nine. Each one asked is reported.
    type: list
    elements: str
    choices: [amd, ascend, cambricon, hygon, iluvatar, metax, mthreads, nvidia, thead]
  dry_run:
    description:
      - Print container steps instead of taking them; write nothing to the host.
      - Forced on in check mode.
    type: bool
    default: false
  fail_on:
    description:
      - C(unavailable) fails the task when an answer is C(unavailable) (the preflight's exit-code rule);
        C(never) always succeeds and leaves the verdict to RV(failures) and RV(summary).
    type: str
    choices: [unavailable, never]
    default: unavailable
attributes:
  check_mode:
    support: full
    description: Runs as a dry run; nothing is written to the host.
  diff_mode:
    support: none
    description: Nothing on the host changes, so there is nothing to diff.
  platform:
    support: full
    platforms: posix
    description: Linux nodes (reads sysfs and /proc through the host root).
author:
  - GPUStack operator team (@gpustack)
"""

EXAMPLES = r"""
- name: Preflight every manufacturer
  gpustack.accelerators.preflight:
  register: preflight

- name: Preflight NVIDIA only, without touching the node
  gpustack.accelerators.preflight:
    manufacturers: [nvidia]
    dry_run: true

- name: Keep going on an unavailable answer and inspect it
  gpustack.accelerators.preflight:
  register: preflight
  ignore_errors: true

- name: Show the detection answers
  ansible.builtin.debug:
    msg: "{{ preflight.summary }}"
"""

RETURN = r"""
report:
  description: The preflight document (section C(accelerators), one group per manufacturer).
  returned: always
  type: dict
  sample:
    accelerators:
      - manufacturer: nvidia
        timestamp: "2026-11-29T10:00:00Z"
        detection:
          state: ok
          depth: declared
          accelerators: 8
          detail: NVIDIA H100 80GB HBM3 x8
summary:
  description: Manufacturer to "state (N accelerators)" for a quick read.
  returned: always
  type: dict
  sample:
    nvidia: ok (8)
    amd: not-declared (0)
failures:
  description: Every unavailable answer, in words; non-empty exactly when the task failed (with O(fail_on=unavailable)).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpustack.accelerators.plugins.module_utils.gpustack import (
    COMMON_ARGS,
    gpustack_api,
    make_request,
    require_gpustack,
)


def main():
    argument_spec = dict(COMMON_ARGS)
    argument_spec["dry_run"] = dict(type="bool", default=False)
    argument_spec["fail_on"] = dict(type="str", choices=["unavailable", "never"], default="unavailable")
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    require_gpustack(module)
    req = make_request(module)
    report = gpustack_api.run_preflight(req, dry_run=module.params["dry_run"] or module.check_mode)
    failures = report.failures()
    summary = {
        g.manufacturer: "%s (%d)" % (g.detection.state.value, g.detection.accelerators) for g in report.accelerators
    }
    result = dict(changed=False, report=report.wire(), summary=summary, failures=failures)
    if failures and module.params["fail_on"] == "unavailable":
        module.fail_json(msg="preflight: " + "; ".join(failures), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
