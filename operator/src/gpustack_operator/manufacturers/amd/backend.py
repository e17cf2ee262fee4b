from gpustack_operator.manufacturers.amd.detect import detect, monitor
from gpustack_operator.manufacturers.amd.respond import RESPONDER
from gpustack_operator.manufacturers.base import Backend

BACKEND = Backend(detect=detect, monitor=monitor, responder=RESPONDER)
