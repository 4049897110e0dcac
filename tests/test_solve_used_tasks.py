"""stages.solve writes each task a student was given once, however many students share it."""

from __future__ import annotations

from stages.solve import _used_tasks


def test_a_task_given_to_two_students_is_written_once_in_first_given_order():
    a, b, c = ({"task_id": name, "type": "code_o"} for name in "abc")
    assignment = {
        "student0": {"code_o": [a, b], "code_i": []},
        "student1": {"code_o": [c, a]},
    }
    assert [t["task_id"] for t in _used_tasks(assignment)] == ["a", "b", "c"]
    assert _used_tasks({}) == []
