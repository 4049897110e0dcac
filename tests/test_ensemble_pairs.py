"""The ensemble control (`pairing.strategy: pairs`): teacher k serves student k only, and every pair
reads only the seeds and its own tasks (references, code_f programs, duplicate checks, fill-ins, worked
examples, the buffer cap), so no task of another pair reaches a teacher's prompt or a student."""

from __future__ import annotations

import json
import random

import pytest
import yaml

from populora.config import ParamsError, parse_params
from populora.population.ratings import pairs_pairing
from populora.tasks.roles import assign_tasks, buffer_of, mark_pair_duplicates, proposer_jobs, solver_jobs
from populora.tasks.tasks import extend_buffer, extend_pair_buffers, seed_proposals

TEACHERS, STUDENTS = ["teacher0", "teacher1"], ["student0", "student1"]
# structurally different programs per pair (normalised ASTs differ), each with a marker its prompts show
PROGRAMS = {
    "teacher0": "def f(a):\n    return a + 'T0MARK'",
    "teacher1": "def f(a, b):\n    return {a: b, 'T1MARK': a}",
}
INPUTS = {"teacher0": "'x'", "teacher1": "1, 2"}
OUTPUTS = {"teacher0": "'xT0MARK'", "teacher1": "{1: 2, 'T1MARK': 1}"}


def chat(prompt: str) -> str:
    return f"<user>{prompt}</user><assistant>"


def _seeds() -> list[dict]:
    rows = seed_proposals("builtin")
    for row in rows:
        row["outputs"] = ["0"] * len(row["inputs"])
        row["valid"] = True
    return extend_buffer([], rows, 1000)


def _task(teacher: str, task_type: str, k: int, gen: int = 0, **extra) -> dict:
    n = 10 if task_type == "code_f" else 1
    return {
        "task_id": f"population-g{gen:03d}-{teacher}-{task_type}-{k}",
        "type": task_type,
        "program": PROGRAMS[teacher],
        "inputs": [INPUTS[teacher]] * n,
        "outputs": [OUTPUTS[teacher]] * n,
        "message": "m" if task_type == "code_f" else None,
        "gen": gen,
        "origin": "proposed",
        "teacher": teacher,
        "valid": True,
        "parse_reason": None,
        **extra,
    }


def _buffer(per_teacher: int = 12) -> list[dict]:
    """Seeds, then many tasks of both pairs: a draw that ignored the pairs would surely hit the other pair."""
    tasks = [_task(t, tt, k) for t in TEACHERS for tt in ("code_o", "code_i", "code_f") for k in range(per_teacher)]
    return extend_buffer(_seeds(), tasks, 10_000)


def _allowed(buffer: list[dict], teacher: str) -> set[str]:
    return {b["task_id"] for b in buffer if b["origin"] == "seed" or b["teacher"] == teacher}


def _pairing() -> dict:
    return pairs_pairing(TEACHERS, STUDENTS, slots_per_student=2)


def test_pairs_pairing_gives_teacher_k_every_slot_of_student_k():
    pairing = _pairing()
    assert pairing["scheme"] == "pairs" and pairing["pairs"] == {"teacher0": "student0", "teacher1": "student1"}
    assert pairing["counts"] == {"teacher0": {"student0": 2, "student1": 0}, "teacher1": {"student0": 0, "student1": 2}}
    with pytest.raises(ValueError, match="as many teachers as students"):
        pairs_pairing(["t0", "t1", "t2"], ["s0", "s1"])


def test_params_refuse_unequal_pairs_and_evolution_naming_the_key_and_the_fix():
    raw = yaml.safe_load(open("params.yaml"))
    raw["pairing"] = {**raw["pairing"], "strategy": "pairs"}
    with pytest.raises(ParamsError, match=r"evolve.replace: .*Fix: Set evolve.replace: 0"):
        parse_params(raw)
    raw["evolve"] = {**raw["evolve"], "replace": 0}
    assert parse_params(raw).pairing.strategy == "pairs"  # the ensemble control, as scripts/study.sh runs it
    raw["population"] = {"teachers": 3, "students": 2}
    with pytest.raises(ParamsError, match=r"population.teachers: .*\(got 3\)\. Fix: Set population.teachers equal"):
        parse_params(raw)
    raw["population"] = {"teachers": 1, "students": 1}
    raw["evolve"]["replace"] = 1  # a sub-population of one is never replaced: nothing crosses
    assert parse_params(raw).population.teachers == 1


def test_a_teachers_references_and_code_f_programs_come_from_its_own_pair():
    buffer = _buffer()
    for seed in range(5):
        jobs = proposer_jobs(
            TEACHERS,
            buffer,
            per_type=4,
            references=3,
            n_inputs=10,
            mode="scaffolded",
            chat=chat,
            rng=random.Random(seed),
            arm="population",
            gen=1,
            pairing=_pairing(),
        )
        for meta, plan in jobs:
            allowed, other = _allowed(buffer, meta["teacher"]), "T1MARK" if meta["teacher"] == "teacher0" else "T0MARK"
            assert set(meta.get("references", [])) <= allowed
            assert meta.get("source_task", next(iter(allowed))) in allowed
            assert other not in plan.prompt  # no other pair's program in the teacher's prompt
    # without pairs every teacher reads the whole buffer (and the draws are those of before)
    shared = proposer_jobs(
        TEACHERS,
        buffer,
        per_type=4,
        references=3,
        n_inputs=10,
        mode="scaffolded",
        chat=chat,
        rng=random.Random(0),
        arm="population",
        gen=1,
    )
    before = proposer_jobs(
        TEACHERS,
        buffer,
        per_type=4,
        references=3,
        n_inputs=10,
        mode="scaffolded",
        chat=chat,
        rng=random.Random(0),
        arm="population",
        gen=1,
        pairing={"scheme": "pfsp"},
    )
    assert [m for m, _ in shared] == [m for m, _ in before]
    assert any("T1MARK" in plan.prompt for meta, plan in shared if meta["teacher"] == "teacher0")


@pytest.mark.parametrize("fill_in", ["newest", "uniform"])
def test_a_student_solves_only_its_teachers_tasks_and_fill_ins_and_examples_of_its_pair(fill_in):
    buffer = _buffer()
    # this generation: teacher0 has one valid task per type, teacher1 none (its student is filled in from the buffer)
    tasks = [_task("teacher0", tt, 0, gen=1) for tt in ("code_o", "code_i", "code_f")]
    tasks += [_task("teacher1", tt, 0, gen=1, valid=False) for tt in ("code_o", "code_i", "code_f")]
    pairing = _pairing()
    assignment = assign_tasks(pairing, tasks, buffer, fill_in=fill_in, rng=random.Random(3))
    jobs = solver_jobs(
        assignment,
        buffer,
        samples=4,
        worked_examples=2,
        mode="scaffolded",
        chat=chat,
        rng=random.Random(4),
        pairing=pairing,
    )
    for student, teacher in (("student0", "teacher0"), ("student1", "teacher1")):
        allowed = _allowed(buffer, teacher) | {t["task_id"] for t in tasks if t["teacher"] == teacher}
        given = [t for by_type in assignment[student].values() for t in by_type]
        assert given and {t["task_id"] for t in given} <= allowed
        assert all(t.get("author") in (None, teacher) for t in given)
        mine = [(meta, plan) for meta, plan in jobs if meta["student"] == student]
        assert mine and all(set(meta["examples"]) <= allowed for meta, _ in mine)
        other = "T1MARK" if teacher == "teacher0" else "T0MARK"
        assert not any(other in plan.prompt for _, plan in mine)
    # student1's fill-ins are its own pair's old tasks or seeds, never teacher0's
    assert all(t["origin"] == "buffer" for by_type in assignment["student1"].values() for t in by_type)


def test_duplicates_are_judged_against_the_pairs_own_buffer():
    buffer = extend_buffer(_seeds(), [_task("teacher1", "code_o", 0)], 1000)
    copy_of_t1 = {**_task("teacher0", "code_o", 9, gen=1), "program": PROGRAMS["teacher1"], "valid": None}
    copy_of_t1_by_t1 = {**copy_of_t1, "teacher": "teacher1", "task_id": "x"}
    marked = mark_pair_duplicates([copy_of_t1, copy_of_t1_by_t1], buffer, _pairing())
    assert marked[0]["parse_reason"] is None  # teacher0 never saw teacher1's program
    assert marked[1]["parse_reason"] == "duplicate"  # teacher1 did
    shared = mark_pair_duplicates([copy_of_t1, copy_of_t1_by_t1], buffer, None)
    assert [r["parse_reason"] for r in shared] == ["duplicate", "duplicate"]


def test_the_buffer_cap_holds_per_pair():
    seeds = _seeds()
    cap = len(seeds) + 3
    old = [_task("teacher0", "code_o", k, gen=0) for k in range(3)] + [
        _task("teacher1", "code_o", k, gen=0) for k in range(2)
    ]
    new = [_task("teacher0", "code_o", k, gen=1) for k in range(2)]
    out = extend_pair_buffers(extend_buffer(seeds, old, 10_000), new, cap, _pairing())
    ids = [t["task_id"] for t in out]
    assert ids[: len(seeds)] == [s["task_id"] for s in seeds]
    # teacher0 keeps its 3 newest (oldest two dropped); teacher1's 2 untouched by teacher0's growth
    assert [i for i in ids if "teacher0" in i] == [
        "population-g000-teacher0-code_o-2",
        "population-g001-teacher0-code_o-0",
        "population-g001-teacher0-code_o-1",
    ]
    assert [i for i in ids if "teacher1" in i] == [
        "population-g000-teacher1-code_o-0",
        "population-g000-teacher1-code_o-1",
    ]
    assert buffer_of(out, _pairing(), student="student1") == [t for t in out if "teacher0" not in t["task_id"]]


def test_propose_and_solve_stages_keep_the_pairs_apart_on_the_tiny_model(tiny_model_dir, tiny_params_dict, tmp_path):
    """init -> pair (pairs) -> propose -> solve on the tiny model, with a buffer that holds both pairs' tasks:
    every reference, code_f program, fill-in and worked example a pair sees is a seed or its own."""
    from populora.core.rows import BufferEntry, write_rows
    from populora.core.state import BUFFER, load_buffer
    from stages import init, pair, propose, solve

    raw = {
        **tiny_params_dict,
        "dag": {**tiny_params_dict["dag"], "arms": ["population"]},
        "pairing": {**tiny_params_dict["pairing"], "strategy": "pairs"},
        "evolve": {**tiny_params_dict["evolve"], "replace": 0},
        "propose": {**tiny_params_dict["propose"], "references": 3},
        "solve": {**tiny_params_dict["solve"], "tasks_per_type": 2, "worked_examples": 2},
    }
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    common = ["--params", str(params), "--arm", "population"]
    state = tmp_path / "init"
    assert init.main([*common, "--base-model", str(tiny_model_dir), "--checkpoint", str(state)]) == 0
    entries = [{k: t[k] for k in BufferEntry.model_fields} for t in _buffer(per_teacher=6)[len(_seeds()) :]]
    write_rows(state / BUFFER, [*load_buffer(state), *entries], BufferEntry)
    buffer = load_buffer(state)
    gen = tmp_path / "gen001"
    gen.mkdir()
    assert pair.main([*common, "--gen", "1", "--state", str(state), "--pairing", str(gen / "pairing.json")]) == 0
    assert json.loads((gen / "pairing.json").read_text())["pairs"] == {"teacher0": "student0", "teacher1": "student1"}
    assert (
        propose.main(
            [
                *common,
                "--gen",
                "1",
                "--base-model",
                str(tiny_model_dir),
                "--state",
                str(state),
                "--pairing",
                str(gen / "pairing.json"),
                "--proposals",
                str(gen / "proposals.jsonl"),
            ]
        )
        == 0
    )
    proposals = [json.loads(line) for line in (gen / "proposals.jsonl").read_text().splitlines()]
    assert {p["teacher"] for p in proposals} == set(TEACHERS)
    for row in proposals:
        allowed = _allowed(buffer, row["teacher"])
        assert set(row.get("references") or []) <= allowed and row.get("source_task", next(iter(allowed))) in allowed
    # this generation's tasks: teacher0 one valid task per type, teacher1 none (student1 gets fill-ins)
    tasks = [
        _task("teacher0", tt, 0, gen=1, arm="population", reason=None, segments=[], tokens=0)
        for tt in ("code_o", "code_i", "code_f")
    ]
    (gen / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in tasks))
    assert (
        solve.main(
            [
                *common,
                "--gen",
                "1",
                "--base-model",
                str(tiny_model_dir),
                "--state",
                str(state),
                "--pairing",
                str(gen / "pairing.json"),
                "--tasks",
                str(gen / "tasks.jsonl"),
                "--answers",
                str(gen / "answers.jsonl"),
                "--solve-tasks",
                str(gen / "solve_tasks.jsonl"),
            ]
        )
        == 0
    )
    answers = [json.loads(line) for line in (gen / "answers.jsonl").read_text().splitlines()]
    assert {a["student"] for a in answers} == set(STUDENTS)
    for answer in answers:
        teacher = "teacher0" if answer["student"] == "student0" else "teacher1"
        allowed = _allowed(buffer, teacher) | ({t["task_id"] for t in tasks} if teacher == "teacher0" else set())
        assert answer["task_id"] in allowed and set(answer["examples"]) <= allowed, answer
