"""Hygon — everything this operator knows about the manufacturer lives in this folder."""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.hygon.detect import detect, monitor
from gpustack_operator.manufacturers.hygon.identity import IDENTITY

MANUFACTURER = Manufacturer(identity=IDENTITY, detect=detect, monitor=monitor)
