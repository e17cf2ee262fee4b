"""Iluvatar — everything this operator knows about the manufacturer lives in this folder.

Detection and the usage monitor read IXML (``detect.py`` over the ctypes binding ``ixml.py``).
"""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.iluvatar.detect import detect, monitor
from gpustack_operator.manufacturers.iluvatar.identity import IDENTITY

MANUFACTURER = Manufacturer(identity=IDENTITY, detect=detect, monitor=monitor)
