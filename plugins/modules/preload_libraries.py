#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: preload_libraries
short_description: Stage the GPUStack preload libraries a node needs under /var/lib/gpustack/operator/lib
version_added: "0.1.0"
description:
  - Does on a node what the Device Manager's init container does - copies the slicing preload
    libraries onto the host, under C(<host_root>/var/lib/gpustack/operator/lib), so the allocator can
    mount them into sliced containers.
  - Runs one detection pass on the target to decide which parts of the tree the node needs -
    C(nvidia/cuda-<major>) (HAMi-core per CUDA major, major 12 when the runtime version is unknown),
    C(ascend/cann-<major>-<family>) (vcann-rt, major 8 when unknown; an Ascend group with no
    detected SoC family gets nothing), C(amd), C(iluvatar) (the CUDA 12 HAMi-core build, one flat
    directory) and C(thead). AMD and T-Head get nothing on arm64 (no shim is built there).
    Cambricon, Hygon, MetaX and MThreads slice without a preload library. Every group that gets
    nothing is listed under RV(not_staged) with the reason; so is a manufacturer that could not be
    measured.
  - Idempotent by checksum - a subtree whose files (sha256), symlinks and modes already match the
    source is not touched. A subtree that differs is rebuilt in a hidden directory beside it and
    swapped in with a rename, so a container never sees it half-written. Files the source no
    longer has are removed from that subtree.
  - Modes are the source's without set-id/sticky bits and without group/other write (C(0664) is
    staged C(0644)), from a directory and from a tarball alike, so both routes stage the same tree.
  - Never removes the tree or a subtree the node does not need, never writes to
    C(/var/lib/gpustack/operator/pods), and refuses - naming the path - a symlink anywhere on the
    destination path (C(var), C(lib), C(gpustack), C(operator), C(lib), the subtree) or one inside
    the subtree pointing out of it.
  - O(manufacturers) restricts staging to those manufacturers (detection asks only about them).
options:
  src:
    description:
      - The preload-library tree, laid out as C(<manufacturer>[/<runtime-subdir>]/...) (the
        operator image's C(lib) directory) - a directory, or a C(.tar) / C(.tar.gz) / C(.tar.xz)
        archive of one whose members are relative to that root.
      - An archive is read member by member and never extracted to plan, so check mode writes
        nothing anywhere (C($TMPDIR) included). An absolute name, a C(..) component, a member
        placed through a symlink or a file, a symlink leaving the archive (followed link by link
        through the archive's own members, never by C(realpath)), a hard link to anything but an
        earlier file, a device, pipe, socket or sparse member fails the task, naming the member.
      - Sizes are read from the headers before anything is read - one file over 512 MiB, or the
        whole over 2 GiB or 10,000 entries (every copy counted - a hard link, a link out of its
        subtree staged as its file), fails the task naming the file, its size and the cap.
      - A subtree the node needs that the source does not carry fails the task, naming it. An empty or
        blank value is refused.
    type: path
    required: true
  remote_src:
    description:
      - V(true) - O(src) is a path on the target.
      - V(false) - O(src) is on the controller (found like other C(files/) sources); it is copied
        to the task's temporary directory on the target first (a directory is packed into a tar
        archive for the trip) and removed afterwards.
      - Unlike M(ansible.builtin.copy), the default is the target, because on a node the tree
        usually comes from the operator image unpacked there.
    type: bool
    default: true
  state:
    description:
      - V(present) - the subtrees the node needs match the source. (Staged libraries are never
        removed; the Device Manager keeps using them.)
    type: str
    choices: [present]
    default: present
extends_documentation_fragment:
  - gpustack.accelerators.node
  - gpustack.accelerators.node.manufacturers
attributes:
  check_mode:
    support: full
    description: Plans only - reports what would be added, replaced and removed; writes nothing, a tarball source included (it is read, never extracted).
  diff_mode:
    support: full
    description: One diff per subtree that changes - its listing (path, mode, sha256 or link target) before and after.
  platform:
    support: full
    platforms: posix
    description: Linux nodes (detection reads sysfs and /proc through the host root; staging uses O_NOFOLLOW and dir fds).
notes:
  - Run as root on a node; the staged files belong to the user the module runs as.
  - The allocator picks C(cuda-<major>) / C(cann-<major>-<family>) from the first allocated
    accelerator (one driver stack per node), so a node needs exactly one of each.
seealso:
  - module: gpustack.accelerators.accelerator_facts
  - module: gpustack.accelerators.preflight
author:
  - GPUStack operator team (@gpustack)
"""

EXAMPLES = r"""
- name: Stage from the lib tree unpacked on each node
  gpustack.accelerators.preload_libraries:
    src: /opt/gpustack/lib

- name: Ship a tarball from the controller and stage it
  gpustack.accelerators.preload_libraries:
    src: files/gpustack-preload-lib.tar.gz
    remote_src: false

- name: Preview what would change (also run the play with --check --diff to see the listings)
  gpustack.accelerators.preload_libraries:
    src: /opt/gpustack/lib
  check_mode: true
  register: preload

- name: Only NVIDIA, on a node whose root is mounted at /host
  gpustack.accelerators.preload_libraries:
    src: /opt/gpustack/lib
    host_root: /host
    manufacturers: [nvidia]

- name: Everything detected but T-Head
  gpustack.accelerators.preload_libraries:
    src: /opt/gpustack/lib
    manufacturers: ["!thead"]
"""

RETURN = r"""
destination:
  description: The lib tree the subtrees are staged under.
  returned: always
  type: str
  sample: /var/lib/gpustack/operator/lib
staged:
  description: The subtrees this node needs, now in place (in check mode, that would be in place).
  returned: always
  type: list
  elements: str
  sample: [nvidia/cuda-12]
updated:
  description: The subtrees that were (in check mode, would be) written.
  returned: always
  type: list
  elements: str
  sample: [nvidia/cuda-12]
not_staged:
  description:
    - Detected groups that get no library here, and manufacturers that could not be measured.
    - (Not C(skipped), which Ansible reserves for skipped tasks.)
  returned: always
  type: list
  elements: dict
  contains:
    manufacturer:
      description: The manufacturer.
      type: str
    group:
      description: The Devices group id; absent for a manufacturer that could not be measured.
      type: str
    reason:
      description: Why nothing is staged for it.
      type: str
  sample:
    - manufacturer: ascend
      group: ascend-910b
      reason: "no Ascend SoC family detected: the library directory is cann-<major>-<family>, so none is staged"
assumptions:
  description: Defaults taken for groups whose runtime version is unknown (the major used).
  returned: always
  type: list
  elements: str
  sample: ["nvidia group nvidia-h100-80gb-hbm3: CUDA version unknown; assuming major 12"]
added:
  description: Files, directories (ending in C(/)) and links that were (would be) added, as C(<subtree>/<path>).
  returned: always
  type: list
  elements: str
  sample: [amd/libvrocm.so, amd/rocm-monitor]
replaced:
  description: Entries whose content, mode or link target changed; a bare subtree name means its directory mode.
  returned: always
  type: list
  elements: str
removed:
  description: Entries in a staged subtree that the source no longer has.
  returned: always
  type: list
  elements: str
"""

from pathlib import Path

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.gpustack.accelerators.plugins.module_utils.gpustack import (
    COMMON_ARGS,
    gpustack_api,
    make_request,
    require_gpustack,
    require_path,
)

SRC_REMEDY = "name the preload-library tree, a directory or a .tar / .tar.gz / .tar.xz archive of one"


def main():
    argument_spec = dict(COMMON_ARGS)
    argument_spec["src"] = dict(type="path", required=True)
    argument_spec["remote_src"] = dict(type="bool", default=True)
    argument_spec["state"] = dict(type="str", choices=["present"], default="present")
    module = AnsibleModule(argument_spec=argument_spec, supports_check_mode=True)
    require_gpustack(module)
    from gpustack_operator.host import HostRootError
    from gpustack_operator.preload import StageError, stage_node

    require_path(module, "src", SRC_REMEDY)
    req = make_request(module)
    try:
        detection = gpustack_api.run_detect(req, interfaces=False)
        outcome = stage_node(detection, Path(module.params["src"]), Path(req.host_root), check=module.check_mode)
    except (HostRootError, StageError) as exc:
        module.fail_json(msg=str(exc))
    result = outcome.model_dump(mode="json", exclude={"diff"}, exclude_none=True)
    if module._diff:
        result["diff"] = outcome.diff
    module.exit_json(**result)


if __name__ == "__main__":
    main()
