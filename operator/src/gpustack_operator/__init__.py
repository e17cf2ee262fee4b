"""GPUStack operator (Python edition): accelerator discovery, allocation and preflight.

The package holds every piece of domain logic; the Ansible collection at the repository root is a
thin adapter over the public functions here (see docs/architecture.md).
"""

__version__ = "0.1.0"
