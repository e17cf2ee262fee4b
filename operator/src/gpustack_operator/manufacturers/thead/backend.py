"""T-Head: what the node is read with (imported only when a pass needs this manufacturer)."""

from gpustack_operator.manufacturers.base import Backend
from gpustack_operator.manufacturers.thead.detect import detect, monitor
from gpustack_operator.manufacturers.thead.partition import partitioner
from gpustack_operator.manufacturers.thead.respond import RESPONDER

BACKEND = Backend(detect=detect, monitor=monitor, responder=RESPONDER, partitioner=partitioner)
