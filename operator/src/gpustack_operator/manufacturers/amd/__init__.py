"""AMD — everything this operator knows about the manufacturer lives in this folder."""

from gpustack_operator.manufacturers.amd.identity import IDENTITY
from gpustack_operator.manufacturers.base import Manufacturer
from gpustack_operator.manufacturers.pcibackend import detect_from_pci

MANUFACTURER = Manufacturer(identity=IDENTITY, detect=detect_from_pci)
