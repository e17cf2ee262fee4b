"""Moved to :mod:`gpustack_operator.node.cpu` (below the manufacturers); kept while callers move."""

from gpustack_operator.node.cpu import *  # noqa: F403
