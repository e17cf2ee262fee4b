"""Every ``GPUSTACK_*`` deploy-time variable the Device Manager reads, in one place (supplement §4).

Read once per process through :func:`get_settings`; tests build :class:`Settings` directly. The
worker's one setting, ``GPUSTACK_NODE_MANAGEMENT_MANUAL``, is read by :func:`node_management_manual`. A value
that cannot be parsed is a :class:`SettingsError` naming the variable and what it accepts.

The environment is read by :func:`environment` (exact, upper-case ``GPUSTACK_<FIELD>`` names, as the
spec writes them) and validated by plain pydantic models. pydantic-settings did the same job but its
import alone cost ~200 ms of every CLI call and every Ansible module task (measured: 387 ms vs 178 ms
for ``import pydantic``), which is what kept ``accelerator_facts`` from its speed target; the only
source these settings ever had is the process environment, so nothing else of that library was used.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from functools import lru_cache

from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

DEFAULT_PCI_CLASS_PREFIXES: tuple[str, ...] = ("02", "03", "0b", "12")

_HEX = re.compile(r"^[0-9a-f]+\Z")  # not "$", which also matches before a trailing newline


class SettingsError(ValueError):
    """A ``GPUSTACK_*`` variable holds a value this program cannot use."""


def parse_pci_class_prefixes(raw: str | None) -> tuple[str, ...]:
    """``GPUSTACK_PCI_CLASS_PREFIXES``: split on ``,``, trim, drop empties; empty → the default.

    Entries are hex class prefixes (``03``, ``0b40``); an optional ``0x`` is accepted. Anything else
    is refused rather than silently matching nothing.
    """
    if raw is None:
        return DEFAULT_PCI_CLASS_PREFIXES
    out: list[str] = []
    for item in raw.split(","):
        entry = item.strip().lower().removeprefix("0x")
        if not entry:
            continue
        if not _HEX.match(entry) or len(entry) > 6:
            raise SettingsError(
                f"GPUSTACK_PCI_CLASS_PREFIXES: {item.strip()!r} is not a PCI class prefix; "
                "use comma-separated hex prefixes such as 02,03,0b,12"
            )
        out.append(entry)
    return tuple(out) or DEFAULT_PCI_CLASS_PREFIXES


class PciVendorMatch(BaseModel):
    """A manufacturer's PCI identity: a vendor id, optionally narrowed to one class prefix."""

    vendor: str
    class_prefix: str | None = None

    @classmethod
    def parse(cls, raw: str, variable: str) -> PciVendorMatch:
        """``${vendor}`` or ``${class}_${vendor}`` (e.g. ``10de`` or ``0302_10de``)."""
        text = raw.strip().lower()
        klass, sep, vendor = text.rpartition("_")
        vendor = vendor.removeprefix("0x")
        klass = klass.removeprefix("0x")
        if (
            not _HEX.match(vendor)
            or len(vendor) != 4
            or (sep and (not klass or not _HEX.match(klass) or len(klass) > 6))  # a class code has 6 digits
        ):
            raise SettingsError(
                f"{variable}: {raw!r} is not a PCI vendor id; use 4 hex digits (10de) or <class>_<vendor> (0302_10de)"
            )
        return cls(vendor=vendor, class_prefix=klass or None)

    def label(self) -> str:
        """The NFD label suffix (``10de`` or ``0302_10de``)."""
        return f"{self.class_prefix}_{self.vendor}" if self.class_prefix else self.vendor


def environment(prefix: str, fields: Mapping[str, object], env: Mapping[str, str] | None = None) -> dict[str, str]:
    """The ``<prefix><FIELD>`` variables set in ``env`` (default: the process environment), keyed by
    field name: ``GPUSTACK_DATA_DIR`` → ``data_dir``. Names are matched exactly, upper case."""
    source = os.environ if env is None else env
    found: dict[str, str] = {}
    for name in fields:
        value = source.get(f"{prefix}{name.upper()}")
        if value is not None:
            found[name] = value
    return found


_TRUE = frozenset({"true", "t", "1"})  # Go's strconv.ParseBool, any case
_FALSE = frozenset({"false", "f", "0"})


def parse_flag(raw: str | None, variable: str, *, default: bool) -> bool:
    """A true/false setting: ``true``/``false`` (also ``t``/``f``, ``1``/``0``; any case, trimmed);
    unset or empty → ``default``. Anything else is a :class:`SettingsError` rather than a guess."""
    text = (raw or "").strip().lower()
    if not text:
        return default
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SettingsError(f"{variable}: {raw!r} is not a boolean; use true or false (unset: {str(default).lower()})")


def node_management_manual(env: Mapping[str, str] | None = None) -> bool:
    """``GPUSTACK_NODE_MANAGEMENT_MANUAL`` (supplement §4.2, default ``false``), the worker's setting:
    off, the worker marks every Node ``gpustack.ai/managed=true`` unless the Node carries the mark."""
    found = environment("GPUSTACK_", {"node_management_manual": None}, env)
    return parse_flag(found.get("node_management_manual"), "GPUSTACK_NODE_MANAGEMENT_MANUAL", default=False)


def _switch(raw: str | None) -> bool:
    """A default-on safeguard switch: off only for ``false`` (any case, trimmed), as the chart's
    ``--set-string deviceManager.env.<VAR>=false`` writes it."""
    return raw is None or raw.strip().lower() != "false"


class Settings(BaseModel):
    """Deploy-time variables (supplement §4.3)."""

    model_config = ConfigDict(extra="ignore")

    data_dir: str = "/var/lib/gpustack"
    conf_dir: str = "/etc/gpustack"
    # Kept as the raw strings and parsed by the spec's own rules (an empty value means the default;
    # only the exact string "true" turns the memory suffix on).
    pci_class_prefixes: str | None = None
    devices_group_id_with_memory: str | None = None

    @field_validator("pci_class_prefixes")
    @classmethod
    def _check_prefixes(cls, value: str | None) -> str | None:
        parse_pci_class_prefixes(value)
        return value

    @property
    def class_prefixes(self) -> tuple[str, ...]:
        return parse_pci_class_prefixes(self.pci_class_prefixes)

    # The allocator's safeguard switches (supplement §4.3), default on; only "false" turns one off.
    device_plugin_sliced_allocate_gate: str | None = None
    device_plugin_identify_by_kubelet: str | None = None
    ledger_release_terminated_pods: str | None = None
    lib_dir: str | None = None  # GPUSTACK_LIB_DIR, the preload-library tree's host path

    @property
    def group_id_with_memory(self) -> bool:
        """True only for the exact string ``true`` (supplement §4.3 parsing note)."""
        return self.devices_group_id_with_memory == "true"

    @property
    def sliced_allocate_gate(self) -> bool:
        return _switch(self.device_plugin_sliced_allocate_gate)

    @property
    def identify_by_kubelet(self) -> bool:
        return _switch(self.device_plugin_identify_by_kubelet)

    @property
    def release_terminated_pods(self) -> bool:
        return _switch(self.ledger_release_terminated_pods)


class ManufacturerOverrides(BaseModel):
    """``GPUSTACK_${MANUFACTURER}_*`` overrides (supplement §4.4); built per manufacturer."""

    model_config = ConfigDict(extra="ignore")

    pci_vendor_id: str | None = None
    acceleratable_resource_name: str | None = None
    acceleratable_runtime_name: str | None = None
    partition_kind: str | None = None
    device_injection_strategy: str | None = None


def manufacturer_overrides(manufacturer: str) -> ManufacturerOverrides:
    prefix = f"GPUSTACK_{manufacturer.upper()}_"
    return ManufacturerOverrides.model_validate(environment(prefix, ManufacturerOverrides.model_fields))


def load_settings(env: Mapping[str, str] | None = None) -> Settings:
    """The settings from ``env`` (default: the process environment); :class:`SettingsError` names
    what a malformed value is and what it accepts."""
    try:
        return Settings.model_validate(environment("GPUSTACK_", Settings.model_fields, env))
    except ValidationError as exc:
        messages = "; ".join(str(err.get("ctx", {}).get("error", err["msg"])) for err in exc.errors())
        raise SettingsError(messages) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings, read once."""
    return load_settings()
