"""T-Head — everything this operator knows about the manufacturer lives in this folder.

Detection (with the MIG-named partition profiles) and the usage monitor read HGML (``detect.py`` over
the ctypes binding ``hgml.py``).
"""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.thead.identity import IDENTITY

# detection, monitor and modes live in .backend, imported on first use (base.Manufacturer)
MANUFACTURER = Manufacturer(identity=IDENTITY, backend=f"{__name__}.backend")
