"""Ascend: what the node is read with (imported only when a pass needs this manufacturer)."""

from gpustack_operator.manufacturers.ascend.detect import detect, monitor
from gpustack_operator.manufacturers.ascend.modes import CONTAINER_SHARE, MODE
from gpustack_operator.manufacturers.ascend.respond import RESPONDER
from gpustack_operator.manufacturers.base import Backend

BACKEND = Backend(detect=detect, monitor=monitor, modes={MODE: CONTAINER_SHARE}, responder=RESPONDER)
