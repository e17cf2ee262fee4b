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
    "install it on this host with the gpustack.accelerators.install role (it installs the wheel this "
    "collection carries into its own venv and points ansible_python_interpreter at it), "
    "or point ansible_python_interpreter at an environment that has it"
)

MANUFACTURERS = ["amd", "ascend", "cambricon", "hygon", "iluvatar", "metax", "mthreads", "nvidia", "thead"]

# No choices for manufacturers: they cannot say "!thead" or "all". The one rule is the package's
# select_subset (gather_subset-style), applied by selected_manufacturers().
COMMON_ARGS = dict(
    host_root=dict(type="path"),
    manufacturers=dict(type="list", elements="str"),
)


def require_gpustack(module):
    """Fail the task with the install hint when the package is not importable on the target."""
    if not HAS_GPUSTACK:
        module.fail_json(
            msg=missing_required_lib("gpustack-operator", reason=INSTALL_HINT),
            exception=GPUSTACK_IMPORT_ERROR,
        )


def selected_manufacturers(module, option="manufacturers"):
    """The option's manufacturers, ``gather_subset``-style (names, ``!name`` to exclude, ``all``;
    unset or empty is all nine), by the package's own rule (``select_subset``); a name it does not
    know, or a selection that leaves none, fails the task naming the option and the choices."""
    from gpustack_operator.manufacturers import UnknownManufacturerError, select_subset

    try:
        return select_subset(module.params.get(option))
    except UnknownManufacturerError as exc:
        module.fail_json(msg="%s: %s" % (option, exc))


ROOT_REMEDY = "name the directory the node's root is mounted at (e.g. / or /host)"


def require_path(module, option, remedy=ROOT_REMEDY):
    """Refuse an empty or blank value of a path option that is set (``None`` stays unset), or one
    holding a NUL byte, naming the option and ``remedy``: a blank path is never read as ``/`` or as
    the current directory."""
    value = module.params.get(option)
    if value is None:
        return
    if not value.strip():
        module.fail_json(msg="%s is empty: %s" % (option, remedy))
    if "\0" in value:
        module.fail_json(msg="%s %r holds a NUL byte, so it names no path" % (option, value))


def make_request(module, manufacturers=None, root_option="host_root"):
    """Validate host_root/manufacturers the way the CLI does; fail the task on a bad value.

    A module runs on the node itself, so the node view its detect pass reads and the node's root are
    one directory: ``host_root`` (``root_option`` names another option that may relocate the view).
    An empty or blank path is refused, never read as ``/``. ``manufacturers`` (already selected)
    defaults to the module's own option, through :func:`selected_manufacturers`."""
    from gpustack_operator.manufacturers import UnknownManufacturerError
    from gpustack_operator.settings import SettingsError

    require_path(module, "host_root")
    if root_option != "host_root":
        require_path(
            module, root_option, "name the node view the detect pass reads, or leave it unset to read host_root"
        )
    wanted = manufacturers if manufacturers is not None else selected_manufacturers(module)
    try:
        root = module.params.get(root_option)
        if root is None and root_option != "host_root":
            root = module.params.get("host_root")
        if root is None:
            root = gpustack_api.default_host_root()
        return gpustack_api.make_request(root, wanted)
    except (UnknownManufacturerError, SettingsError, ValueError) as exc:
        module.fail_json(msg=str(exc))
