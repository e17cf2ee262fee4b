"""Cambricon — everything this operator knows about the manufacturer lives in this folder.

Detection and the usage monitor read CNDev (``detect.py`` over the ctypes binding ``cndev.py``); the
``smlu`` driver mode reads and sets sMLU mode (``modes.py``).
"""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.cambricon.detect import detect, monitor
from gpustack_operator.manufacturers.cambricon.identity import IDENTITY
from gpustack_operator.manufacturers.cambricon.modes import SMLU

MANUFACTURER = Manufacturer(identity=IDENTITY, detect=detect, monitor=monitor, modes={SMLU.mode: SMLU})
