"""Cambricon: what the node is read with (imported only when a pass needs this manufacturer)."""

from gpustack_operator.manufacturers.base import Backend
from gpustack_operator.manufacturers.cambricon.detect import detect, monitor
from gpustack_operator.manufacturers.cambricon.modes import SMLU
from gpustack_operator.manufacturers.cambricon.respond import RESPONDER

BACKEND = Backend(detect=detect, monitor=monitor, modes={SMLU.mode: SMLU}, responder=RESPONDER)
