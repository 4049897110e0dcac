"""The task families (populora/tasks/families.py): programs that vary, a split by program text that the warm
start, its validation and the held-out pool never cross, and the copy and echo baselines."""

import ast
import doctest
import random
from itertools import islice

import pytest

from populora.config import VerifySection
from populora.tasks import families
from populora.tasks.families import (
    FAMILIES,
    PRIMITIVES,
    draw_arguments,
    draw_program,
    family_tasks,
    held_out_kind,
    is_reserved,
    programs,
    split_of,
    split_tasks,
)
from populora.verifier import sandbox_for
from populora.verifier.baselines import arity, baseline_verdicts, echo_answers


def test_doctests():
    assert doctest.testmod(families).failed == 0


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_a_family_writes_many_programs_that_parse_and_take_its_arguments(name):
    rng = random.Random(0)
    drawn = [draw_program(name, rng) for _ in range(200)]
    texts = {p.text for p in drawn}
    assert len(texts) >= 40, f"{name}: only {len(texts)} distinct programs in 200 draws"
    for program in drawn[:50]:
        tree = ast.parse(program.text)
        (function,) = tree.body
        assert function.name == "f" and len(function.args.args) == len(FAMILIES[name].params)
        arguments = draw_arguments(program.params, rng)
        assert len(ast.parse(f"f({arguments})", mode="eval").body.args) == len(program.params)


def test_programs_are_seeded():
    first = [p.text for p in islice(programs("train", 3), 30)]
    assert first == [p.text for p in islice(programs("train", 3), 30)]
    assert first != [p.text for p in islice(programs("train", 4), 30)]


def test_the_three_splits_never_share_a_program_text():
    drawn = {split: [p for p in islice(programs(split, 0), 600)] for split in ("train", "validation", "pool")}
    texts = {split: {p.text for p in ps} for split, ps in drawn.items()}
    assert not texts["train"] & texts["validation"]
    assert not texts["train"] & texts["pool"]
    assert not texts["validation"] & texts["pool"]
    # what the train stream draws really is train, and the other streams hold whole families and unseen compositions
    assert all(split_of(p) == "train" and held_out_kind(p) is None for p in drawn["train"])
    for split in ("validation", "pool"):
        kinds = {held_out_kind(p) for p in drawn[split]}
        assert kinds == {"family", "composition"}, (split, kinds)
    # the pool-only families (wide-spread outputs) are drawn for the pool alone: the validation split, which chose
    # the warm start's budget, holds none of them
    pool_only = {name for name, family in FAMILIES.items() if family.split == "pool"}
    assert pool_only and not pool_only & {p.family for p in drawn["validation"]}
    assert pool_only & {p.family for p in drawn["pool"]}
    # a reserved composition of a train family never reaches training, whatever seed draws it
    reserved = {
        p.composition for split in ("validation", "pool") for p in drawn[split] if held_out_kind(p) == "composition"
    }
    assert reserved and all(is_reserved(c) for c in reserved)
    assert not reserved & {p.composition for p in islice(programs("train", 7), 2000)}


def test_unseen_compositions_are_made_of_trained_primitives():
    trained = {name for p in islice(programs("train", 0), 3000) for name in p.composition[1:] if name in PRIMITIVES}
    unseen = [p for p in islice(programs("validation", 0), 600) if held_out_kind(p) == "composition"]
    assert unseen
    for program in unseen:
        used = {name for name in program.composition[1:] if name in PRIMITIVES}
        assert used <= trained, (program.text, used - trained)


def test_split_tasks_make_both_types_of_each_program():
    rows = split_tasks("validation", 10, 0)
    assert len(rows) == 20
    by_program = {}
    for row in rows:
        by_program.setdefault((row["program"], row["inputs"][0]), set()).add(row["type"])
        assert row["split"] == "validation" and row["held_out"] in ("family", "composition")
    assert all(types == {"code_o", "code_i"} for types in by_program.values())
    assert len({r["task_id"] for r in rows}) == len(rows)


def test_family_tasks_keep_heldout_programs_out_of_training():
    tasks = family_tasks("list_then_arith", heldout=30, train=60, seed=0)
    assert len(tasks["heldout"]) == 30 and len(tasks["train"]) == 60
    assert not {t["program"] for t in tasks["heldout"]} & {t["program"] for t in tasks["train"]}
    assert all(t["type"] == "code_o" for rows in tasks.values() for t in rows)
    with pytest.raises(ValueError, match="unknown task family"):
        family_tasks("nope", heldout=1, train=1, seed=0)


def test_echo_answers_hand_the_output_back_for_each_parameter():
    assert arity("def f(a, b):\n    return a") == 2 and arity("x = 1") is None
    task = {"type": "code_i", "program": "def f(a, b):\n    return max(a, b)", "outputs": ["7"]}
    assert echo_answers(task) == ["7", "7, 7"]


def test_the_echo_baseline_is_graded_in_the_sandbox():
    tasks = [
        {
            "task_id": "sorted",
            "type": "code_i",
            "program": "def f(xs):\n    return sorted(xs)",
            "inputs": ["[3, 1, 2]"],
            "outputs": ["[1, 2, 3]"],
        },
        {
            "task_id": "maxpair",
            "type": "code_i",
            "program": "def f(a, b):\n    return max(a, b)",
            "inputs": ["3, 7"],
            "outputs": ["7"],
        },
        {
            "task_id": "plus",
            "type": "code_i",
            "program": "def f(x):\n    return x + 1",
            "inputs": ["4"],
            "outputs": ["5"],
        },
        {
            "task_id": "first",
            "type": "code_o",
            "program": "def f(xs, k):\n    return k",
            "inputs": ["[1, 2], 5"],
            "outputs": ["5"],
        },
        {
            "task_id": "sum",
            "type": "code_o",
            "program": "def f(xs):\n    return sum(xs)",
            "inputs": ["[1, 2]"],
            "outputs": ["3"],
        },
    ]
    config = VerifySection(workers=1)
    with sandbox_for(config) as box:
        verdicts = baseline_verdicts(tasks, config, sandbox=box)
    assert verdicts == {
        "sorted": {"echo": True},
        "maxpair": {"echo": True},
        "plus": {"echo": False},
        "first": {"copy": True},
        "sum": {"copy": False},
    }
