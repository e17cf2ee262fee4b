"""Hygon — everything this operator knows about the manufacturer lives in this folder."""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.hygon.identity import IDENTITY

# detection, monitor and modes live in .backend, imported on first use (base.Manufacturer)
MANUFACTURER = Manufacturer(identity=IDENTITY, backend=f"{__name__}.backend")
