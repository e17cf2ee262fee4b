"""The CANN toolkit and driver versions, read from the files the vendor installers write.

Both are ``key=value`` files (``version.info``):

* the driver's ``/usr/local/Ascend/driver/version.info`` carries ``Version=24.1.rc2`` (the driver
  package version, the same string ``dcmi_get_driver_version`` reports);
* the toolkit's ``<ASCEND_TOOLKIT_HOME>/version.info`` or ``share/info/runtime/version.info``
  (``ASCEND_TOOLKIT_HOME`` defaults to ``/usr/local/Ascend/cann`` when that directory exists, otherwise
  ``/usr/local/Ascend/ascend-toolkit/latest/runtime``, supplement §4.5). CANN up to 8.0 writes the
  *component* version there (``Version=7.6.0.1.220``) next to the product version
  (``version_dir=8.0.0``); later releases write the product version as ``Version=`` and a
  ``version_dir`` that is not a version (``cann``). The product version is the CANN version, so a
  ``version_dir`` that reads as a version wins; ``version.cfg`` writes ``<component>:<product>``
  (``7.3.0.1.231:8.0.RC2``), whose product half is taken.

The runtime version the ledger carries is the product version cut to ``major.minor`` (``8.0.RC2`` →
``8.0``), as the reference implementation's ``NormalizeVersion`` does.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping

from gpustack_operator.host.root import HostPathError, HostRoot

log = logging.getLogger(__name__)

DEFAULT_CANN_HOME = "/usr/local/Ascend"
TOOLKIT_HOME_DEFAULT = "/usr/local/Ascend/cann"
TOOLKIT_HOME_FALLBACK = "/usr/local/Ascend/ascend-toolkit/latest/runtime"
TOOLKIT_VERSION_FILES = ("version.info", "share/info/runtime/version.info")

_LOOKS_LIKE_VERSION = re.compile(r"^[0-9]+(\.[0-9A-Za-z_-]+)*$")


def parse_key_values(text: str) -> dict[str, str]:
    """``key=value`` lines → a dict with lowercased keys; the first occurrence of a key wins.

    Blank lines, ``#`` comments and lines without ``=`` are skipped; keys and values are stripped,
    and a value wrapped in double quotes loses them.
    """
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip().lower()
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1].strip()
        if key and key not in out:
            out[key] = value
    return out


def _product_half(value: str) -> str:
    """``7.3.0.1.231:8.0.RC2`` → ``8.0.RC2``; anything without a colon is returned as is."""
    return value.rsplit(":", 1)[-1].strip() if ":" in value else value


def cann_version(text: str) -> str | None:
    """The CANN (product) version a toolkit ``version.info`` records, ``None`` when it names none."""
    values = parse_key_values(text)
    version_dir = values.get("version_dir", "")
    if _LOOKS_LIKE_VERSION.match(version_dir):
        return version_dir
    version = _product_half(values.get("version", ""))
    return version or None


def driver_version(text: str) -> str | None:
    """The driver package version a driver ``version.info`` records (``Version=``, else
    ``package_version=``)."""
    values = parse_key_values(text)
    return values.get("version") or values.get("package_version") or None


def normalize_version(version: str | None) -> str | None:
    """``8.0.RC2`` → ``8.0``; ``9.0.0`` → ``9.0``; a version with one component stays whole."""
    if not version:
        return None
    parts = version.split(".")
    if len(parts) < 2:
        return version
    return f"{parts[0]}.{parts[1]}"


def toolkit_home(host: HostRoot, environ: Mapping[str, str] | None = None) -> str:
    """``ASCEND_TOOLKIT_HOME``, else ``/usr/local/Ascend/cann`` when it is a directory on the host,
    else ``/usr/local/Ascend/ascend-toolkit/latest/runtime``."""
    env = os.environ if environ is None else environ
    explicit = env.get("ASCEND_TOOLKIT_HOME", "").strip()
    if explicit:
        return explicit.rstrip("/") or "/"
    try:
        if host.is_dir(TOOLKIT_HOME_DEFAULT):
            return TOOLKIT_HOME_DEFAULT
    except HostPathError:
        pass
    return TOOLKIT_HOME_FALLBACK


def read_cann_version(host: HostRoot, environ: Mapping[str, str] | None = None) -> str | None:
    """The CANN version installed on the host, or ``None`` when no toolkit version file says."""
    home = toolkit_home(host, environ)
    for rel in TOOLKIT_VERSION_FILES:
        path = f"{home}/{rel}"
        try:
            text = host.read_optional(path)
        except HostPathError as exc:
            log.debug("ascend: %s cannot be read: %s", path, exc)
            continue
        if text is None:
            continue
        version = cann_version(text)
        if version:
            log.debug("ascend: CANN %s from %s", version, path)
            return version
    log.debug("ascend: no CANN version under %s", home)
    return None


def cann_home(environ: Mapping[str, str] | None = None) -> str:
    env = os.environ if environ is None else environ
    return (env.get("CANN_HOME", "").strip() or DEFAULT_CANN_HOME).rstrip("/") or "/"


def read_driver_version(host: HostRoot, environ: Mapping[str, str] | None = None) -> str | None:
    """The driver version from ``<CANN_HOME>/driver/version.info`` (``CANN_HOME`` defaults to
    ``/usr/local/Ascend``), or ``None``."""
    path = f"{cann_home(environ)}/driver/version.info"
    try:
        text = host.read_optional(path)
    except HostPathError as exc:
        log.debug("ascend: %s cannot be read: %s", path, exc)
        return None
    return driver_version(text) if text is not None else None


__all__ = [
    "cann_home",
    "cann_version",
    "driver_version",
    "normalize_version",
    "parse_key_values",
    "read_cann_version",
    "read_driver_version",
    "toolkit_home",
]
