"""Cambricon — everything this operator knows about the manufacturer lives in this folder.

Detection and the usage monitor read CNDev (``detect.py`` over the ctypes binding ``cndev.py``); the
``smlu`` driver mode reads and sets sMLU mode (``modes.py``).
"""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.cambricon.identity import IDENTITY

# detection, monitor and modes live in .backend, imported on first use (base.Manufacturer)
MANUFACTURER = Manufacturer(identity=IDENTITY, backend=f"{__name__}.backend")
