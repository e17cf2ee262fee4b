"""Ascend — everything this operator knows about the manufacturer lives in this folder.

``identity.py`` (who it is), ``dcmi.py`` (ctypes bindings for libdcmi, both API generations),
``soc.py`` (chip name → SoC → family, logical slicing), ``versions.py`` (CANN / driver version files),
``detect.py`` (detector and monitor), ``modes.py`` (container-share), ``hostcli.py`` (npu-smi).
"""

from gpustack_operator.manufacturers.ascend.hostcli import HOST_CLI
from gpustack_operator.manufacturers.ascend.identity import IDENTITY
from gpustack_operator.manufacturers.base import Manufacturer

# detection, monitor and modes live in .backend, imported on first use (base.Manufacturer)
MANUFACTURER = Manufacturer(identity=IDENTITY, backend=f"{__name__}.backend", host_cli=HOST_CLI)
