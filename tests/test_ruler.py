"""Pool v3 (populora/heldout/ruler.py): the calibration order and window, one task per program, held-out
families before unseen compositions, and the pool-level baselines (best constant, copy, echo) on the real
sandbox."""

import doctest
import json
from collections import Counter
from pathlib import Path

import pytest

from populora.config import VerifySection
from populora.heldout import ruler
from populora.heldout.ruler import (
    best_constant,
    calibrate,
    calibration_order,
    select,
    still_useful,
    swap_constant_solved,
)
from populora.verifier import sandbox_for, verify_rows


def _task(
    i: int,
    *,
    kind: str = "family",
    family: str = "branch",
    task_type: str = "code_o",
    correct: int = 4,
    program: str | None = None,
) -> dict:
    return {
        "task_id": f"{family}-{task_type}-{i}",
        "type": task_type,
        "family": family,
        "held_out": kind,
        "program": program or f"def f(x):\n    return x + {i}",
        "calibration_correct": correct,
    }


def test_select_keeps_the_window_one_task_per_program_and_a_cap_per_family():
    calibrated = [_task(i, correct=c) for i, c in enumerate([0, 1, 5, 9, 10, 16] * 5)]
    calibrated += [_task(i, family="digits", correct=4) for i in range(100, 103)]
    pool = select(calibrated, samples=16, low=0.05, high=0.6, per_type=10, per_family=3)
    assert all(1 <= t["calibration_correct"] <= 9 for t in pool)
    assert sum(t["family"] == "branch" for t in pool) == 3 and sum(t["family"] == "digits" for t in pool) == 3
    assert len({t["program"] for t in pool}) == len(pool)


def test_select_takes_one_task_per_program_text_across_types_and_families_first():
    same = "def f(x):\n    return x * 3"
    calibrated = [
        _task(0, program=same),
        _task(1, task_type="code_i", program=same),
        _task(2, kind="composition", family="int_arith"),
        _task(3),
    ]
    pool = select(calibrated, samples=16, low=0.05, high=0.6, per_type=2, per_family=5)
    assert [t["task_id"] for t in pool] == ["branch-code_o-0", "branch-code_o-3"]  # families fill the type first
    assert [
        t["task_id"]
        for t in select(
            calibrated, samples=16, low=0.05, high=0.6, per_type=5, per_family=5, exclude={"branch-code_o-0"}
        )
    ] == ["branch-code_i-1", "branch-code_o-3", "int_arith-code_o-2"]


def test_calibration_order_puts_families_first_and_spreads_families_and_types():
    tasks = [
        _task(i, family=f, task_type=tt) for i in range(4) for f in ("branch", "digits") for tt in ("code_o", "code_i")
    ]
    tasks += [_task(9, kind="composition", family="int_arith")]
    order = calibration_order(tasks, seed=0)
    assert sorted(t["task_id"] for t in order) == sorted(t["task_id"] for t in tasks)
    assert order[-1]["held_out"] == "composition"
    assert len({(t["family"], t["type"]) for t in order[:4]}) == 4  # every (family, type) queue in the first round


def test_calibration_stops_a_type_once_it_is_full_and_resumes_from_what_it_measured():
    tasks = [_task(i, task_type=tt) for tt in ("code_o", "code_i") for i in range(20)]
    measured = []

    def measure(batch):
        measured.extend(t["task_id"] for t in batch)
        return {t["task_id"]: 3 for t in batch}

    def enough(done):  # code_o is full after 4 tasks
        return {"code_o"} if sum("code_o" in tid for tid in done) >= 4 else set()

    done = calibrate(tasks, {"branch-code_i-0": 1}, measure, chunk=4, enough=enough)
    assert "branch-code_i-0" not in measured  # resumed: not measured again
    assert sum("code_o" in tid for tid in done) == 4 and sum("code_i" in tid for tid in done) == 20


def test_candidates_that_could_not_enter_the_pool_are_not_measured():
    inside = [{**_task(i, family="count_chars"), "outputs": ["1"]} for i in range(3)]
    inside += [{**_task(i, family="branch", task_type="code_i"), "outputs": ["7"]} for i in range(3)]
    useful = still_useful(inside, per_family=5, per_value=3)
    assert not useful({**_task(9, family="digits"), "outputs": ["1"]})  # output 1 already 3 times in the window
    assert useful({**_task(9, family="digits"), "outputs": ["2"]})
    assert useful({**_task(9, family="digits", task_type="code_i"), "outputs": ["1"]})  # the output cap is code_o's
    assert not still_useful(inside, per_family=3, per_value=9)(
        {**_task(9, family="branch", task_type="code_i"), "outputs": ["8"]}
    )  # its family is full

    tasks = [{**_task(i), "outputs": [str(i % 2)]} for i in range(12)]
    measured = []

    def measure(batch):
        measured.extend(t["task_id"] for t in batch)
        return {t["task_id"]: 4 for t in batch}

    def wanted(done):  # at most 2 measured tasks per output
        counts = Counter(next(t for t in tasks if t["task_id"] == i)["outputs"][0] for i in done)
        return lambda task: counts[task["outputs"][0]] < 2

    done = calibrate(tasks, {}, measure, chunk=2, enough=lambda done: set(), wanted=wanted)
    assert len(done) == len(measured) == 4


@pytest.fixture(scope="module")
def sandbox():
    with sandbox_for(VerifySection()) as box:
        yield box


def test_best_constant_is_computed_on_the_pool_with_the_tasks_it_solves(sandbox):
    pool = [
        {
            "task_id": f"t{k}",
            "type": "code_o",
            "program": "def f(x):\n    return x % 3",
            "inputs": [str(k)],
            "outputs": [repr(k % 3)],
            "message": None,
        }
        for k in range(10, 19)
    ]
    out = best_constant(pool, VerifySection(), sandbox)["code_o"]
    assert out["correct"] == 3 and out["n"] == 9 and out["answer"] in {"0", "1", "2"} and len(out["solves"]) == 3
    assert out["copy_correct"] == 0
    assert swap_constant_solved(pool, {"code_o": out}, 0.25) == set(out["solves"][2:])


def test_the_echo_baseline_stands_beside_the_constant_for_code_i(sandbox):
    rows = verify_rows(
        [
            {
                "task_id": "echo",
                "type": "code_i",
                "program": "def f(s):\n    return ''.join(sorted(s))",
                "inputs": ["'bca'"],
                "message": None,
            },
            {
                "task_id": "inv",
                "type": "code_i",
                "program": "def f(x):\n    return x * 7 + 3",
                "inputs": ["37"],
                "message": None,
            },
            {
                "task_id": "two",
                "type": "code_i",
                "program": "def f(a, b):\n    return min(a, b)",
                "inputs": ["4, 9"],
                "message": None,
            },
        ],
        VerifySection(),
        sandbox=sandbox,
    )
    pool = [{k: r[k] for k in ("task_id", "type", "program", "inputs", "outputs", "message")} for r in rows]
    out = best_constant(pool, VerifySection(), sandbox)["code_i"]
    assert out["echo_correct"] == 2 and out["n"] == 3  # 'abc' sorted, and min(4, 4)


def test_doctests():
    assert doctest.testmod(ruler).failed == 0


def test_the_pool_readme_puts_every_baseline_beside_the_scores():
    from populora.heldout.ruler import pool_readme

    record = {
        "command": "python -m populora.heldout.ruler --out data/pool-v3",
        "counts": {
            "verified": {"code_o": 10, "code_i": 10},
            "calibrated": {"code_o": 8},
            "in_window": {"code_o": 4},
            "swapped_for_the_constant": {},
            "pool": {"code_o": 2, "code_i": 2},
        },
        "candidates_dropped": {"candidates": 30, "copyable": 3, "kept": 20},
        "held_out": {"code_o family": 2},
        "families": {"code_o branch": 2},
        "best_constant": {
            "code_o": {"answer": "0", "correct": 0, "n": 2, "accuracy": 0.0, "copy_correct": 0},
            "code_i": {"answer": "1", "correct": 1, "n": 2, "accuracy": 0.5, "echo_correct": 0},
        },
        "raw_base": {"greedy": {"heldout.base.code_o.accuracy": 0.0}, "pass_rate": {"code_o": 0.01, "code_i": 0.0}},
        "warm_base": {
            "greedy": {"heldout.base.code_o.accuracy": 0.5, "heldout.base.code_i.accuracy": 0.25},
            "calibration_pass_rate": {"code_o": 0.3, "code_i": 0.2},
        },
        "settings": {"low": 0.05, "high": 0.6, "samples": 16, "max_baseline": 0.05, "per_family": 24},
    }
    text = pool_readme(record)
    assert "| code_i | `1` 1/2 (50.0%) | echo 0/2 | - | 0.0% | 25.0% | 20.0% |" in text
    assert "copyable 3" in text and "candidates 30" not in text and "5-60%" in text


def test_calibration_goes_on_until_the_pool_is_full_after_the_constants_swaps(monkeypatch):
    """A first round fills the selection, but the best constant's swaps leave the pool short: calibration goes on
    with a raised target until the picked pool is full."""
    import argparse

    tasks = [_task(i, family=f"f{i % 12}", task_type=tt) for i in range(200) for tt in ("code_o",)]
    args = argparse.Namespace(per_type=10, chunk=8, samples=16, low=0.05, high=0.6, per_family=50, max_baseline=1.0)
    measured = []

    def measure(batch):
        measured.extend(t["task_id"] for t in batch)
        return {t["task_id"]: 4 for t in batch}

    def pick(calibrated, args, config, sandbox, cache=None):  # every third task is the constant's: swapped out
        pool = select(
            [t for t in calibrated if int(t["task_id"].rsplit("-", 1)[1]) % 3],
            samples=16,
            low=0.05,
            high=0.6,
            per_type=args.per_type,
            per_family=args.per_family,
        )
        return pool, set()

    monkeypatch.setattr(ruler, "pick_pool", pick)
    done = ruler.calibrate_until_full(tasks, {}, measure, args, None, None)
    assert len([t for t in done if int(t.rsplit("-", 1)[1]) % 3]) >= 10  # the pool can be full
    assert len(done) < len(tasks)  # and calibration stopped there


def test_a_resumed_calibration_keeps_only_the_rows_of_the_same_tasks(tmp_path):
    from populora.core.io import write_jsonl
    from populora.heldout.ruler import resumed

    tasks = {t["task_id"]: {**t, "inputs": ["1"]} for t in (_task(0), _task(1), _task(2))}
    rows = [
        {**tasks["branch-code_o-0"], "calibration_correct": 3, "samples": 16},
        {**tasks["branch-code_o-1"], "program": "def f(x):\n    return 0", "calibration_correct": 5, "samples": 16},
        {**tasks["branch-code_o-2"], "calibration_correct": 7, "samples": 8},
    ]
    write_jsonl(tmp_path / "calibration.jsonl", rows)
    assert resumed(tmp_path / "calibration.jsonl", tasks, 16) == {"branch-code_o-0": 3}
    assert resumed(tmp_path / "none.jsonl", tasks, 16) == {}


def test_every_prefix_of_the_pool_file_spans_the_families():
    """`heldout.per_type: 8` takes the first 8 of a type: 8 families, not 8 tasks of the first one."""
    from populora.heldout.ruler import pool_ids

    pool = [_task(i, family=f"f{i // 10}", task_type=tt) for i in range(40) for tt in ("code_o", "code_i")]
    renamed = pool_ids(pool, seed=0)
    for tt in ("code_o", "code_i"):
        of_type = [t for t in renamed if t["type"] == tt]
        assert [t["task_id"] for t in of_type] == [f"heldout-{tt}-{i:03d}" for i in range(40)]
        assert len({t["family"] for t in of_type[:4]}) == 4
        assert sorted(t["source_task"] for t in of_type) == sorted(t["task_id"] for t in pool if t["type"] == tt)
    assert pool_ids(renamed, seed=0) == renamed  # renaming again keeps the calibrated task's id


def test_a_code_i_task_whose_output_many_inputs_give_is_guessable(sandbox):
    """`f(s) = len(s) % 2` gives 0 for half of all inputs: any constant string of even length solves it. `f(x) =
    x * 7 + 3` gives 262 for one input only."""
    from populora.heldout.ruler import guessable

    def task(tid, program, given):
        return {"task_id": tid, "type": "code_i", "program": program, "inputs": [given], "message": None}

    rows = verify_rows(
        [
            task("parity", "def f(s):\n    return len(s) % 2", "'ab'"),
            task("affine", "def f(x):\n    return x * 7 + 3", "37"),
        ]
        + [task(f"pad{k}", f"def f(x):\n    return x + {k}", str(k)) for k in range(20)],
        VerifySection(),
        sandbox=sandbox,
    )
    tasks = [{k: r[k] for k in ("task_id", "type", "program", "inputs", "outputs", "message")} for r in rows]
    assert guessable(tasks, 0.05, VerifySection(), sandbox) == {"parity"}
    assert guessable(tasks, 1.0, VerifySection(), sandbox) == set()


def test_the_ruler_and_the_studys_baselines_try_the_same_constants(sandbox):
    """A list one `code_o` task is shown is a constant `code_i` answer too: pool v3's first pick missed
    `[11, 10, 4, 2]` (7 of 128 code_i tasks) because the ruler tried only the code_i tasks' own inputs, which the
    study's baselines did not. Both now take `populora.verifier.baselines.constant_candidates`."""
    from populora.analysis.baselines import pool_baselines

    shown = "[11, 10, 4, 2]"
    pool = [
        {
            "task_id": "o",
            "type": "code_o",
            "program": "def f(xs):\n    return len(xs)",
            "inputs": [shown],
            "outputs": ["4"],
            "message": None,
        }
    ]
    pool += [
        {
            "task_id": f"i{k}",
            "type": "code_i",
            "program": program,
            "inputs": [given],
            "outputs": [output],
            "message": None,
        }
        for k, (program, given, output) in enumerate(
            [
                ("def f(xs):\n    return max(xs)", "[3, 11]", "11"),
                ("def f(xs):\n    return min(xs)", "[2, 8]", "2"),
                ("def f(xs):\n    return len(xs)", "[5, 5, 5, 5]", "4"),
            ]
        )
    ]
    # each code_i task's own input solves one of them; the list the code_o task shows solves all three
    ruler_best = best_constant(pool, VerifySection(), sandbox)["code_i"]
    study_best = pool_baselines(pool, VerifySection())["code_i"]["best"]
    assert ruler_best["answer"] == study_best["answer"] == shown
    assert ruler_best["correct"] == study_best["correct"] == 3


def _named_pools() -> set[str]:
    """Every `heldout.pool_file` a params file of this checkout names (params.yaml and the overlays)."""
    import yaml

    from tests.conftest import REPO

    named = set()
    for path in [REPO / "params.yaml", *sorted((REPO / "params").glob("*.yaml"))]:
        pool = ((yaml.safe_load(path.read_text()) or {}).get("heldout") or {}).get("pool_file")
        if pool:
            named.add(pool)
    return named


def test_every_pool_a_params_file_names_passes_the_five_percent_rule():
    """Issue 55: every params file that names a pool names one whose best constant and copy (echo) baselines stay
    at or under 5% of each type, by its committed `pool_baselines.json` (which the slow test below recomputes)."""
    from tests.conftest import REPO

    named = _named_pools()
    assert named, "no params file names a pool"
    for pool in named:
        baselines = REPO / Path(pool).parent / "pool_baselines.json"
        assert baselines.is_file(), f"{pool}: no pool_baselines.json beside it (python -m populora study-baselines)"
        by_type = json.loads(baselines.read_text())["by_type"]
        rows = [json.loads(line) for line in (REPO / pool).read_text().splitlines() if line.strip()]
        for task_type, figures in by_type.items():
            assert figures["n_tasks"] == sum(r["type"] == task_type for r in rows), f"{pool}: stale baselines"
            assert figures["best"]["share"] <= 0.05 and figures["copy"]["share"] <= 0.05, (pool, task_type, figures)


@pytest.mark.slow
def test_the_committed_pool_baselines_are_what_the_sandbox_measures():
    """The default pool's `pool_baselines.json` recomputed: every candidate constant graded in the sandbox
    (about a minute), the same best counts per type; and where the pool's folder holds the best k constants
    (`pool_baselines_at_k.json`, pass@k's control), the same counts at each of its k, from the same grading."""
    from populora.analysis.baselines import pool_baselines
    from tests.conftest import REPO

    for pool in _named_pools():
        folder = REPO / Path(pool).parent
        rows = [json.loads(line) for line in (REPO / pool).read_text().splitlines() if line.strip()]
        committed = json.loads((folder / "pool_baselines.json").read_text())["by_type"]
        at_k_file = folder / "pool_baselines_at_k.json"
        at_k = json.loads(at_k_file.read_text())["by_type"] if at_k_file.exists() else {}
        ks = sorted({int(k) for fields in at_k.values() for k in fields["best_at_k"]})
        measured = pool_baselines(rows, ks=ks)
        assert {t: (f["best"]["correct"], f["copy"]["correct"]) for t, f in measured.items()} == {
            t: (f["best"]["correct"], f["copy"]["correct"]) for t, f in committed.items()
        }
        if at_k:
            assert {t: f["best_at_k"] for t, f in measured.items()} == {t: f["best_at_k"] for t, f in at_k.items()}
