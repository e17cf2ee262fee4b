"""The worker's §3.3 flags that govern its GPUStack API -- which this product does not serve.

In the reference the worker also serves an HTTPS API (authn/authz, auditing, CORS, a goroutine pool, the
``NodeModelStore`` status writer's service account). This package serves only ``/readyz`` and ``/livez``
on ``--secure-port``, so these flags are accepted (a chart or a command line written for the reference
keeps working) and validated -- a bad value is a usage error naming the flag, as it would be there -- and
have no effect, which :func:`unserved_note` says once at startup:

``--disable-auths`` (bool), ``--audit-log-path`` (``-`` or a file in an existing directory),
``--audit-policy-file`` and ``--audit-webhook-config-file`` (existing regular files), ``--cors-allowed-origins``
(regexes that compile, comma-separated, repeatable), ``--gopool-worker-factor`` (a whole number > 0),
``--model-manager-service-account`` (a service-account name: a DNS-1123 subdomain).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

GOPOOL_WORKER_FACTOR = 100
MODEL_MANAGER_SERVICE_ACCOUNT = "gpustack-operator-model-manager"
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

# (dest, flag, default): what is compared to tell a flag given from one left alone
UNSERVED: tuple[tuple[str, str, Any], ...] = (
    ("disable_auths", "--disable-auths", False),
    ("audit_log_path", "--audit-log-path", None),
    ("audit_policy_file", "--audit-policy-file", None),
    ("audit_webhook_config_file", "--audit-webhook-config-file", None),
    ("cors_allowed_origins", "--cors-allowed-origins", []),
    ("gopool_worker_factor", "--gopool-worker-factor", GOPOOL_WORKER_FACTOR),
    ("model_manager_service_account", "--model-manager-service-account", MODEL_MANAGER_SERVICE_ACCOUNT),
)


def existing_file(value: str) -> str:
    """A path naming an existing regular file (argparse type)."""
    path = Path(value)
    if not value.strip() or "\0" in value:
        raise argparse.ArgumentTypeError("is empty: name an existing file")
    if not path.exists():
        raise argparse.ArgumentTypeError(f"{value!r} does not exist: name an existing file")
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value!r} is not a regular file")
    return value


def audit_log_path(value: str) -> str:
    """``-`` (standard output) or a file to write in an existing directory (argparse type)."""
    if value == "-":
        return value
    if not value.strip() or "\0" in value:
        raise argparse.ArgumentTypeError("is empty: name a file, or - for standard output")
    path = Path(value)
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{value!r} is a directory: name a file in it")
    if not path.absolute().parent.is_dir():
        raise argparse.ArgumentTypeError(f"the directory of {value!r} does not exist")
    return value


def origin_regexes(value: str) -> list[str]:
    """Comma-separated regular expressions, each compiled to check it (argparse type)."""
    items = [item.strip() for item in value.split(",") if item.strip()]
    for item in items:
        try:
            re.compile(item)
        except re.error as exc:
            raise argparse.ArgumentTypeError(f"{item!r} is not a regular expression ({exc})") from None
    return items


def positive_int(value: str) -> int:
    """A whole number above 0 (argparse type)."""
    try:
        number = int(value.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value[:50]!r} is not a whole number (e.g. 100)") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"{number} must be greater than 0 (e.g. 100)")
    return number


def service_account(value: str) -> str:
    """A service account's name: a DNS-1123 subdomain (argparse type)."""
    if len(value) > 253 or not _SUBDOMAIN.fullmatch(value):
        raise argparse.ArgumentTypeError(
            f"{value[:80]!r} is not a service account name: lower-case letters, digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return value


def add_flags(p: argparse.ArgumentParser, as_bool: Any) -> None:
    """Register the flags on the ``worker`` parser (``as_bool``: the CLI's true/false argparse type)."""
    note = " (accepted for the reference's API, which is not served here: no effect)"
    p.add_argument(
        "--disable-auths",
        type=as_bool,
        nargs="?",
        const=True,
        default=False,
        metavar="BOOL",
        help="skip the API's authn/authz" + note,
    )
    p.add_argument("--audit-log-path", type=audit_log_path, metavar="FILE", help="the API's audit log" + note)
    p.add_argument("--audit-policy-file", type=existing_file, metavar="FILE", help="the API's audit policy" + note)
    p.add_argument(
        "--audit-webhook-config-file", type=existing_file, metavar="FILE", help="the API's audit webhook" + note
    )
    p.add_argument(
        "--cors-allowed-origins",
        type=origin_regexes,
        action="extend",
        default=[],
        metavar="REGEXES",
        help="origins the API allows, anchored regexes, comma-separated (default: all)" + note,
    )
    p.add_argument(
        "--gopool-worker-factor",
        type=positive_int,
        default=GOPOOL_WORKER_FACTOR,
        metavar="N",
        help=f"the API's handler pool per CPU core (default {GOPOOL_WORKER_FACTOR})" + note,
    )
    p.add_argument(
        "--model-manager-service-account",
        type=service_account,
        default=MODEL_MANAGER_SERVICE_ACCOUNT,
        metavar="NAME",
        help=f"the service account allowed to write NodeModelStore status (default {MODEL_MANAGER_SERVICE_ACCOUNT})"
        + note,
    )


def given(args: argparse.Namespace) -> list[str]:
    """The flags of :data:`UNSERVED` set to something other than their default."""
    return [flag for dest, flag, default in UNSERVED if getattr(args, dest, default) != default]


def unserved_note(args: argparse.Namespace) -> str:
    """The one startup line: these flags have no effect, naming those given."""
    named = given(args)
    which = f"{', '.join(named)} given" if named else "none given"
    return (
        "the GPUStack API of the worker is not served by this product (only /readyz and /livez are): "
        "--disable-auths, --audit-*, --cors-allowed-origins, --gopool-worker-factor and "
        f"--model-manager-service-account have no effect ({which})"
    )


__all__ = ["UNSERVED", "add_flags", "given", "unserved_note"]
