# Copyright: GPUStack operator team
# Apache License 2.0 (see LICENSE or https://www.apache.org/licenses/LICENSE-2.0)
"""Shared glue for the gpustack.accelerators modules: importing the package, common options."""

import os
import traceback

from ansible.module_utils.basic import missing_required_lib

# The module is its own process: skip pydantic's plugin discovery (a scan of every installed
# distribution's entry points, 50-120 ms of each task next to Ansible) unless the host asked for it.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

try:
    from gpustack_operator import api as gpustack_api

    HAS_GPUSTACK = True
    GPUSTACK_IMPORT_ERROR = None
except ImportError:
    gpustack_api = None
    HAS_GPUSTACK = False
    GPUSTACK_IMPORT_ERROR = traceback.format_exc()

INSTALL_HINT = (
    "install it into the Python interpreter Ansible uses on this host "
    "(pip install gpustack-operator, or the gpustack.accelerators.install role), "
    "or point ansible_python_interpreter at an environment that has it"
)

MANUFACTURERS = ["amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead"]

COMMON_ARGS = dict(
    host_root=dict(type="path"),
    manufacturers=dict(type="list", elements="str", choices=MANUFACTURERS),
)


def require_gpustack(module):
    """Fail the task with the install hint when the package is not importable on the target."""
    if not HAS_GPUSTACK:
        module.fail_json(
            msg=missing_required_lib("gpustack-operator", reason=INSTALL_HINT),
            exception=GPUSTACK_IMPORT_ERROR,
        )


def make_request(module, manufacturers=None, root_option="host_root"):
    """Validate host_root/manufacturers the way the CLI does; fail the task on a bad value.

    A module runs on the node itself, so the node view its detect pass reads and the node's root are
    one directory: ``host_root`` (``root_option`` names another option that may relocate the view).
    An empty or blank path is refused, never read as ``/``."""
    from gpustack_operator.manufacturers import UnknownManufacturerError
    from gpustack_operator.settings import SettingsError

    try:
        wanted = manufacturers if manufacturers is not None else module.params.get("manufacturers")
        root = module.params.get(root_option)
        if root is None and root_option != "host_root":
            root = module.params.get("host_root")
        gpustack_api.check_root(module.params.get("host_root"), "host_root")
        if root is None:
            root = gpustack_api.default_host_root()
        return gpustack_api.make_request(root, wanted)
    except (UnknownManufacturerError, SettingsError, ValueError) as exc:
        module.fail_json(msg=str(exc))
