"""pydantic's plugin loader, stood in for while plugins are turned off.

At the first model class it builds, pydantic imports its plugin loader (``pydantic.plugin._loader``),
and that module imports ``importlib.metadata`` -- with ``email``, ``zipfile``, ``csv`` and more, about
20 ms of every CLI call and every Ansible module task -- only to answer "no plugins" when
``PYDANTIC_DISABLE_PLUGINS`` turns them all off, as the console script (``entry.py``) and the modules'
``module_utils`` do. :func:`stand_in_loader` puts a module in its place that gives that same answer
without the import. Whenever plugins are not turned off at the time pydantic asks (the variable changed
later in the process), the stand-in hands over to pydantic's own loader, which answers from then on.

Nothing is stood in when plugins are not turned off at the time of the call, or when pydantic's
loader is already imported.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Iterable

LOADER = "pydantic.plugin._loader"
OFF = ("__all__", "1", "true")  # the values pydantic's own get_plugins() reads as "no plugins at all"


class _StandIn(types.ModuleType):
    """``pydantic.plugin._loader`` as pydantic calls it: ``get_plugins()`` only."""

    def get_plugins(self) -> Iterable[object]:
        if os.environ.get("PYDANTIC_DISABLE_PLUGINS") in OFF:
            return ()
        if sys.modules.get(LOADER) is self:
            del sys.modules[LOADER]
        import importlib  # noqa: PLC0415 -- pydantic's own loader, from now on

        plugins: Iterable[object] = importlib.import_module(LOADER).get_plugins()
        return plugins


def stand_in_loader() -> bool:
    """Stand in for pydantic's plugin loader if plugins are turned off and it is not loaded yet;
    True when the stand-in is (now) in place."""
    if os.environ.get("PYDANTIC_DISABLE_PLUGINS") not in OFF:
        return False
    current = sys.modules.get(LOADER)
    if current is None:
        current = sys.modules[LOADER] = _StandIn(LOADER)
    return isinstance(current, _StandIn)
