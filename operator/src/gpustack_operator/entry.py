"""The ``gpustack-operator`` console script: process-wide choices made before the package loads.

pydantic looks for plugins at the first model class it builds by scanning the entry points of every
distribution installed beside it -- 50-120 ms in an environment that also holds Ansible, paid by every
CLI call for plugins this program never uses. The command is its own process, so it turns the scan off
unless the caller set ``PYDANTIC_DISABLE_PLUGINS`` (set it empty to have plugins loaded again).
"""

from __future__ import annotations

import os


def main() -> int:
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    from gpustack_operator.cli import main as cli_main  # noqa: PLC0415 -- after the environment is set

    return cli_main()
