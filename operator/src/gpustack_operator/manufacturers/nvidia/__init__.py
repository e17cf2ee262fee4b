"""NVIDIA — everything this operator knows about the manufacturer lives in this folder.

``detect`` / ``monitor`` read NVML (``nvml.py``, the nvidia-ml-py binding bound to the node's own
``libnvidia-ml.so.1``); ``modes`` holds the MIG driver mode; ``hostcli`` the preflight cross-check.
"""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.nvidia.hostcli import HOST_CLI
from gpustack_operator.manufacturers.nvidia.identity import IDENTITY

# detection, monitor and modes live in .backend, imported on first use (base.Manufacturer)
MANUFACTURER = Manufacturer(identity=IDENTITY, backend=f"{__name__}.backend", host_cli=HOST_CLI)
