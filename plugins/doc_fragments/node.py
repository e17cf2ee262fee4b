# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""The options every module reading a node shares (host_root) and what they all require; and the
one manufacturers syntax of every module that takes a list of them (``node.manufacturers``)."""


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

    # One syntax for every manufacturers list (the modules' option, the gpustack_manufacturers
    # inventory variable, the roles' *_manufacturers): the package's select_subset is the rule.
    MANUFACTURERS = r"""
options:
  manufacturers:
    description:
      - Which manufacturers the task asks about, C(gather_subset)-style - a name adds it, C(!name)
        removes it, C(all) adds all nine. Only exclusions (V(["!thead", "!cambricon"])) start from all
        nine; any addition starts from none (V([all, "!thead"]) is eight). Unset or empty is all nine.
      - Names, in any case, also comma-separated within one item - C(amd), C(ascend), C(cambricon),
        C(hygon), C(iluvatar), C(metax), C(mthreads), C(nvidia), C(thead). An unknown name, or a
        selection that leaves none, fails the task naming the choices.
      - Quote an exclusion in YAML (V("!thead")); a bare C(!) starts a YAML tag.
      - Defaults to the host's C(gpustack_manufacturers) inventory variable (same syntax) when set,
        else all nine.
    type: list
    elements: str
"""
