"""``--probe-image``: an OCI image reference, validated before the pass (supplement §2.4 flags table).

The grammar is the one container engines accept (``distribution/reference``, which docker, nerdctl
and containerd share)::

    reference  := name [ ":" tag ] [ "@" digest ]
    name       := [ registry "/" ] path            (at most 255 characters)
    registry   := host [ ":" port ]
    host       := domain-component ( "." domain-component )*  |  "[" IPv6 address "]"
    path       := path-component ( "/" path-component )*
    path-component := [a-z0-9]+ ( separator [a-z0-9]+ )*      separator := "." | "_" | "__" | "-"+
    tag        := [A-Za-z0-9_] [A-Za-z0-9_.-]{0,127}
    digest     := "sha256:" 64 lowercase hex  |  "sha512:" 128 lowercase hex

The first ``/``-separated component is the registry exactly when it could not be a path component
the way docker decides it: it contains ``.`` or ``:``, is ``localhost``, is a bracketed IPv6 address,
or carries an upper-case letter. Nothing is normalised (no ``docker.io/library/`` is added), so the
reference prints back exactly as it was given: the probe would pull what the operator typed.

Digests: the OCI image spec registers ``sha256`` and ``sha512``, with lower-case hex of the exact
length; other algorithms are refused by name rather than passed to a runtime that will refuse them
after the pass.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

NAME_MAX = 255
TAG_MAX = 128
DIGEST_HEX = {"sha256": 64, "sha512": 128}

_PATH_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_DOMAIN_COMPONENT = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?")
_PORT = re.compile(r"[0-9]+")
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_HEX = re.compile(r"[0-9a-f]+")


class ImageRefError(ValueError):
    """The string is not an image reference; the message names the problem and the expected form."""

    def __init__(self, given: str, problem: str) -> None:
        super().__init__(
            f"{given!r} is not an OCI image reference: {problem} "
            "(expected [registry[:port]/]path[:tag][@sha256:<64 hex>], e.g. ubuntu:24.04 or "
            "registry.example.com:5000/team/probe:1.0)"
        )
        self.given = given
        self.problem = problem


@dataclass(frozen=True)
class ImageRef:
    """A parsed reference; ``str()`` gives back exactly the string it was parsed from."""

    path: str
    registry: str | None = None
    tag: str | None = None
    digest: str | None = None

    @property
    def name(self) -> str:
        return f"{self.registry}/{self.path}" if self.registry else self.path

    def __str__(self) -> str:
        text = self.name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text


def parse_image_ref(text: str) -> ImageRef:
    """Parse ``text``; raise :class:`ImageRefError` naming what is wrong. Never raises anything else."""
    if not text:
        raise ImageRefError(text, "it is empty")
    bad = next((c for c in text if c.isspace() or not c.isprintable()), None)
    if bad is not None:
        raise ImageRefError(text, f"it contains the character {bad!r}")
    if text.count("@") > 1:
        raise ImageRefError(text, "it carries more than one '@'")
    rest, at, digest_text = text.partition("@")
    digest = _digest(text, digest_text) if at else None
    if not rest:
        raise ImageRefError(text, "the name before '@' is empty")

    first, slash, _ = rest.partition("/")
    registry: str | None = None
    if slash and _is_registry(first):
        registry = _registry(text, first)
        rest = rest[len(first) + 1 :]
    path, colon, tag = _split_tag(rest)
    if colon:
        _tag(text, tag)
    _path(text, path)
    name = f"{registry}/{path}" if registry else path
    if len(name) > NAME_MAX:
        raise ImageRefError(text, f"the name is {len(name)} characters long, more than the {NAME_MAX} allowed")
    return ImageRef(path=path, registry=registry, tag=tag if colon else None, digest=digest)


def _is_registry(first: str) -> bool:
    """docker's rule for the first component: a host, not a path, when no path component could be it."""
    return "." in first or ":" in first or first == "localhost" or first.startswith("[") or first != first.lower()


def _registry(text: str, registry: str) -> str:
    if registry.startswith("["):
        close = registry.find("]")
        if close < 0:
            raise ImageRefError(text, f"the registry {registry!r} opens '[' without closing it")
        address, port_text = registry[1:close], registry[close + 1 :]
        try:
            ipaddress.IPv6Address(address)
        except ValueError:
            raise ImageRefError(text, f"the registry {registry!r} is not a bracketed IPv6 address") from None
        if port_text:
            _port(text, registry, port_text[1:] if port_text.startswith(":") else None)
        return registry
    host, colon, port = registry.partition(":")
    if not host:
        raise ImageRefError(text, f"the registry {registry!r} has no host name")
    for component in host.split("."):
        if not _DOMAIN_COMPONENT.fullmatch(component):
            raise ImageRefError(
                text,
                f"the registry host {host!r} is not a host name (letters, digits and inner '-', separated by '.')",
            )
    if colon:
        _port(text, registry, port)
    return registry


def _port(text: str, registry: str, port: str | None) -> None:
    if port is None or not _PORT.fullmatch(port):
        raise ImageRefError(text, f"the registry {registry!r} has a port that is not a number")


def _split_tag(rest: str) -> tuple[str, str, str]:
    """The tag is after the last ':' of the last path component (a registry port is never here)."""
    head, slash, last = rest.rpartition("/")
    name, colon, tag = last.partition(":")
    return (head + slash + name, colon, tag)


def _tag(text: str, tag: str) -> None:
    if not tag:
        raise ImageRefError(text, "the tag after ':' is empty")
    if len(tag) > TAG_MAX:
        raise ImageRefError(text, f"the tag is {len(tag)} characters long, more than the {TAG_MAX} allowed")
    if not _TAG.fullmatch(tag):
        raise ImageRefError(
            text, f"the tag {tag!r} may hold only letters, digits, '_', '.' and '-', and may not start with '.' or '-'"
        )


def _path(text: str, path: str) -> None:
    if not path:
        raise ImageRefError(text, "the repository path is empty")
    for component in path.split("/"):
        if not component:
            raise ImageRefError(text, f"the repository path {path!r} has an empty component")
        if component != component.lower():
            raise ImageRefError(text, f"the repository path {path!r} must be lower-case")
        if not _PATH_COMPONENT.fullmatch(component):
            raise ImageRefError(
                text,
                f"the path component {component!r} must be lower-case letters and digits, joined by "
                "'.', '_', '__' or dashes, neither starting nor ending with one",
            )


def _digest(text: str, digest: str) -> str:
    algorithm, colon, encoded = digest.partition(":")
    if not colon:
        raise ImageRefError(text, f"the digest {digest!r} is not <algorithm>:<hex>")
    want = DIGEST_HEX.get(algorithm)
    if want is None:
        raise ImageRefError(text, f"the digest algorithm {algorithm!r} is not one of {', '.join(DIGEST_HEX)}")
    if len(encoded) != want or not _HEX.fullmatch(encoded):
        raise ImageRefError(text, f"a {algorithm} digest is exactly {want} lower-case hex digits")
    return digest
