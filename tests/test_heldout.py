"""The held-out pool: what enters it (pure), that training can never see it (verify's `heldout`
reason), its metrics and paired report table, and its two stages on the tiny model."""

from __future__ import annotations

import json

import pytest
import yaml

from populora.heldout.pool import accept_into_pool, attach_examples, first_alike, mark_heldout
from populora.heldout.scoring import heldout_metrics, scoring_jobs, verdict_table
from populora.tasks.tasks import BUILTIN_SEEDS, program_key, seed_proposals
from populora.verifier import verify_rows


def _task(task_id, program, inputs, task_type="code_o"):
    return {"task_id": task_id, "type": task_type, "program": program, "inputs": [inputs], "message": None}


@pytest.fixture(scope="module")
def verified():
    rows = [
        _task("p0", "def f(a):\n    return a + 1", "3"),
        _task("p1", "def f(b):\n    return b + 7", "5"),  # same program as p0 once names/constants are normalised
        _task("p2", "def f(xs):\n    return sorted(xs)[0]", "[3, 1, 2]", "code_i"),
        _task("p3", "def f(x):\n    return x", "'hi'"),  # copyable: echoing the input is right
        _task("p4", "def f(x):\n    return 1 / 0", "1"),  # invalid: raises
        _task("p5", "def f(s):\n    return s.upper()", "'ab'"),
        _task("p6", "def f(s):\n    return len(s) * 2", "'abc'"),
    ]
    return verify_rows(rows)


def seeds():
    return verify_rows(seed_proposals("builtin"))


def test_pool_takes_valid_new_uncopyable_programs_up_to_per_type(verified):
    pool = accept_into_pool([], verified, seeds(), per_type=2)
    assert [(t["task_id"], t["source"]) for t in pool] == [
        ("heldout-code_o-000", "p0"),
        ("heldout-code_i-000", "p2"),
        ("heldout-code_o-001", "p5"),
    ]
    assert all(t["outputs"] for t in pool)
    # a later round adds only what is new, and never past per_type
    more = accept_into_pool(pool, verified, seeds(), per_type=3)
    assert [t["source"] for t in more] == ["p0", "p2", "p5", "p6"]


def test_pool_leaves_out_seed_programs():
    seed_rows = seeds()
    again = [{**row, "task_id": f"copy-{row['task_id']}"} for row in seed_rows]
    assert accept_into_pool([], again, seed_rows, per_type=10) == []
    assert BUILTIN_SEEDS  # the builtin seeds are what the pipeline's buffer starts from


def test_examples_are_fixed_per_task_and_never_the_task_program(verified):
    pool = accept_into_pool([], verified, seeds(), per_type=2)
    first = attach_examples(pool, seeds(), 2, seed=5)
    assert first == attach_examples(pool, seeds(), 2, seed=5)
    for task in first:
        assert task["examples"] and all(e["type"] == task["type"] for e in task["examples"])
        assert all(program_key(e["program"]) != program_key(task["program"]) for e in task["examples"])


def test_verify_refuses_pool_programs_so_training_never_sees_them(verified):
    pool = accept_into_pool([], verified, seeds(), per_type=2)
    marked = mark_heldout(verified, pool)
    assert {r["task_id"]: r["reason"] for r in marked if r["reason"] == "heldout"} == {
        "p0": "heldout",
        "p1": "heldout",
        "p2": "heldout",
        "p5": "heldout",
    }  # p1: p0's program, renamed
    assert [r["valid"] for r in marked if r["task_id"] in ("p3", "p6")] == [True, True]
    assert mark_heldout(verified, []) == verified


def test_every_member_sees_the_same_prompt(verified):
    pool = attach_examples(accept_into_pool([], verified, seeds(), per_type=2), seeds(), 1, seed=0)
    jobs = scoring_jobs(pool, ["a", "b", None], mode="scaffolded", chat=lambda p: f"<u>{p}</u>")
    assert len(jobs) == 3 * len(pool)
    by_member = {}
    for meta, plan in jobs:
        by_member.setdefault(meta["member"], []).append(plan)
    assert set(by_member) == {"a", "b", "base"}
    assert by_member["a"] == by_member["b"] == by_member["base"]


def test_metrics_per_member_role_and_type():
    pool = [
        {"task_id": "o1", "type": "code_o"},
        {"task_id": "o2", "type": "code_o"},
        {"task_id": "i1", "type": "code_i"},
    ]
    graded = [
        {"member": "s0", "task_id": "o1", "correct": True},
        {"member": "s0", "task_id": "o2", "correct": False},
        {"member": "s0", "task_id": "i1", "correct": True},
        {"member": "s1", "task_id": "o1", "correct": False},
    ]
    table = verdict_table(graded)
    metrics = heldout_metrics(table, pool, {"students": ["s0", "s1"]})
    assert metrics["heldout.s0.accuracy"] == pytest.approx(2 / 3)
    assert metrics["heldout.s1.accuracy"] == 0  # no verdict counts wrong
    assert (metrics["heldout.students.correct"], metrics["heldout.students.n"]) == (2, 6)
    assert metrics["heldout.s0.code_o.accuracy"] == 0.5 and metrics["heldout.s0.code_i.accuracy"] == 1


def test_report_table_pairs_arms_and_base_per_generation():
    from populora.report.heldout import heldout_table

    ids = [f"t{i}" for i in range(20)]
    base = {t: 0 for t in ids}
    population = {
        "base": base,
        "roles": {"students": ["s0", "s1"]},
        "generations": [{"s0": {t: 1 for t in ids}, "s1": {t: 1 for t in ids}}],
    }
    baseline = {"base": base, "roles": {"students": ["solo"]}, "generations": [{"solo": {t: 0 for t in ids}}]}
    table = heldout_table({"population": population, "baseline": baseline})
    row = table.splitlines()[2].split(" | ")
    assert row[1:4] == ["100.0", "0.0", "0.0"]
    assert "+100.0 [+100.0, +100.0]" in table and table.count("+0.0 [+0.0, +0.0]") == 1
    assert heldout_table({"population": {"base": {}, "generations": []}}) == ""


def test_report_table_shows_the_raw_base_beside_and_the_pass_rates_with_their_own_intervals():
    from populora.report.heldout import heldout_table

    ids = [f"t{i}" for i in range(10)]
    doc = {
        "base": {t: 0 for t in ids},
        "raw_base": {t: int(t == "t0") for t in ids},
        "roles": {"students": ["s0"]},
        "generations": [{"s0": {t: 0 for t in ids}}, {"s0": {t: 1 for t in ids}}],
        "base_pass_rates": {t: 0.25 for t in ids},
        "pass_rates": [{}, {"s0": {t: 0.5 for t in ids}}],
    }
    greedy = heldout_table({"population": doc})
    assert "| raw base |" in greedy and greedy.splitlines()[2].split(" | ")[3] == "10.0"  # t0 of 10
    rates = heldout_table({"population": doc}, measure="pass_rate").splitlines()
    assert len(rates) == 3  # generation 0 has no pass rates: left out
    assert rates[2].split(" | ")[:3] == ["| 1", "50.0", "25.0"] and "+25.0 [+25.0, +25.0]" in rates[2]
    assert "raw base" not in rates[0]


def test_the_report_shows_the_copy_and_echo_baselines_beside_cruxeval():
    from populora.report.markdown import handed_back_line

    results = [
        {"benchmark": "cruxeval_i", "baseline": {"kind": "echo", "correct": 62, "n": 200, "accuracy": 0.31}},
        {"benchmark": "cruxeval_o", "baseline": {"kind": "copy", "correct": 37, "n": 200, "accuracy": 0.185}},
        {"benchmark": "gsm8k"},
    ]
    line = handed_back_line(results)
    assert "cruxeval_i: the echo baseline (the output handed back as the input) solves 62/200 (31.0%)" in line
    assert "cruxeval_o: the copy baseline" in line and "gsm8k" not in line
    assert handed_back_line([{"benchmark": "gsm8k"}]) == ""


def test_the_report_prints_the_best_constant_and_the_copy_and_echo_baselines_beside_pool_scores():
    from populora.report.heldout import constant_line

    doc = {
        "base": {"t0": 0},
        "generations": [],
        "best_constant": {
            "code_i": {
                "answer": "10",
                "correct": 2,
                "n": 64,
                "accuracy": 2 / 64,
                "echo_correct": 1,
                "echo_accuracy": 1 / 64,
            },
            "code_o": {
                "answer": "0",
                "correct": 3,
                "n": 64,
                "accuracy": 3 / 64,
                "copy_correct": 0,
                "copy_accuracy": 0.0,
            },
        },
    }
    line = constant_line({"population": doc})
    assert "`10` 2/64 (3.1%)" in line and "echo baseline 1/64 (1.6%)" in line and "copy baseline 0/64 (0.0%)" in line
    assert constant_line({"population": {"base": {}}}) == ""  # a pool made before the record was kept


def test_stages_build_an_empty_pool_and_score_members_on_the_tiny_model(tiny_model_dir, tiny_params_dict, tmp_path):
    """The random tiny model proposes nothing valid: the pool stage runs its rounds, writes an empty pool
    and a base record; the scoring stage then answers a hand-made pool with every member of a checkpoint."""
    from stages import heldout, heldout_pool, init

    params = tmp_path / "params.yaml"
    raw = {
        **tiny_params_dict,
        "heldout": {"per_type": 2, "seed": 0, "max_rounds": 1, "roles": ["students", "teachers"], "pool_file": None},
    }
    params.write_text(yaml.safe_dump(raw))
    pool_path, base_path = tmp_path / "pool.jsonl", tmp_path / "base.json"
    assert (
        heldout_pool.main(
            [
                "--params",
                str(params),
                "--base-model",
                str(tiny_model_dir),
                "--pool",
                str(pool_path),
                "--base",
                str(base_path),
            ]
        )
        == 0
    )
    record = json.loads(base_path.read_text())
    made = [json.loads(line) for line in pool_path.read_text().splitlines()]
    assert record["size"] == {t: sum(p["type"] == t for p in made) for t in ("code_o", "code_i")}
    assert record["per_type"] == 2 and set(record["verdicts"].get("base", {})) == {p["task_id"] for p in made}
    # score a real pool (verified tasks) with every member of a fresh checkpoint
    checkpoint = tmp_path / "init"
    assert (
        init.main(
            [
                "--params",
                str(params),
                "--arm",
                "population",
                "--base-model",
                str(tiny_model_dir),
                "--checkpoint",
                str(checkpoint),
            ]
        )
        == 0
    )
    rows = verify_rows(
        [_task("a", "def f(a):\n    return a + 1", "3"), _task("b", "def f(s):\n    return s * 2", "'ab'", "code_i")]
    )
    pool = attach_examples(accept_into_pool([], rows, seeds(), per_type=2), seeds(), 1, seed=0)
    pool_path.write_text("".join(json.dumps(t) + "\n" for t in pool))
    scores = tmp_path / "heldout.json"
    assert (
        heldout.main(
            [
                "--params",
                str(params),
                "--arm",
                "population",
                "--gen",
                "0",
                "--base-model",
                str(tiny_model_dir),
                "--pool",
                str(pool_path),
                "--heldout-base",
                str(base_path),
                "--state",
                str(checkpoint),
                "--scores",
                str(scores),
                "--history",
                str(tmp_path / "dynamics.json"),
                "--steps",
                str(tmp_path / "steps.json"),
                "--progress",
                str(tmp_path / "progress.json"),
                "--tracking",
                str(tmp_path / "tracking"),
            ]
        )
        == 0
    )
    result = json.loads(scores.read_text())
    from populora.core.state import load_state

    state = load_state(checkpoint)
    assert set(result["verdicts"]) == {*state.teachers, *state.students} and len(result["verdicts"]) == 4
    assert all(set(v) == {"heldout-code_o-000", "heldout-code_i-000"} for v in result["verdicts"].values())
    assert result["metrics"]["heldout.students.n"] == 4 and result["roles"]["students"]
    # how much of each member's score is format: the share of its answers the parser found none in
    for member in result["verdicts"]:
        assert 0.0 <= result["metrics"][f"heldout.{member}.unanswered"] <= 1.0
    # the live history got generation 0's held-out accuracies
    live = json.loads((tmp_path / "dynamics.json").read_text())
    assert [row["generation"] for row in live] == [0]
    assert live[0]["heldout.students.accuracy"] == result["metrics"]["heldout.students.accuracy"]

    # heldout.every: 2 of a 3-generation run scores after generation 1 and the last (2), not after 0
    params.write_text(
        yaml.safe_dump({**raw, "heldout": {**raw["heldout"], "every": 2}, "dag": {**raw["dag"], "generations": 3}})
    )
    stage_args = [str(params), str(tiny_model_dir), str(pool_path), str(base_path), str(checkpoint)]
    for gen in (0, 1, 2):
        flags = dict(zip(("--params", "--base-model", "--pool", "--heldout-base", "--state"), stage_args))
        flags |= {"--arm": "population", "--gen": str(gen), "--scores": str(tmp_path / f"every{gen}.json")}
        flags |= {f"--{k}": str(tmp_path / f"every-{k}") for k in ("history", "steps", "progress", "tracking")}
        assert heldout.main([part for flag, value in flags.items() for part in (flag, value)]) == 0
    skipped, due, last = (json.loads((tmp_path / f"every{gen}.json").read_text()) for gen in (0, 1, 2))
    assert skipped["verdicts"] == {} and skipped["metrics"] == {} and skipped["roles"] == result["roles"]
    assert due["verdicts"] == result["verdicts"] == last["verdicts"]  # the same members: the same greedy verdicts


def test_a_pool_made_before_is_reused_verified_again(tiny_model_dir, tiny_params_dict, tmp_path):
    """`heldout.pool_file`: no proposals; the file's tasks verified again (a task whose outputs no longer match
    is left out), the first per_type of each type kept, the base scored on them."""
    from stages import heldout_pool

    rows = verify_rows(
        [
            _task("a", "def f(a):\n    return a * 7 - 2", "3"),
            _task("b", "def f(a):\n    return a * 3 + 11", "2"),
            _task("c", "def f(s):\n    return s[::-1] + 'z'", "'ab'", "code_i"),
        ]
    )
    made = attach_examples(accept_into_pool([], rows, seeds(), per_type=2), seeds(), 1, seed=0)
    tampered = {**made[1], "outputs": ["999"]}  # its program gives 6: not verified alike
    source = tmp_path / "committed_pool.jsonl"
    source.write_text("".join(json.dumps(t) + "\n" for t in [made[0], tampered, made[2]]))
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump({**tiny_params_dict, "heldout": {"per_type": 1, "pool_file": str(source)}}))
    pool_path, base_path = tmp_path / "pool.jsonl", tmp_path / "base.json"
    assert (
        heldout_pool.main(
            [
                "--params",
                str(params),
                "--base-model",
                str(tiny_model_dir),
                "--pool-file",
                str(source),
                "--pool",
                str(pool_path),
                "--base",
                str(base_path),
            ]
        )
        == 0
    )
    kept = [json.loads(line) for line in pool_path.read_text().splitlines()]
    assert len(made) == 3
    assert [t["task_id"] for t in kept] == [made[0]["task_id"], made[2]["task_id"]] and kept[0] == made[0]
    assert set(json.loads(base_path.read_text())["verdicts"]["base"]) == {t["task_id"] for t in kept}


def test_a_missing_pool_file_is_refused_before_any_work(tiny_params_dict):
    from populora.config import ParamsError, parse_params

    with pytest.raises(ParamsError, match="heldout.pool_file"):
        parse_params({**tiny_params_dict, "heldout": {"pool_file": "no/such/pool.jsonl"}})


def test_pool_verdicts_grade_a_right_answer_right():
    """The pool's rows carry no `valid` field: grading must still find the tasks (it once answered
    `unknown_task` for every row, so every member and the base scored 0)."""
    from populora.heldout.scoring import pool_verdicts

    rows = verify_rows(
        [
            _task("a", "def f(a):\n    return a * 7 - 2", "3"),
            _task("c", "def f(s):\n    return s[::-1] + 'z'", "'ab'", "code_i"),
        ]
    )
    pool = attach_examples(accept_into_pool([], rows, seeds(), per_type=2), seeds(), 1, seed=0)
    assert all("valid" not in task for task in pool)
    o, i = pool[0]["task_id"], pool[1]["task_id"]
    answers = [
        {"task_id": o, "member": "m", "answer": "19"},
        {"task_id": i, "member": "m", "answer": "'ab'"},
        {"task_id": o, "member": "base", "answer": "20"},
        {"task_id": i, "member": "base", "answer": "'ba'"},
    ]
    assert pool_verdicts(pool, answers, None) == {"m": {o: 1, i: 1}, "base": {o: 0, i: 0}}


def test_the_report_says_whether_the_run_showed_learning_on_the_pool():
    from populora.report.heldout import learning_note

    ids = [f"t{i}" for i in range(20)]
    flat = {"base": {t: 0 for t in ids}, "roles": {"students": ["s0"]}, "generations": [{"s0": {t: 0 for t in ids}}]}
    up = {**flat, "generations": [{"s0": {t: int(i < 10) for i, t in enumerate(ids)}}]}
    assert learning_note({"population": up}).startswith(
        "Learning shown on the pool (greedy accuracy): the students of population"
    )
    assert "params/learning-demo.yaml" in learning_note({"baseline": flat})
    assert learning_note({"baseline": {"base": {}, "generations": []}}) == ""


def test_a_reused_pool_keeps_the_first_rows_verified_alike_and_verifies_no_more_than_it_may_keep():
    # 4 code_o (o1 no longer verifies alike), 3 code_i, a code_f the pool does not take
    made = [
        {"task_id": "o0", "type": "code_o", "outputs": ["1"]},
        {"task_id": "i0", "type": "code_i", "outputs": ["2"]},
        {"task_id": "o1", "type": "code_o", "outputs": ["3"]},
        {"task_id": "f0", "type": "code_f", "outputs": ["4"]},
        {"task_id": "o2", "type": "code_o", "outputs": ["5"]},
        {"task_id": "i1", "type": "code_i", "outputs": ["6"]},
        {"task_id": "o3", "type": "code_o", "outputs": ["7"]},
        {"task_id": "i2", "type": "code_i", "outputs": ["8"]},
    ]
    asked = []

    def verify(rows):
        asked.append([row["task_id"] for row in rows])
        return [{"valid": True, "outputs": ["changed"] if row["task_id"] == "o1" else row["outputs"]} for row in rows]

    kept, counts = first_alike(made, ["code_o", "code_i"], 2, verify)
    assert [row["task_id"] for row in kept] == ["o0", "i0", "o2", "i1"] and counts == {"code_o": 2, "code_i": 2}
    # o1 fell short, so a second round checks the next code_o only; o3, i2 and the code_f never run
    assert asked == [["o0", "i0", "o1", "i1"], ["o2"]]
    # the same rows as verifying the whole file first; a short file keeps what it has
    everything, _ = first_alike(made, ["code_o", "code_i"], 100, verify)
    assert [row["task_id"] for row in everything] == ["o0", "i0", "o2", "i1", "o3", "i2"]
    assert first_alike(made, ["code_o"], 0, verify) == ([], {"code_o": 0})


def test_pass_rates_not_sampled_give_no_figure_never_a_zero():
    """A generation scored greedy only (`heldout.samples: 0`, or pass rates not due) has no pass rate: the
    default run's headline once read `heldout.pass_rate.mean: 0.0` from roles averaged over no rates."""
    from populora.heldout.scoring import pass_rate_metrics

    pool = [{"task_id": "a", "type": "code_o"}, {"task_id": "b", "type": "code_i"}]
    roles = {"students": ["s0", "s1"], "teachers": ["t0"]}
    assert pass_rate_metrics({}, pool, roles) == {}
    sampled = pass_rate_metrics({"s0": {"a": 0.5, "b": 0.25}, "s1": {"a": 1.0}}, pool, roles)
    assert sampled["heldout.students.pass_rate"] == pytest.approx((0.5 + 0.25 + 1.0 + 0.0) / 4)  # unanswered: 0
    assert sampled["heldout.s1.code_i.pass_rate"] == 0.0 and "heldout.teachers.pass_rate" not in sampled
