#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: driver_mode
short_description: Read, enable or disable a vendor driver mode on accelerators
version_added: "0.1.0"
description:
  - Reads or converges the driver modes the GPUStack allocator depends on, per accelerator -
    Ascend C(container-share) (DCMI V1 only; V2 declares no such flag), Cambricon C(smlu),
    NVIDIA C(mig), MetaX C(sgpu) (read only).
  - Idempotent - an accelerator already in the asked state is not written. Check mode predicts the
    change without writing. Diff mode shows before/after per accelerator.
  - Refuses to turn a mode off on an accelerator where it is on while the allocator's per-pod
    records (C(/var/lib/gpustack/operator/pods)) show slices held there, naming the pods, unless
    O(force=true); a record that cannot be read counts as held. The rule is the package's own, so
    C(gpustack-operator dm mode --disable) enforces it too (C(--force)).
  - A failed write reports the vendor's words and the command a person would run.
  - A node with no accelerator of O(manufacturer) is never a silent C(changed=false) - the task warns
    (or fails, O(absent=fail)) naming the manufacturer; a manufacturer whose detection could not be
    measured always fails the task, with the reason.
options:
  manufacturer:
    description: The manufacturer whose mode this is.
    type: str
    required: true
    choices: [amd, ascend, cambricon, hygon, iluvatar, metax, mthreads, nvidia, thead]
  mode:
    description: The mode, in the vendor's own word (C(container-share), C(smlu), C(mig), C(sgpu)).
    type: str
    required: true
  accelerators:
    description:
      - Which accelerators - C(all), or a list of driver indexes and/or accelerator ids (UUIDs).
    type: list
    elements: str
    default: [all]
  state:
    description: C(enabled) or C(disabled) converge the mode; C(read) only reports it.
    type: str
    choices: [enabled, disabled, read]
    default: read
  force:
    description: Disable even while pods hold slices (they will be stranded).
    type: bool
    default: false
  absent:
    description:
      - What a node with no accelerator of O(manufacturer) does - V(warn) succeeds with a warning naming
        the manufacturer and saying that no accelerator of it was detected (with what the PCI bus shows
        when it shows some the driver did not name), V(fail) fails the task with that message.
      - Either way nothing is read or written, and RV(modes) is empty. A manufacturer that could not be
        measured fails the task whatever this says.
    type: str
    choices: [warn, fail]
    default: warn
extends_documentation_fragment:
  - gpustack.accelerators.node
attributes:
  check_mode:
    support: full
    description: Predicts each accelerator's change without writing to the driver.
  diff_mode:
    support: full
    description: Shows the mode before and after per accelerator.
  platform:
    support: full
    platforms: posix
    description: Linux nodes (reads sysfs and /proc through the host root).
author:
  - GPUStack operator team (@gpustack)
"""

EXAMPLES = r"""
- name: Read the Ascend container-share flag on every NPU
  gpustack.accelerators.driver_mode:
    manufacturer: ascend
    mode: container-share
  register: share

- name: Turn Cambricon sMLU mode on for cards 0 and 1
  gpustack.accelerators.driver_mode:
    manufacturer: cambricon
    mode: smlu
    accelerators: ["0", "1"]
    state: enabled

- name: MIG on every GPU of the A100 group; a node of that group without NVIDIA GPUs fails the task
  gpustack.accelerators.driver_mode:
    manufacturer: nvidia
    mode: mig
    state: enabled
    absent: fail

- name: Turn MIG off on one GPU even though pods hold partitions
  gpustack.accelerators.driver_mode:
    manufacturer: nvidia
    mode: mig
    accelerators: [GPU-6d3c7a1e-2f0b-4a8e-9c1d-000000000001]
    state: disabled
    force: true
"""

RETURN = r"""
modes:
  description: The mode as read on each accelerator of O(manufacturer) (before any change); empty on a node
    without one (the task then warns or fails, see O(absent)).
  returned: always
  type: list
  elements: dict
  sample:
    - {accelerator: NPU-0, index: 0, mode: container-share, declared: true, enabled: false}
changes:
  description: One entry per selected accelerator with before, after, changed, and the vendor
    command that was run (command) and that undoes it (undo_command).
  returned: when state is enabled or disabled and the node has an accelerator of O(manufacturer)
  type: list
  elements: dict
holders:
  description: The pods whose records hold slices where the mode would have been turned off (the
    task then fails unless O(force=true)); C(problem) is set for a record that could not be read.
  returned: when disabling was refused
  type: list
  elements: dict
  sample:
    - {uid: 6f1c2a9e-0000-4000-8000-000000000001, pod: team-a/llm-0, manufacturer: ascend,
       mode: sliced, accelerators: [NPU-0]}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpustack.accelerators.plugins.module_utils.gpustack import (
    MANUFACTURERS,
    gpustack_api,
    make_request,
    require_gpustack,
)


def absent_message(req, manufacturer, mode, state):
    """Why nothing was read or set: no accelerator of ``manufacturer`` was detected under the host root,
    with what the PCI bus shows when it shows some of its accelerators the driver did not name."""
    from gpustack_operator.discovery.detect import incomplete_reason

    msg = "driver_mode: no %s accelerator was detected on this node (host root %s), so %s was not %s" % (
        manufacturer,
        req.host_root,
        mode,
        state,  # read, enabled or disabled
    )
    cover = gpustack_api.run_detect(req, interfaces=False).coverage.get(manufacturer)
    if cover is not None and (cover.short or cover.dropped):
        msg += "; " + incomplete_reason(cover)
    return msg


def main():
    module = AnsibleModule(
        argument_spec=dict(
            manufacturer=dict(type="str", required=True, choices=MANUFACTURERS),
            mode=dict(type="str", required=True),
            accelerators=dict(type="list", elements="str", default=["all"]),
            state=dict(type="str", choices=["enabled", "disabled", "read"], default="read"),
            force=dict(type="bool", default=False),
            absent=dict(type="str", choices=["warn", "fail"], default="warn"),
            host_root=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    require_gpustack(module)
    from gpustack_operator.host import HostRootError
    from gpustack_operator.manufacturers.base import ModeError
    from gpustack_operator.manufacturers.modes import ModeUsageError, SlicesHeldError

    p = module.params
    req = make_request(module, [p["manufacturer"]])
    manufacturer, mode, state = p["manufacturer"], p["mode"], p["state"]
    try:
        states = gpustack_api.read_modes(req, manufacturer, mode)
        modes = [s.model_dump(exclude_none=True) for s in states]
        if not states:
            msg = absent_message(req, manufacturer, mode, state)
            if p["absent"] == "fail":
                module.fail_json(msg=msg, modes=[])
            module.warn(msg)
            module.exit_json(changed=False, modes=[])
        if state == "read":
            module.exit_json(changed=False, modes=modes)
        wanted = state == "enabled"
        selected = gpustack_api.select_modes(states, p["accelerators"])
        changes = gpustack_api.set_mode(
            req,
            manufacturer,
            mode,
            [s.accelerator for s in selected],
            wanted,
            dry_run=module.check_mode,
            force=p["force"],
        )
    except SlicesHeldError as exc:
        module.fail_json(msg=str(exc), modes=modes, holders=[r.model_dump(exclude_none=True) for r in exc.held])
    except ModeUsageError as exc:
        module.fail_json(msg=str(exc))
    except (ModeError, HostRootError) as exc:
        module.fail_json(msg=str(exc))
    result = dict(
        changed=any(c.changed for c in changes),
        modes=modes,
        changes=[c.model_dump(exclude_none=True) for c in changes],
    )
    if module._diff:
        result["diff"] = dict(
            before="".join("%s: %s\n" % (c.accelerator, c.before) for c in changes),
            after="".join("%s: %s\n" % (c.accelerator, c.after) for c in changes),
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
