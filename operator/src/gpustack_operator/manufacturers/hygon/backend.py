from gpustack_operator.manufacturers.base import Backend
from gpustack_operator.manufacturers.hygon.detect import detect, monitor
from gpustack_operator.manufacturers.hygon.partition import partitioner
from gpustack_operator.manufacturers.hygon.respond import RESPONDER

BACKEND = Backend(detect=detect, monitor=monitor, responder=RESPONDER, partitioner=partitioner)
