"""GPUStack operator (Python edition): accelerator discovery, allocation and preflight.

The package holds every piece of domain logic; the Ansible collection at the repository root is a
thin adapter over the public functions here (see docs/architecture.md).
"""

from gpustack_operator.pydantic_plugins import stand_in_loader as _stand_in_loader

__version__ = "0.1.0"

# Before any model class is built: with pydantic's plugins turned off (PYDANTIC_DISABLE_PLUGINS, which
# the Ansible modules set before importing the package), its plugin loader's ~20 ms import is never
# paid. The console script sets the variable after this ran, and stands in itself (entry.py).
_stand_in_loader()
