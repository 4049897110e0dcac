"""Pure helpers split out of the replacement plan (populora/population/evolution.py) and the PFSP
pairing (populora/population/ratings.py): the rules their callers' results depend on.

    python -m pytest tests/test_replacement_pairing_helpers.py -q
"""

from __future__ import annotations

import doctest

import numpy as np

from populora.population import evolution
from populora.population.evolution import _newborn_record, _parent_pool
from populora.population.ratings import _cheapest_move, _cover_every_teacher


def test_evolution_doctests():
    assert doctest.testmod(evolution).failed == 0


def test_parent_pool_defaults_to_half_but_at_least_two_and_never_more_than_survive():
    survivors = [{"id": f"m{i}"} for i in range(5)]
    assert len(_parent_pool(survivors, 6, None)) == 3
    assert len(_parent_pool(survivors, 3, None)) == 2
    assert len(_parent_pool(survivors[:1], 2, None)) == 1
    assert len(_parent_pool(survivors, 6, 0)) == 1  # never empty


def test_a_newborn_weighs_as_one_reward_at_its_parents_mean_fitness():
    assert _newborn_record([1.0, 0.0], True) == {"count": 1, "sum": 0.5, "sumsq": 0.25}
    assert _newborn_record([30.0, 10.0], False) == {"count": 0, "sum": 0.0}


def test_cheapest_move_ties_keep_the_first_student_then_donor():
    counts = np.array([[0, 0], [2, 2], [2, 2]])
    weights = np.full((3, 2), 1 / 3)
    assert _cheapest_move(counts, weights, 0) == (0, 1)


def test_cheapest_move_needs_a_donor_with_a_spare_slot():
    assert _cheapest_move(np.array([[0, 0], [1, 0], [0, 1]]), np.full((3, 2), 1 / 3), 0) is None


def test_cover_every_teacher_adds_a_slot_when_students_are_too_few():
    counts = np.array([[1], [0]])
    repairs = _cover_every_teacher(counts, np.array([[0.5], [0.5]]), ["t0", "t1"], ["s0"])
    assert counts.tolist() == [[1], [1]]
    assert repairs == [{"teacher": "t1", "student": "s0", "from_teacher": None}]
