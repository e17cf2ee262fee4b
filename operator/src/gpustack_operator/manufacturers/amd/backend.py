"""AMD: what the node is read with (imported only when a pass needs this manufacturer)."""

from gpustack_operator.manufacturers.amd.detect import detect, monitor
from gpustack_operator.manufacturers.base import Backend

BACKEND = Backend(detect=detect, monitor=monitor)
