"""Moved to :mod:`gpustack_operator.node.pci` (below the manufacturers); kept while callers move."""

from gpustack_operator.node.pci import *  # noqa: F403
