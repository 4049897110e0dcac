"""ModelRef: the one place a model's name is built, and roles travel with it through artifacts."""

from __future__ import annotations

import doctest

import pytest

from populora.core import refs
from populora.core.refs import BASE_REF, SOLO, STUDENT, TEACHER, ModelRef, arm_refs, arm_slots
from populora.core.state import State


def test_doctests():
    assert doctest.testmod(refs).failed == 0


def test_names_roles_and_round_trip():
    assert BASE_REF.name == "base" and BASE_REF.is_base and not BASE_REF.solves
    solo = ModelRef("baseline", SOLO, SOLO)
    assert solo.name == "baseline-solo" and solo.solves and solo.proposes
    for ref in (BASE_REF, solo, ModelRef("population", "teacher1", TEACHER)):
        assert ModelRef.from_fields(ref.fields()) == ref


def test_bad_refs_fail_clearly():
    with pytest.raises(ValueError, match="no slot or role"):
        ModelRef("base", "solo", SOLO)
    with pytest.raises(ValueError, match="must not contain '-'"):
        ModelRef("my-arm", "student0", STUDENT)
    with pytest.raises(ValueError, match="role of population-student0"):
        ModelRef("population", "student0", "judge")
    with pytest.raises(KeyError, match="rerun its bench"):
        ModelRef.from_fields({"model": "population-student0"})
    with pytest.raises(ValueError, match="does not match"):
        ModelRef.from_fields({**ModelRef("population", "student0", STUDENT).fields(), "model": "population-student1"})


def test_slots_and_refs_of_arms():
    assert arm_slots("population", 2, 1) == {"teachers": ["teacher0", "teacher1"], "students": ["student0"]}
    assert arm_slots("baseline", 2, 1) == {"teachers": ["solo"], "students": ["solo"]}
    assert [r.role for r in arm_refs("population", 1, 2)["students"]] == [STUDENT, STUDENT]
    assert arm_refs("baseline", 4, 4)["teachers"] == [ModelRef("baseline", SOLO, SOLO)]


def test_state_gives_each_slot_its_role():
    state = State("population", 0, ["teacher0"], ["student0"], {}, {}, [])
    assert state.ref("teacher0") == ModelRef("population", "teacher0", TEACHER)
    assert state.ref("student0").role == STUDENT
    assert State("baseline", 0, ["solo"], ["solo"], {}, {}, []).ref("solo").role == SOLO
    with pytest.raises(KeyError, match="no slot"):
        state.ref("student9")
