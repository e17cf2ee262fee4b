#!/usr/bin/python
# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)


DOCUMENTATION = r"""
---
module: accelerator_facts
short_description: Detect the accelerators, CPU identity and node labels of a host
version_added: "0.1.0"
description:
  - Runs one detection pass of the GPUStack Device Manager on the target (a pure read) and returns
    it as facts under C(gpustack_accelerators).
  - The facts carry the CPU identity, the general (CPU) node key, the labels the node would carry
    (Node Feature Discovery's prediction with the Device Manager's accelerator labels on top) and
    the Devices spec groups, exactly as C(gpustack-operator device-manager detect) prints them.
  - A manufacturer whose detection could not measure is named in
    C(gpustack_accelerators.node.unmeasured); it is never reported as having no accelerators.
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
      - Manufacturers to detect; defaults to the host's C(gpustack_manufacturers) inventory
        variable when set, else all nine.
    type: list
    elements: str
    choices: [amd, ascend, cambricon, hygon, iluvatar, metax, mthreads, nvidia, thead]
attributes:
  check_mode:
    support: full
    description: A pure read; it runs unchanged in check mode.
  diff_mode:
    support: none
    description: Nothing on the host changes, so there is nothing to diff.
  facts:
    support: full
    description: Returns C(gpustack_accelerators) under C(ansible_facts).
  platform:
    support: full
    platforms: posix
    description: Linux nodes (reads sysfs and /proc through the host root).
author:
  - GPUStack operator team (@gpustack)
"""

EXAMPLES = r"""
- name: Detect accelerators on every node
  gpustack.accelerators.accelerator_facts:

- name: Only NVIDIA and AMD, reading a node root mounted elsewhere
  gpustack.accelerators.accelerator_facts:
    host_root: /host
    manufacturers: [nvidia, amd]

- name: Show the node key
  ansible.builtin.debug:
    msg: "{{ gpustack_accelerators.node.generalNodeKey }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    gpustack_accelerators:
      description: The detection document.
      type: dict
      returned: always
      contains:
        node:
          description: >-
            hostRoot, cpu (vendor_id, family, id, name, cores, threads, arch), generalNodeKey,
            labels, and unmeasured (manufacturer -> reason) when a detector could not measure.
          type: dict
          returned: always
          sample:
            generalNodeKey: intel-xeon-platinum-8480
            labels:
              feature.node.kubernetes.io/pci-10de.present: "true"
        groups:
          description: The Devices spec groups (id, manufacturer, name, memory, accelerators, ...).
          type: list
          elements: dict
          returned: always
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
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    require_gpustack(module)
    req = make_request(module)
    from gpustack_operator.host import HostRootError

    try:
        doc = gpustack_api.detect(req)
    except HostRootError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ansible_facts={"gpustack_accelerators": doc})


if __name__ == "__main__":
    main()
