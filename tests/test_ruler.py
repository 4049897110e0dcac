"""Pool v2 (populora/heldout/ruler.py, candidates.py): typed random inputs, the constant filter, the
calibration window and the best constant answer, on the real sandbox."""

import doctest
import random

import pytest

from populora.config import VerifySection
from populora.heldout import candidates, ruler
from populora.heldout.candidates import FAMILIES, draw_like, family_candidates, redraw_inputs, split_arguments
from populora.heldout.ruler import arity, best_constant, constant_answers, constant_verdicts, frequent_golds, select
from populora.verifier import sandbox_for, verify_rows


def test_draw_like_keeps_type_and_shape():
    rng = random.Random(0)
    for value in (10, -3, 2.5, "hello", "HeLLo", "12", [1, 2, 3], ("a", "b"), {"k": 1}, True, None, []):
        drawn = draw_like(value, rng)
        assert type(drawn) is type(value), (value, drawn)
    assert any(draw_like("HeLLo", rng) != "HeLLo" for _ in range(5))
    assert all(isinstance(x, int) for x in draw_like([1, 2, 3], rng))


def test_redrawn_inputs_are_rarely_the_models_favourite_literals():
    rows = [{"task_id": f"t{i}", "program": "def f(x):\n    return x", "inputs": ["10"]} for i in range(200)]
    drawn = redraw_inputs(rows, random.Random(0), per_program=1)
    assert len(drawn) == 400 and {r["type"] for r in drawn} == {"code_o", "code_i"}
    values = [r["inputs"][0] for r in drawn if r["type"] == "code_o"]
    assert values.count("10") < 10  # 1 in 100 expected
    assert split_arguments("f(1)") is None or split_arguments("1, 'a'") == [1, "a"]
    assert redraw_inputs([{"task_id": "x", "program": "def f(x): return x", "inputs": ["g(1)"]}], random.Random(0)) == []


def test_families_are_seeded_and_each_task_draws_its_own_constants():
    a, b = family_candidates(4, 0), family_candidates(4, 0)
    assert a == b and len(a) == 4 * 2 * len(FAMILIES)
    affine = [t["program"] for t in a if t["task_id"].startswith("increment-code_o")]
    assert len(set(affine)) > 1


def test_arity_and_constant_answers():
    assert arity("def f(a, b):\n    return a") == 2 and arity("x = 1") is None
    code_i = {"type": "code_i", "program": "def f(a, b):\n    return a + b", "inputs": ["3, 4"], "outputs": ["7"]}
    answers = constant_answers(code_i, {"code_o": [], "code_i": ["1, 2", "5"]})
    assert "10, 10" in answers and "1, 2" in answers and "5" not in answers  # arity-matched
    assert "7, 7" in answers  # the output handed back as every argument
    code_o = {"type": "code_o", "program": "def f(xs):\n    return xs[0]", "inputs": ["[4, 5]"], "outputs": ["4"]}
    answers = constant_answers(code_o, {"code_o": ["9"], "code_i": []})
    assert {"[4, 5]", "9", "0", "[0, 2, 4]"} <= set(answers)


def test_select_keeps_the_calibration_window_one_task_per_program_and_a_cap_per_family():
    calibrated = [{"task_id": f"t{i}", "type": "code_o", "program": f"def f(x):\n    return x + {i % 5}",
                   "source": "family:affine", "base_correct": c} for i, c in enumerate([0, 1, 5, 9, 10, 16] * 5)]
    calibrated += [{"task_id": f"m{i}", "type": "code_o", "program": f"def f(x):\n    return x * {i}",
                    "source": "model:heldout-code_o-1", "base_correct": 4} for i in range(3)]
    pool = select(calibrated, samples=16, low=0.05, high=0.6, per_type=10, per_family=3, seed=0)
    assert all(1 <= t["base_correct"] <= 9 for t in pool)
    assert sum(t["source"] == "family:affine" for t in pool) == 3  # the cap
    assert len({t["program"] for t in pool}) == len(pool)  # one task per program text
    assert sum(t["source"].startswith("model") for t in pool) == 3


@pytest.fixture(scope="module")
def sandbox():
    with sandbox_for(VerifySection()) as box:
        yield box


def test_the_constant_filter_drops_what_a_constant_solves(sandbox):
    rows = verify_rows([
        {"task_id": "zero", "type": "code_o", "program": "def f(x):\n    return x - x", "inputs": ["37"], "message": None},
        {"task_id": "real", "type": "code_o", "program": "def f(x):\n    return x * 7 + 3", "inputs": ["37"], "message": None},
        {"task_id": "echo", "type": "code_i", "program": "def f(s):\n    return ''.join(sorted(s))", "inputs": ["'bca'"],
         "message": None},
        {"task_id": "inv", "type": "code_i", "program": "def f(x):\n    return x * 7 + 3", "inputs": ["37"], "message": None},
    ], VerifySection(), sandbox=sandbox)
    tasks = [{k: r[k] for k in ("task_id", "type", "program", "inputs", "outputs", "message")} for r in rows]
    frequent = frequent_golds(tasks)
    passed = constant_verdicts(tasks, {t["task_id"]: constant_answers(t, frequent) for t in tasks}, VerifySection(), sandbox)
    assert passed["zero"] and not passed["real"]  # 0 solves x - x
    assert passed["echo"] and not passed["inv"]  # sorted('abc') hands 'abc' back


def test_best_constant_is_computed_on_the_pool(sandbox):
    pool = [{"task_id": f"t{k}", "type": "code_o", "program": "def f(x):\n    return x % 3", "inputs": [str(k)],
             "outputs": [repr(k % 3)], "message": None} for k in range(10, 19)]
    out = best_constant(pool, VerifySection(), sandbox)["code_o"]
    assert out["correct"] == 3 and out["n"] == 9 and out["answer"] in {"0", "1", "2"}
    assert out["copy_correct"] == 0


def test_doctests():
    for module in (candidates, ruler):
        result = doctest.testmod(module)
        assert result.failed == 0


def test_calibration_stops_a_type_once_it_is_full_and_resumes_from_what_it_measured():
    from populora.heldout.ruler import calibrate, calibration_order

    tasks = [{"task_id": f"{tt}-{i}", "type": tt, "program": f"p{i}", "source": f"family:f{i % 3}"}
             for tt in ("code_o", "code_i") for i in range(20)]
    order = calibration_order(tasks, seed=0)
    assert sorted(t["task_id"] for t in order) == sorted(t["task_id"] for t in tasks)
    assert {order[0]["type"], order[1]["type"]} == {"code_o", "code_i"}  # types alternate from the start
    measured = []

    def measure(batch):
        measured.extend(t["task_id"] for t in batch)
        return {t["task_id"]: 3 for t in batch}

    def enough(done):  # code_o is full after 4 tasks
        return {"code_o"} if sum(tid.startswith("code_o") for tid in done) >= 4 else set()

    done = calibrate(order, {"code_i-0": 1}, measure, chunk=4, enough=enough)
    assert "code_i-0" not in measured  # resumed: not measured again
    assert sum(tid.startswith("code_o") for tid in done) == 4 and sum(tid.startswith("code_i") for tid in done) == 20
