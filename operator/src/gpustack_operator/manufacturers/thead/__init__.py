"""T-Head — everything this operator knows about the manufacturer lives in this folder."""

from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.pcibackend import detect_from_pci
from gpustack_operator.manufacturers.thead.identity import IDENTITY

MANUFACTURER = Manufacturer(identity=IDENTITY, detect=detect_from_pci)
