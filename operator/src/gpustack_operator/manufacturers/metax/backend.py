"""MetaX: what the node is read with (imported only when a pass needs this manufacturer)."""

from gpustack_operator.manufacturers.base import Backend
from gpustack_operator.manufacturers.metax.detect import detect, monitor
from gpustack_operator.manufacturers.metax.modes import SGPU

BACKEND = Backend(detect=detect, monitor=monitor, modes={SGPU.mode: SGPU})
