"""YAML from a host file (issue 16, "Hostile input"): ``load_yaml`` builds one document or raises
:class:`YamlError` in bounded words -- for an alias bomb, an alias holding its own node, nesting past
the limit, a tag its value cannot hold, a lone surrogate, anything -- and nothing else escapes."""

from __future__ import annotations

import time

import pytest
from gpustack_operator.host.safeyaml import MAX_NODES, YamlError, load_yaml, yaml_kind
from hypothesis import example, given
from hypothesis import strategies as st

from tests.unit.hostile import deep_nesting, hostile_numbers, hostile_text


def laughs(levels: int, fanout: int = 9) -> str:
    lines = ['a0: &a0 ["lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * fanout)}]" for i in range(1, levels + 1)]
    return "\n".join(lines) + "\n"


def test_an_alias_bomb_is_refused_in_milliseconds_and_a_small_one_is_built() -> None:
    started = time.monotonic()
    with pytest.raises(YamlError) as err:
        load_yaml(laughs(9))
    assert time.monotonic() - started < 1
    assert str(err.value).startswith(f"it stands for more than {MAX_NODES} YAML nodes, each alias counted")
    doc = load_yaml(laughs(3))
    assert isinstance(doc, dict) and len(doc["a3"]) == 9 and doc["a3"][0][0][0] == ["lol"]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a: &a [*a]\n", "holds it"),
        ("&a {x: *a}\n", "holds it"),
        ("a:" + "".join(f"\n{' ' * i}- " for i in range(0, 200, 2)) + "x\n", "nested more than 64"),
        ("[" * 2_000 + "]" * 2_000, "nesting depth"),
        ("a: !!timestamp x\n", "AttributeError"),
        ("a: !!bool maybe\n", "KeyError"),
        ("a: !!int ''\n", "IndexError"),
        ("a: !!int 0b\n", "ValueError"),
        ("a: 2001-02-30\n", "ValueError"),
        ("a: !!set [1]\n", "not valid YAML"),
        ("a: 1\n---\nb: 2\n", "another document"),
        ("\ud800", "lone surrogate"),
        ("a: !!python/object:os.system ls\n", "not valid YAML"),
    ],
)
def test_what_cannot_be_built_is_a_yaml_error_in_words(text: str, words: str) -> None:
    with pytest.raises(YamlError, match=words):
        load_yaml(text)


def test_a_document_of_more_nodes_than_any_configuration_is_refused_without_aliases() -> None:
    with pytest.raises(YamlError) as err:
        load_yaml("[" + "1, " * MAX_NODES + "]")
    assert str(err.value).startswith(f"it stands for more than {MAX_NODES} YAML nodes")
    assert load_yaml("[" + "1, " * (MAX_NODES - 2) + "]") == [1] * (MAX_NODES - 2)


def test_what_can_be_built_is_built() -> None:
    assert load_yaml("") is None
    assert load_yaml("a: &x [1, 2]\nb: *x\nc: {<<: {d: 1}}\n") == {"a": [1, 2], "b": [1, 2], "c": {"d": 1}}
    assert [yaml_kind(v) for v in (None, True, 1, 1.5, "s", b"b", {}, [], {1})] == [
        "null",
        "a boolean",
        "an integer",
        "a number",
        "a string",
        "binary data",
        "a mapping",
        "a sequence",
        "a set",
    ]


_PIECES = st.sampled_from(
    [
        "a: ",
        "&a ",
        "*a",
        "&b [*a, *a, *a, *a, *a, *a, *a, *a, *a]\n",
        "<<: ",
        "? ",
        "- ",
        ": ",
        "[",
        "]",
        "{",
        "}",
        "\n",
        "  ",
        "---\n",
        "!!timestamp ",
        "!!bool ",
        "!!int ",
        "!!float ",
        "!!binary ",
        "!!set ",
        "!!omap ",
        "!!pairs ",
        "!!str ",
        "!!null ",
        "!!map ",
        "!!seq ",
        "''",
        "x",
        "0x",
        "2001-13-45",
        "1:2:3",
        "~",
        "|",
        ">",
    ]
)


@pytest.mark.hostile
@given(
    st.one_of(
        hostile_text(),
        hostile_numbers(),
        deep_nesting(),
        st.lists(_PIECES | st.text(max_size=4), max_size=50).map("".join),
        st.integers(1, 12).map(laughs),
    )
)
@example(laughs(9))
@example("a: !!timestamp x\n")
@example("a: !!int ''\n")
def test_load_yaml_raises_only_yaml_error(text: str) -> None:
    try:
        load_yaml(text)
    except YamlError as exc:
        assert 0 < len(str(exc)) < 500
