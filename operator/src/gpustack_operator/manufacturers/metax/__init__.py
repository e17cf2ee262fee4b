"""MetaX — everything this operator knows about the manufacturer lives in this folder.

Detection and the usage monitor read MXSML (``detect.py`` over the ctypes binding ``mxsml.py``); the
read-only ``sgpu`` driver mode reads the sGPU sysfs registry (``modes.py``).
"""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.metax.identity import IDENTITY

# detection, monitor and modes live in .backend, imported on first use (base.Manufacturer)
MANUFACTURER = Manufacturer(identity=IDENTITY, backend=f"{__name__}.backend")
