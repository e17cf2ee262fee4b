"""MThreads — everything this operator knows about the manufacturer lives in this folder.

Detection and the usage monitor read MTML (``detect.py`` over the ctypes binding ``mtml.py``).
"""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.mthreads.identity import IDENTITY

# detection, monitor and modes live in .backend, imported on first use (base.Manufacturer)
MANUFACTURER = Manufacturer(identity=IDENTITY, backend=f"{__name__}.backend")
