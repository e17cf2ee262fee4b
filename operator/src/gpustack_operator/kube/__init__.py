"""The API-server edge: the only package that talks to the Kubernetes API server (through the
official ``kubernetes`` client). It is imported by ``device-manager serve``, ``worker`` and, on the
controller, the ``cluster_verify`` module (``kube/clusterview.py``); detect, preflight and the per-host
Ansible modules never load the client.

Importing it keeps the client lean. ``kubernetes/__init__.py`` imports every subpackage the library
has -- the dynamic client, watch, stream (websocket), leader election, informers, and ``config``,
whose kubeconfig loader pulls in requests, oauthlib and google-auth -- some 700 modules and ~30 MiB of
a Device Manager whose budget is 80 MiB, to use one typed API class. So, unless the process imported
``kubernetes`` already, the packages ``kubernetes`` and ``kubernetes.config`` are registered here as
plain package shells (their ``__path__``, without running their ``__init__``): ``import
kubernetes.client`` then loads the client alone (its models load on first use), and
``kubernetes.config.incluster_config`` its own two modules. The kubeconfig loader is imported only when
a kubeconfig is used (``kube/pods.py``).
"""

from __future__ import annotations

import importlib.util
import sys
import types


def _package_shell(name: str) -> None:
    """Register ``name`` as a package whose submodules import without its ``__init__`` running."""
    if name in sys.modules:
        return
    spec = importlib.util.find_spec(name)
    if spec is None or spec.submodule_search_locations is None:
        return  # not installed: the import that needs it names the missing package
    shell = types.ModuleType(name, f"{name} (package shell: see gpustack_operator.kube)")
    shell.__path__ = list(spec.submodule_search_locations)
    shell.__package__ = name
    shell.__spec__ = spec
    sys.modules[name] = shell


_package_shell("kubernetes")
_package_shell("kubernetes.config")
