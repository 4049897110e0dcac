"""Rewards, advantages and games as the reward stage assembles them from verified tasks and graded answers."""

from __future__ import annotations

from populora.rl.rollouts import (
    build_rollouts,
    failure_reason,
    generation_stats,
    played_games,
    same_program_examples,
)


def _task(task_id, teacher, valid=True, parse_reason=None, task_type="code_o"):
    return {
        "task_id": task_id,
        "type": task_type,
        "teacher": teacher,
        "valid": valid,
        "reason": None if valid else "exception",
        "parse_reason": parse_reason,
        "segments": [],
        "tokens": 5,
    }


def _answer(task_id, student, correct, parse_reason=None, sample=0):
    return {
        "answer_id": f"{task_id}:{student}:{sample}",
        "task_id": task_id,
        "type": "code_o",
        "student": student,
        "answer": None if parse_reason else "1",
        "parse_reason": parse_reason,
        "correct": correct,
        "reason": None if correct else "wrong",
        "segments": [],
        "tokens": 3,
        "teacher": "t0",
        "task_origin": "proposed",
    }


def test_teacher_and_student_rewards():
    tasks = [
        _task("a", "t0"),
        _task("b", "t0"),
        _task("c", "t0", valid=False),
        _task("d", "t0", parse_reason="no_input"),
        _task("e", "t0"),
    ]
    graded = [
        _answer("a", "s0", True),
        _answer("a", "s0", False, sample=1),  # p = 0.5 -> 0.5
        _answer("b", "s0", True),
        _answer("b", "s0", True, sample=1),  # p = 1 -> 0
        _answer("c", "s0", False, parse_reason="format"),
    ]  # malformed student answer
    rollouts = build_rollouts(tasks, graded, "learnability")
    teacher = {r["task_id"]: r["reward"] for r in rollouts if r["role"] == "propose"}
    assert teacher == {"a": 0.5, "b": 0.0, "c": -1.0, "d": -1.0, "e": None}  # e: nobody attempted it
    student = [r["reward"] for r in rollouts if r["role"] == "solve"]
    assert student == [1.0, -0.5, 1.0, 1.0, -1.0]
    zero_sum = build_rollouts(tasks, graded, "zero_sum")
    assert [r["reward"] for r in zero_sum if r["task_id"] == "b" and r["role"] == "propose"] == [0.0]


def test_advantages_are_whitened_per_adapter_role_and_type():
    tasks = [_task("a", "t0"), _task("b", "t1")]
    graded = [_answer("a", "s0", True), _answer("a", "s0", False, sample=1), _answer("b", "s1", False)]
    rollouts = build_rollouts(tasks, graded, "learnability")
    by_id = {r.get("answer_id", r["task_id"]): r["advantage"] for r in rollouts}
    assert round(by_id["a:s0:0"], 3) == 1.0 and round(by_id["a:s0:1"], 3) == -1.0
    assert by_id["b:s1:0"] == 0.0  # a group of one carries no signal against its own baseline


def test_summary_counts_reasons():
    tasks = [_task("a", "t0"), _task("c", "t0", valid=False), _task("d", "t0", parse_reason="no_input")]
    graded = [_answer("a", "s0", True)]
    rollouts = build_rollouts(tasks, graded, "learnability")
    stats = generation_stats(tasks, graded, rollouts, [])["by_type"]["code_o"]
    assert (
        stats["proposals"] == 3
        and stats["valid"] == 1
        and stats["reasons"] == {"valid": 1, "exception": 1, "no_input": 1}
    )
    assert stats["solve_rate"] == 1.0
    assert failure_reason(tasks[2]) == "no_input"


PAIRING = {
    "teachers": ["t0", "t1"],
    "students": ["s0", "s1"],
    "counts": {"t0": {"s0": 2, "s1": 0}, "t1": {"s0": 0, "s1": 2}},
}


def test_only_attempts_on_this_generations_paired_proposals_are_games():
    tasks = [_task("a", "t0"), _task("b", "t1")]  # this generation's proposals
    graded = [
        _answer("a", "s0", True),  # paired (t0, s0): a game
        {**_answer("b", "s1", False), "teacher": "t1"},  # paired (t1, s1): a game
        {**_answer("old", "s0", False), "teacher": None, "task_origin": "buffer"},  # fill-in: no game
        {**_answer("old2", "s1", False), "teacher": "t0"},  # an old task still tagged with its author
        {**_answer("a", "s1", False, sample=1)},  # t0's task, but t0 was not paired with s1
    ]
    assert played_games(graded, tasks, PAIRING) == [("s0", "t0", True), ("s1", "t1", False)]


def test_a_buffer_fill_in_earns_its_old_author_nothing():
    tasks = [_task("a", "t0")]
    graded = [{**_answer("old", "s0", True), "teacher": None, "task_origin": "buffer"}]
    rollouts = build_rollouts(tasks, graded, "learnability")
    assert [r["task_id"] for r in rollouts if r["role"] == "propose"] == ["a"]  # no rollout for "old"'s author
    stats = generation_stats(tasks, graded, rollouts, played_games(graded, tasks, PAIRING))
    assert stats["games"] == 0 and stats["by_type"]["code_o"]["buffer_attempts"] == 1


def test_reward_totals_per_adapter_role():
    tasks = [_task("a", "t0"), _task("c", "t0", valid=False)]
    graded = [_answer("a", "s0", True), _answer("a", "s0", False, sample=1)]
    stats = generation_stats(tasks, graded, build_rollouts(tasks, graded, "learnability"), [])
    assert stats["rewards"]["t0/propose"] == {"sum": 0.5 - 1.0, "sumsq": 0.25 + 1.0, "count": 2}
    assert stats["rewards"]["s0/solve"] == {"sum": 0.5, "sumsq": 1.0 + 0.25, "count": 2}  # 1 and -0.5


def test_same_program_worked_examples_are_counted():
    programs = {
        "task": "def f(x):\n    return x + 1",
        "same": "def f(y):\n    return y + 2",
        "other": "def f(x):\n    return x",
    }
    graded = [
        {**_answer("task", "s0", True), "examples": ["same"]},
        {**_answer("task", "s0", False, sample=1), "examples": ["other"]},
    ]
    assert same_program_examples(graded, programs) == (1, 1)


def test_an_unattempted_valid_proposal_is_written_as_a_rollout_without_reward(tmp_path):
    """The default run's reward stage failed on this (population gen 1: a valid code_f proposal the
    pairing left unplayed): its rollout has no reward and no advantage, and must still be written."""
    from populora.core.rows import Rollout, read_rows, write_rows
    from populora.rl.update import with_signal

    tasks = [_task("a", "t0"), _task("e", "t1")]
    graded = [_answer("a", "s0", True), _answer("a", "s0", False, sample=1)]
    rollouts = build_rollouts(tasks, graded, "learnability")
    path = tmp_path / "rollouts.jsonl"
    write_rows(path, rollouts, Rollout)
    back = {r.get("answer_id") or r["task_id"]: r for r in read_rows(path, Rollout)}
    assert back["e"]["reward"] is None and back["e"]["advantage"] is None and back["e"]["solve_rate"] is None
    assert back["a"]["reward"] == 0.5
    assert "e" not in {r["task_id"] for r in with_signal(rollouts) if r["role"] == "propose"}  # no gradient


def test_signal_accounting_separates_format_from_correctness():
    """Synthetic rollouts: task a has a right answer beside wrong ones (correctness), task b only a malformed
    and a wrong one (format only), task c only wrong answers (no signal); per-task groups, then TRR++'s
    type-wide group, where the one right answer makes every rollout's signal one of correctness."""
    from populora.rl.generation_metrics import signal_metrics
    from populora.rl.rollouts import signal_accounting

    tasks = [_task("a", "t0"), _task("b", "t0"), _task("c", "t0")]
    graded = [
        _answer("a", "s0", True),
        _answer("a", "s0", False, sample=1),
        _answer("a", "s0", False, sample=2),
        _answer("b", "s0", False, parse_reason="format"),
        _answer("b", "s0", False, sample=1),
        _answer("c", "s0", False),
        _answer("c", "s0", False, sample=1),
    ]
    per_task = build_rollouts(tasks, graded, "learnability", baseline="per_task")
    assert signal_accounting(per_task, "per_task") == {"solve_with_signal": 5, "format_only": 2, "correctness": 3}
    trr = build_rollouts(tasks, graded, "learnability")
    assert signal_accounting(trr, "trr++") == {"solve_with_signal": 7, "format_only": 0, "correctness": 7}
    stats = generation_stats(tasks, graded, per_task, [], "per_task")
    assert stats["signal"] == {"solve_with_signal": 5, "format_only": 2, "correctness": 3}
    metrics = signal_metrics(stats["signal"])
    assert metrics["signal.format_only_share"] == 0.4 and metrics["signal.correctness_share"] == 0.6
    # a generation in which no answer was right: every signal is format
    wrong = [a for a in graded if not a["correct"]]
    rollouts = build_rollouts(tasks, wrong, "learnability", baseline="per_task")
    assert signal_accounting(rollouts, "per_task") == {"solve_with_signal": 2, "format_only": 2, "correctness": 0}
    assert (
        signal_metrics({"solve_with_signal": 0, "format_only": 0, "correctness": 0})["signal.format_only_share"] is None
    )


def test_signal_accounting_reaches_the_report_and_the_study_tables():
    from populora.analysis.readings import signal_generation
    from populora.report.dynamics import signal_table

    rows = [
        {
            "generation": 0,
            "signal.solve_with_signal": 40,
            "signal.format_only_share": 0.75,
            "signal.correctness_share": 0.25,
            "signal.format_only": 30,
            "signal.correctness": 10,
        },
        {"generation": 1},
    ]
    table = signal_table({"population": rows})
    assert "| population | 40: 75% / 25% | - |" in table and signal_table({"population": [{"generation": 0}]}) == ""
    assert signal_generation(rows[0], ["student0"], {}) == {
        "with_signal": 40,
        "format_only": 30,
        "correctness": 10,
        "exact": True,
    }
    # a run from before the accounting, with per-task advantages: 8 samples a task, 2 answers right, 40 rollouts
    # with signal: at most 16 differ in correctness, so at least 24 differ in format only
    old = {"rollouts_with_signal.student0": 40, "code_o.solved": 1, "code_i.solved": 1}
    params = {"reward.advantage_baseline": "per_task", "solve.samples": 8}
    assert signal_generation(old, ["student0"], params) == {
        "with_signal": 40,
        "format_only": 24,
        "correctness": 16,
        "exact": False,
    }
    # the baseline's adapter proposes too: its proposals come off the count; TRR++: no bound
    solo = {"rollouts_with_signal.solo": 50, "samples.solo/propose": 16, "code_o.solved": 0, "code_i.solved": 1}
    assert signal_generation(solo, ["solo"], params)["with_signal"] == 34
    assert signal_generation(old, ["student0"], {**params, "reward.advantage_baseline": "trr++"}) == {}
