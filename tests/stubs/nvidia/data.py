"""Read and edit the NVML stand-in's data file (``<libdir>/libnvidia-ml.so.1.fixture``).

Only ever on a copy of a fixture node (``tests.conftest.copy_host``): the format is the one
fake_nvml.c documents — global ``key=value`` lines, then one ``[device]`` section per device.
"""

from __future__ import annotations

from pathlib import Path

LIB_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib/aarch64-linux-gnu", "usr/lib")


def library(root: Path) -> Path:
    """The stand-in library inside a fixture node."""
    for d in LIB_DIRS:
        path = root / d / "libnvidia-ml.so.1"
        if path.exists():
            return path
    raise FileNotFoundError(f"no libnvidia-ml.so.1 under {root}")


def data_file(root: Path) -> Path:
    return library(root).with_name("libnvidia-ml.so.1.fixture")


def _sections(lines: list[str]) -> list[tuple[int, int]]:
    """(start, end) line ranges: the global block first, then each ``[device]``."""
    starts = [i for i, line in enumerate(lines) if line.strip() == "[device]"]
    bounds = [0, *starts, len(lines)]
    return [(bounds[i], bounds[i + 1]) for i in range(len(bounds) - 1)]


def read_values(root: Path, device: int | None = None) -> dict[str, str]:
    lines = data_file(root).read_text().splitlines()
    start, end = _sections(lines)[0 if device is None else device + 1]
    out = {}
    for line in lines[start:end]:
        key, sep, value = line.partition("=")
        if sep and not line.startswith("#"):
            out.setdefault(key.strip(), value.strip())
    return out


def set_values(root: Path, device: int | None = None, **values: object) -> None:
    """Set (replace or add) keys in the global block (``device=None``) or one device section."""
    path = data_file(root)
    lines = path.read_text().splitlines()
    section = 0 if device is None else device + 1
    for key, value in values.items():
        start, end = _sections(lines)[section]
        for i in range(start, end):
            if lines[i].split("=", 1)[0].strip() == key:
                lines[i] = f"{key}={value}"
                break
        else:
            lines.insert(end, f"{key}={value}")
    path.write_text("\n".join(lines) + "\n")
