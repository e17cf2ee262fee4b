"""Moved to :mod:`gpustack_operator.node.naming` (below the manufacturers); kept while callers move."""

from gpustack_operator.node.naming import *  # noqa: F403
