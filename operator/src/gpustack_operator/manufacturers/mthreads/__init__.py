"""MThreads — everything this operator knows about the manufacturer lives in this folder.

Detection and the usage monitor read MTML (``detect.py`` over the ctypes binding ``mtml.py``).
"""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.mthreads.detect import detect, monitor
from gpustack_operator.manufacturers.mthreads.identity import IDENTITY

MANUFACTURER = Manufacturer(identity=IDENTITY, detect=detect, monitor=monitor)
