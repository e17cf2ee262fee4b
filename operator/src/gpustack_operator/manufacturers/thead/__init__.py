"""T-Head — everything this operator knows about the manufacturer lives in this folder.

Detection (with the MIG-named partition profiles) and the usage monitor read HGML (``detect.py`` over
the ctypes binding ``hgml.py``).
"""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.thead.detect import detect, monitor
from gpustack_operator.manufacturers.thead.identity import IDENTITY

MANUFACTURER = Manufacturer(identity=IDENTITY, detect=detect, monitor=monitor)
