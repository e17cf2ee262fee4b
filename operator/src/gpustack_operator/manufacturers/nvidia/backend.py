"""NVIDIA: what the node is read with and what an allocation is answered with (imported only when a
pass needs this manufacturer)."""

from gpustack_operator.manufacturers.base import Backend
from gpustack_operator.manufacturers.nvidia.detect import detect
from gpustack_operator.manufacturers.nvidia.modes import MIG_MODE
from gpustack_operator.manufacturers.nvidia.monitor import monitor
from gpustack_operator.manufacturers.nvidia.partition import partitioner
from gpustack_operator.manufacturers.nvidia.respond import RESPONDER

BACKEND = Backend(
    detect=detect,
    monitor=monitor,
    modes={MIG_MODE.mode: MIG_MODE},
    responder=RESPONDER,
    partitioner=partitioner,
)
