"""AMD — everything this operator knows about the manufacturer lives in this folder."""

from gpustack_operator.manufacturers.amd.detect import detect, monitor
from gpustack_operator.manufacturers.amd.hostcli import HOST_CLI
from gpustack_operator.manufacturers.amd.identity import IDENTITY
from gpustack_operator.manufacturers.base import Manufacturer

MANUFACTURER = Manufacturer(identity=IDENTITY, detect=detect, monitor=monitor, host_cli=HOST_CLI)
