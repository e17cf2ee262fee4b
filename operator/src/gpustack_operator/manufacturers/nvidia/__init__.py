"""NVIDIA — everything this operator knows about the manufacturer lives in this folder.

``detect`` / ``monitor`` read NVML (``nvml.py``, the nvidia-ml-py binding bound to the node's own
``libnvidia-ml.so.1``); ``modes`` holds the MIG driver mode; ``hostcli`` the preflight cross-check.
"""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.nvidia.detect import detect
from gpustack_operator.manufacturers.nvidia.hostcli import HOST_CLI
from gpustack_operator.manufacturers.nvidia.identity import IDENTITY
from gpustack_operator.manufacturers.nvidia.modes import MIG_MODE
from gpustack_operator.manufacturers.nvidia.monitor import monitor

MANUFACTURER = Manufacturer(
    identity=IDENTITY,
    detect=detect,
    monitor=monitor,
    modes={MIG_MODE.mode: MIG_MODE},
    host_cli=HOST_CLI,
)
