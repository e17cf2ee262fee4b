# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The options every module reading a node shares (host_root) and what they all require."""


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options:
  host_root:
    description:
      - Directory the node's root filesystem is reached at; every read and write resolves inside it,
        symlinks included (absolute links are re-rooted, nothing escapes it).
      - Defaults to the host's C(gpustack_host_root) inventory variable when set, else C(/host)
        when the node's root is mounted there (the container shape), otherwise C(/).
      - The module runs on the node, so this one root is both what the detect pass reads and where the
        node's own CLIs and files are. An empty or blank value is refused.
    type: path
requirements:
  - the C(gpustack-operator) Python package importable by the target's Python (the
    C(gpustack.accelerators.install) role puts it there; a missing package fails the task with the
    install hint)
"""
