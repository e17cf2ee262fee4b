"""Hypothesis strategies for the hostile-input property tests (issue 8: every parser of host or user
input survives hostile input) and a Kubernetes label validator written independently of the product's
own sanitizer, so the sanitizer never checks itself.

Hostile means: undecodable bytes (decoded the way the host root decodes them, ``errors="replace"``),
lone surrogates, NUL bytes, integers past ``int()``'s 4300-digit limit, signed / hex / underscored /
Unicode-digit numbers, huge and non-finite floats, nesting 10,000 levels deep, empty input, and real
fixture files cut short, spliced with any of the above, or with lines dropped and repeated.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

from hypothesis import strategies as st

# -- numbers ------------------------------------------------------------------------------------

_NUMBER_FRAGMENTS = [
    "0",
    "-0",
    "-1",
    "+1",
    "1_0",
    "0x",
    "0x41",
    "-0x41",
    "0X41",
    "0b101",
    "0o17",
    "1e400",
    "1e-400",
    "inf",
    "-inf",
    "nan",
    "NaN",
    "١٢٣",  # Arabic-Indic digits: str.isdecimal() and int() take them
    "²",  # superscript two: str.isdigit() takes it, int() refuses it
    "٣",
    "𝟗",  # mathematical bold nine
    "4294967296",
    "18446744073709551615",
    "18446744073709551616",
    "99999999999999999999999",
    " 7 ",
    "7\n",
    "\t-7\t",
]


@cache
def long_digits(min_digits: int = 4000, max_digits: int = 6000) -> st.SearchStrategy[str]:
    """Decimal integers around and past ``int()``'s 4300-digit limit."""
    return st.builds(
        lambda n, digit, sign: sign + digit * n,
        st.integers(min_digits, max_digits),
        st.sampled_from("123456789"),
        st.sampled_from(["", "-", "+"]),
    )


@cache
def hostile_numbers() -> st.SearchStrategy[str]:
    """Text that looks like, or almost like, a number."""
    return st.one_of(
        st.sampled_from(_NUMBER_FRAGMENTS),
        st.integers().map(str),
        st.integers(min_value=2**63 - 2, max_value=2**200).map(str),
        st.integers(min_value=-(2**70), max_value=2**70).map(hex),
        st.floats(allow_nan=True, allow_infinity=True).map(repr),
        long_digits(),
        long_digits().map(lambda s: "0x" + s.lstrip("+-")),
        long_digits().map(lambda s: "-0x" + s.lstrip("+-")),
    )


# -- text ---------------------------------------------------------------------------------------

_FRAGMENTS = [
    "\x00",
    "\x00\x00",
    "\ufffd",
    "\ud800",  # a lone surrogate (what surrogateescape gives an undecodable byte)
    "\udcff",
    "\n",
    "\r\n",
    "\r",
    "\x0b",
    "\x0c",
    "\x1c",
    "\x85",
    "\u2028",
    "\t",
    " ",
    ":",
    "::",
    "=",
    "/",
    "..",
    "\\",
    "@",
    "#",
    '"',
    "'",
    "-",
    "_",
    ".",
    "(R)",
    "(TM)",
    " @ ",
    "0x",
    "é",
    "İ",  # lower() of it is two characters
    "ß",
    "\u200b",
    "\U0001f600",
]


def _undecodable() -> st.SearchStrategy[str]:
    """Arbitrary bytes decoded the way HostRoot.read_text decodes a file."""
    return st.binary(max_size=512).map(lambda b: b.decode("utf-8", errors="replace"))


def _with_surrogates() -> st.SearchStrategy[str]:
    return st.lists(st.characters() | st.integers(0xD800, 0xDFFF).map(chr), max_size=64).map("".join)


@cache
def deep_nesting() -> st.SearchStrategy[str]:
    """JSON/YAML nested up to 10,000 levels, closed or not."""
    return st.builds(
        lambda n, opener, closed: opener[0] * n + ("1" + opener[1] * n if closed else ""),
        st.integers(1, 10_000),
        st.sampled_from([("[", "]"), ('{"a":', "}"), ("- ", ""), ("a:\n ", "")]),
        st.booleans(),
    )


def _repeated() -> st.SearchStrategy[str]:
    """A short fragment repeated up to 64 KiB (the host root's read cap): long lines for regexes."""
    return st.builds(
        lambda piece, n: (piece * n)[: 64 * 1024],
        st.one_of(st.sampled_from(_FRAGMENTS + _NUMBER_FRAGMENTS), st.text(min_size=1, max_size=8)),
        st.integers(1, 20_000),
    )


def _spliced() -> st.SearchStrategy[str]:
    return st.lists(
        st.one_of(st.sampled_from(_FRAGMENTS), st.sampled_from(_NUMBER_FRAGMENTS), st.text(max_size=8)),
        max_size=24,
    ).map("".join)


@cache
def hostile_text() -> st.SearchStrategy[str]:
    """Any of the hostile shapes above, including the empty string."""
    return st.one_of(
        st.just(""),
        st.text(),
        _with_surrogates(),
        _undecodable(),
        _spliced(),
        hostile_numbers(),
        deep_nesting(),
        _repeated(),
    )


@cache
def hostile_value() -> st.SearchStrategy[str]:
    """A field value: a hostile number or hostile text."""
    return hostile_numbers() | hostile_text()


@cache
def _splice_piece() -> st.SearchStrategy[str]:
    return st.sampled_from(_FRAGMENTS) | hostile_numbers()


# -- mutated real files -------------------------------------------------------------------------


@st.composite
def mutated(draw: st.DrawFn, real: str) -> str:
    """``real`` changed the way a damaged or hostile file is: cut short, a hostile piece spliced in,
    a line replaced by a hostile value, a span removed, a line repeated, or all at once."""
    text = real
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["cut", "splice", "value", "drop", "repeat", "keep"]))
        at = draw(st.integers(0, len(text)))
        if kind == "cut":
            text = text[:at]
        elif kind == "splice":
            text = text[:at] + draw(_splice_piece()) + text[at:]
        elif kind == "value":
            lines = text.splitlines(keepends=True)
            if lines:
                i = draw(st.integers(0, len(lines) - 1))
                head = re.split(r"([:= ]\s*)", lines[i], maxsplit=1)
                key = "".join(head[:2]) if len(head) == 3 else ""
                lines[i] = key + draw(hostile_value()) + "\n"
                text = "".join(lines)
        elif kind == "drop":
            end = draw(st.integers(at, min(len(text), at + 200)))
            text = text[:at] + text[end:]
        elif kind == "repeat":
            lines = text.splitlines(keepends=True)
            if lines:
                i = draw(st.integers(0, len(lines) - 1))
                lines.insert(i, lines[i] * draw(st.integers(1, 50)))
                text = "".join(lines)
    return text


def real_or_mutated(paths: list[Path]) -> st.SearchStrategy[str]:
    """One of the real files, as read (``errors="replace"``), untouched or mutated."""
    texts = []
    for path in paths:
        if path.is_file() and not path.is_symlink():  # fixtures hold deliberate loops and dangling links
            texts.append(path.read_bytes().decode("utf-8", errors="replace"))
    assert texts, "no fixture files found"
    return st.sampled_from(texts).flatmap(lambda t: st.one_of(st.just(t), mutated(t)))


# -- Kubernetes label rules, from the API's own definition ----------------------------------------
# A label value: at most 63 characters, empty or alphanumeric at both ends with [-_.A-Za-z0-9]
# between. A key: an optional DNS-subdomain prefix (at most 253, lowercase labels joined by '.')
# and '/', then a name with the value's character rules that is not empty.

_QUALIFIED = re.compile(r"[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?")


def label_value_problem(value: str) -> str | None:
    if len(value) > 63:
        return f"value is {len(value)} characters long"
    if value and not _QUALIFIED.fullmatch(value):
        return f"value {value!r} has a character or an end that is not allowed"
    return None


def label_key_problem(key: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix or len(prefix) > 253:
            return f"prefix {prefix!r} is empty or longer than 253"
        if any(not _DNS_LABEL.fullmatch(part) or len(part) > 63 for part in prefix.split(".")):
            return f"prefix {prefix!r} is not a DNS subdomain"
    if not name:
        return f"key {key!r} has an empty name"
    if len(name) > 63:
        return f"name of {key!r} is {len(name)} characters long"
    if not _QUALIFIED.fullmatch(name):
        return f"name of {key!r} has a character or an end that is not allowed"
    return None


def assert_valid_labels(labels: dict[str, str]) -> None:
    problems = [
        f"{key!r}: {problem}"
        for key, value in labels.items()
        for problem in (label_key_problem(key), label_value_problem(value))
        if problem
    ]
    assert not problems, problems
