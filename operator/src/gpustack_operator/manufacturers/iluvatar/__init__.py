"""Iluvatar — everything this operator knows about the manufacturer lives in this folder.

Detection and the usage monitor read IXML (``detect.py`` over the ctypes binding ``ixml.py``).
"""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.iluvatar.identity import IDENTITY

# detection, monitor and modes live in .backend, imported on first use (base.Manufacturer)
MANUFACTURER = Manufacturer(identity=IDENTITY, backend=f"{__name__}.backend")
