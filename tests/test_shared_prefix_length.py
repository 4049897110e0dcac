"""How much of a batch's common prefix `shared_prefill` computes once (`_shared_length`), and the module's doctests."""

from __future__ import annotations

import doctest

import populora.lm.prefix_cache as prefix_cache
from populora.lm.prefix_cache import MIN_SHARED_PREFIX, _shared_length


def test_the_shared_prefix_is_the_common_prefix_short_of_the_tails():
    contexts = [list(range(30)), list(range(20)) + [99] * 5]
    assert _shared_length(contexts, [1, 1]) == 20
    # a row needs the logits of its last 8 positions: the prefix stops before them
    assert _shared_length(contexts, [1, 8]) == 25 - 8
    assert _shared_length([list(range(10))] * 3, [1, 1, 1]) == 9  # identical contexts: all but the last token


def test_a_prefix_below_the_minimum_is_not_shared():
    short = MIN_SHARED_PREFIX - 1
    assert _shared_length([list(range(short)) + [1], list(range(short)) + [2]], [1, 1]) == 0
    assert _shared_length([list(range(MIN_SHARED_PREFIX)) + [1], list(range(MIN_SHARED_PREFIX)) + [2]], [1, 1]) == (
        MIN_SHARED_PREFIX
    )
    assert _shared_length([[1, 2, 3], [4, 5, 6]], [1, 1]) == 0


def test_doctests():
    assert doctest.testmod(prefix_cache).failed == 0
