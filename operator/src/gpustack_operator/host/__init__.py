"""Everything that reads the node goes through a host root (see :mod:`.root`)."""

from gpustack_operator.host.root import HostPathError, HostRoot, HostRootError

__all__ = ["HostPathError", "HostRoot", "HostRootError"]
