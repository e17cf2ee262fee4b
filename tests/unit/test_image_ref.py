"""``--probe-image``: the OCI image-reference parser (distribution/reference's grammar, docker's
registry rule), with the references probe images are really named by."""

from __future__ import annotations

import pytest
from gpustack_operator.preflight.imageref import ImageRef, ImageRefError, parse_image_ref
from hypothesis import given
from hypothesis import strategies as st

SHA256 = "sha256:" + "0123456789abcdef" * 4
SHA512 = "sha512:" + "0123456789abcdef" * 8


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("ubuntu", ImageRef(path="ubuntu")),
        ("ubuntu:24.04", ImageRef(path="ubuntu", tag="24.04")),
        ("nvidia/cuda:12", ImageRef(path="nvidia/cuda", tag="12")),
        ("quay.io/ascend/cann:8-910b", ImageRef(registry="quay.io", path="ascend/cann", tag="8-910b")),
        ("localhost/probe", ImageRef(registry="localhost", path="probe")),
        ("localhost:5000/probe:v1", ImageRef(registry="localhost:5000", path="probe", tag="v1")),
        (
            "registry.example.com:5000/team/sub_team/probe-image:1.0_rc.2",
            ImageRef(registry="registry.example.com:5000", path="team/sub_team/probe-image", tag="1.0_rc.2"),
        ),
        (f"ubuntu@{SHA256}", ImageRef(path="ubuntu", digest=SHA256)),
        (f"ubuntu:24.04@{SHA256}", ImageRef(path="ubuntu", tag="24.04", digest=SHA256)),
        (f"ghcr.io/org/img@{SHA512}", ImageRef(registry="ghcr.io", path="org/img", digest=SHA512)),
        ("[::1]:5000/probe", ImageRef(registry="[::1]:5000", path="probe")),
        ("[fe80::1]/probe:x", ImageRef(registry="[fe80::1]", path="probe", tag="x")),
        ("Registry/probe", ImageRef(registry="Registry", path="probe")),  # upper case: a host, as docker decides
        ("a__b/c--d.e", ImageRef(path="a__b/c--d.e")),
        ("library/" + "x" * 200, ImageRef(path="library/" + "x" * 200)),
    ],
)
def test_valid_references_parse_and_print_back(text: str, expected: ImageRef) -> None:
    ref = parse_image_ref(text)
    assert ref == expected
    assert str(ref) == text


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("", "it is empty"),
        ("Ubuntu:24.04", "must be lower-case"),
        ("ubuntu 24.04", "contains the character ' '"),
        ("ubuntu:", "the tag after ':' is empty"),
        ("ubuntu:-rc", "may not start with '.' or '-'"),
        ("ubuntu:" + "a" * 129, "more than the 128 allowed"),
        ("ubuntu@sha256:abc", "exactly 64 lower-case hex"),
        ("ubuntu@sha256:" + "A" * 64, "exactly 64 lower-case hex"),
        ("ubuntu@md5:" + "0" * 32, "is not one of sha256, sha512"),
        ("ubuntu@" + "0" * 64, "is not <algorithm>:<hex>"),
        ("a@b@c", "more than one '@'"),
        (f"@{SHA256}", "the name before '@' is empty"),
        ("registry:port/x", "port that is not a number"),
        ("-bad.example.com/x", "is not a host name"),
        ("[::1/x", "without closing it"),
        ("[nothex]/x", "not a bracketed IPv6 address"),
        ("localhost:5000/", "the repository path is empty"),
        ("a//b", "has an empty component"),
        ("a/-b", "must be lower-case letters and digits"),
        ("a/b_", "must be lower-case letters and digits"),
        ("a/b___c", "must be lower-case letters and digits"),
        ("x/" + "a" * 254, "more than the 255 allowed"),
    ],
)
def test_invalid_references_name_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ImageRefError) as caught:
        parse_image_ref(text)
    message = str(caught.value)
    assert problem in message
    assert "is not an OCI image reference" in message and "expected [registry[:port]/]path" in message


# -- properties ----------------------------------------------------------------------------------

alnum = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=6)
separator = st.sampled_from([".", "_", "__", "-", "--"])
component = st.builds(
    lambda a, rest: a + "".join(s + b for s, b in rest), alnum, st.lists(st.tuples(separator, alnum), max_size=2)
)
path = st.lists(component, min_size=1, max_size=3).map("/".join)
label = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9-]{0,4}[A-Za-z0-9])?", fullmatch=True)
host = st.one_of(
    st.lists(label, min_size=2, max_size=3).map(".".join),
    st.just("localhost"),
    st.just("[::1]"),
)
registry = st.builds(lambda h, p: h + (f":{p}" if p is not None else ""), host, st.none() | st.integers(1, 65535))
tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
digest = st.one_of(
    st.text("0123456789abcdef", min_size=64, max_size=64).map(lambda h: f"sha256:{h}"),
    st.text("0123456789abcdef", min_size=128, max_size=128).map(lambda h: f"sha512:{h}"),
)


def printable_unambiguously(ref: ImageRef) -> bool:
    """Without a registry, a first path component that reads as a host ("a.b/c", "localhost/c") is
    one: docker's rule, so such a reference is never what the parser returns."""
    first, slash, _ = ref.path.partition("/")
    return ref.registry is not None or not slash or ("." not in first and first != "localhost")


refs = st.builds(
    ImageRef, path=path, registry=st.none() | registry, tag=st.none() | tag, digest=st.none() | digest
).filter(printable_unambiguously)


@given(refs)
def test_every_reference_in_the_grammar_round_trips(ref: ImageRef) -> None:
    assert parse_image_ref(str(ref)) == ref


@given(st.one_of(st.text(max_size=80), st.text("abcxyz019-_.:/@[]ABsha256", max_size=40)))
def test_garbage_is_refused_by_name_or_parses_to_itself(text: str) -> None:
    """Arbitrary text and near misses of the grammar: never anything but ImageRefError."""
    try:
        ref = parse_image_ref(text)
    except ImageRefError as exc:
        assert exc.given == text and exc.problem
    else:
        assert str(ref) == text
