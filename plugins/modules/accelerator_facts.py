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
  - Two views made for playbooks come with it - C(manufacturers), one entry per manufacturer asked
    about with its C(state) (V(detected), V(none) or V(unmeasured) with the C(reason)), accelerator
    count and group ids; and C(accelerators), one flat entry per accelerator.
  - A manufacturer whose detection could not measure is named in
    C(gpustack_accelerators.node.unmeasured) and is C(unmeasured) in C(manufacturers); it is never
    reported as having no accelerators.
  - Each manufacturer's vendor library is loaded in a child process of its own, so a library that kills
    the process loading it (a truncated file faulting with SIGBUS, a SIGSEGV in the vendor's code) leaves
    only that manufacturer C(unmeasured), the reason naming the library and the signal; the task still
    returns the facts.
extends_documentation_fragment:
  - gpustack.accelerators.node
  - gpustack.accelerators.node.manufacturers
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

- name: Everything but T-Head and Cambricon (gather_subset-style exclusion)
  gpustack.accelerators.accelerator_facts:
    manufacturers: ["!thead", "!cambricon"]

- name: Show the node key
  ansible.builtin.debug:
    msg: "{{ gpustack_accelerators.node.generalNodeKey }}"

- name: Fail a node whose NVIDIA detection could not measure (never read as "no GPUs")
  ansible.builtin.assert:
    that: gpustack_accelerators.manufacturers.nvidia.state != 'unmeasured'
    fail_msg: "{{ gpustack_accelerators.manufacturers.nvidia.reason | default('') }}"

- name: The accelerators on NUMA node 0
  ansible.builtin.debug:
    msg: "{{ gpustack_accelerators.accelerators | selectattr('numa', 'equalto', '0') | map(attribute='id') }}"
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
            root (the node view read), cpu (vendor_id, family, id, name, cores, threads, arch), generalNodeKey,
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
        interfaces:
          description: >-
            The network inventory (Devices spec interfaces) - name, PCI coordinates, NUMA, MTU,
            SR-IOV VFs under their PF, RDMA devices with a link verdict. Absent when the inventory
            could not be taken (node.interfacesError says why).
          type: list
          elements: dict
          returned: when the inventory was taken
        manufacturers:
          description: >-
            Per manufacturer asked about - state (detected, none, incomplete, unmeasured), accelerators
            (the count the driver named), pci (the count of its accelerators on the PCI bus; null when
            the bus was not consulted), groups (ids), reason (when incomplete or unmeasured). State
            incomplete is "the bus shows N, the driver answers M" (a driver not loaded, a library not
            mounted, a card fallen off the driver, accelerators it could not identify) and adds missing,
            unanswered (bus addresses), driver (what the library said) and dropped.
          type: dict
          returned: always
          sample:
            nvidia: {state: detected, accelerators: 8, pci: 8, groups: [h100-80gb-hbm3]}
            amd: {state: none, accelerators: 0, pci: 0, groups: []}
        accelerators:
          description: >-
            One entry per accelerator - id, manufacturer, group, name, index, memory (MiB), pciBusId,
            numa, logicalSlices.
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
    module = AnsibleModule(argument_spec=dict(COMMON_ARGS), supports_check_mode=True)
    require_gpustack(module)
    from gpustack_operator.host import HostRootError

    req = make_request(module)
    try:
        doc = gpustack_api.facts(req)
    except HostRootError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ansible_facts={"gpustack_accelerators": doc})


if __name__ == "__main__":
    main()
