"""Token ids the kubelet hands back (issue 16, "Hostile input"): ``parse_token`` answers a
``(group, accelerator, index)`` tuple or ``None`` for any string -- a 5,000-digit index included, where
``int()`` raises past 4,300 digits -- and never raises."""

from __future__ import annotations

import pytest
from gpustack_operator.allocator.resources import MAX_INDEX_DIGITS, parse_token, token_id
from hypothesis import example, given
from hypothesis import strategies as st

from tests.unit.hostile import hostile_numbers, hostile_text


@pytest.mark.parametrize("digits", [4301, 5000, 100_000])
def test_an_index_too_long_to_be_one_is_no_token(digits: int) -> None:
    assert parse_token("g:GPU-a:" + "7" * digits) is None
    assert parse_token("g:0000:03:00.0:" + "1" * digits) is None


def test_an_index_of_the_longest_length_still_parses() -> None:
    index = 10**MAX_INDEX_DIGITS - 1
    assert parse_token(token_id("g", "GPU-a", index)) == ("g", "GPU-a", index)
    assert parse_token("g:GPU-a:" + "9" * (MAX_INDEX_DIGITS + 1)) is None


_PIECES = st.sampled_from(["g", "amd-mi300x", "GPU-a", "0000:03:00.0", ":", "::", "0", "0007", "٣", "²", " ", ""])
TOKENS = st.one_of(
    hostile_text(),
    st.builds(lambda g, a, i: f"{g}:{a}:{i}", hostile_text(), hostile_text(), hostile_numbers()),
    st.lists(_PIECES | hostile_numbers(), max_size=8).map("".join),
)


@pytest.mark.hostile
@given(TOKENS)
@example("g:a:" + "1" * 5000)
@example("g:a:" + "0" * 5000 + "1")
def test_parse_token_answers_a_tuple_or_none_for_anything(token: str) -> None:
    parsed = parse_token(token)
    if parsed is None:
        return
    group, accelerator, index = parsed
    assert group and ":" not in group and accelerator
    assert isinstance(index, int) and 0 <= index < 10**MAX_INDEX_DIGITS
    assert token == f"{group}:{accelerator}:{token.rpartition(':')[2]}"
    assert int(token.rpartition(":")[2]) == index
