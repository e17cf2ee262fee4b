"""AMD — everything this operator knows about the manufacturer lives in this folder."""

from gpustack_operator.manufacturers.amd.hostcli import HOST_CLI
from gpustack_operator.manufacturers.amd.identity import IDENTITY
from gpustack_operator.manufacturers.base import Manufacturer

# detection, monitor and modes live in .backend, imported on first use (base.Manufacturer)
MANUFACTURER = Manufacturer(identity=IDENTITY, backend=f"{__name__}.backend", host_cli=HOST_CLI)
