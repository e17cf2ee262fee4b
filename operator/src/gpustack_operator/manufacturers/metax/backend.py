from gpustack_operator.manufacturers.base import Backend
from gpustack_operator.manufacturers.metax.detect import detect, monitor
from gpustack_operator.manufacturers.metax.modes import SGPU
from gpustack_operator.manufacturers.metax.respond import RESPONDER

BACKEND = Backend(detect=detect, monitor=monitor, modes={SGPU.mode: SGPU}, responder=RESPONDER)
