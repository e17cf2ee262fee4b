"""Moore Threads: what the node is read with and what an allocation is answered with (imported only
when a pass needs this manufacturer)."""

from gpustack_operator.manufacturers.base import Backend
from gpustack_operator.manufacturers.mthreads.detect import detect, monitor
from gpustack_operator.manufacturers.mthreads.respond import RESPONDER

BACKEND = Backend(detect=detect, monitor=monitor, responder=RESPONDER)
