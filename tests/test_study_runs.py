"""The study analyser over committed runs (populora/analysis/): per-control t-intervals over seeds, Welch's
interval between controls across seeds, accounting and diagnostics, on hand-made run folders.

    python -m pytest -m "" -n 0 tests/test_study_runs.py -q
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from statistics import mean

import numpy as np
import pytest
import yaml

from populora.analysis.__main__ import main
from populora.analysis.comparisons import nocopy, summarize
from populora.analysis.figure import figure_panels
from populora.analysis.runs import load_runs
from populora.analysis.tables import wall_cell

N = 60


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj) if not path.suffix == ".yaml" else yaml.safe_dump(obj))


def _run(
    root: Path, control: str, seed: int, rate: float, *, arm: str = "population", copies: list[str] | None = None
) -> None:
    """One run folder; with `copies`, every model's answers.json says those problems' answers copy the input."""
    folder = root / f"{control}-s{seed}"
    rng = random.Random(f"{control}{seed}")
    machine = {"cpu": "Intel(R) Xeon(R) Processor", "cpus": 2, "features": "avx2 avx512f"} if seed == 2 else None
    _write(
        folder / "run.json",
        {
            "control": control,
            "seed": seed,
            "wall_s": 1800 + seed + (600 if seed == 1 else 0),
            **({"machine": machine} if machine else {}),
            # stopped 10 min (not run time), in 3 attempts (stopped with sessions, resumed)
            **({"paused_s": 600, "attempts": 3} if seed == 1 else {}),
        },
    )
    _write(
        folder / "params.yaml", {"dag": {"arms": [arm], "generations": 6}, "population": {"teachers": 1, "students": 2}}
    )
    slots = ["solo"] if arm == "baseline" else ["student0", "student1"]
    _write(
        folder / "dynamics" / arm / "summary.json",
        {
            "per_adapter.students.optimizer_steps": 12,
            "per_adapter.students.trained_tokens": 1000 * (seed + 1),
            "per_adapter.students.rollouts_with_signal": 40,
            "per_adapter.students.delta_norm": 0.5,
            "per_adapter.teachers.optimizer_steps": 12,
            "per_adapter.teachers.trained_tokens": 10,
            "per_adapter.teachers.rollouts_with_signal": 4,
            "per_adapter.teachers.delta_norm": 0.1,
        },
    )
    for bench in ("cruxeval_o", "cruxeval_i"):
        ids = [f"sample_{i}" for i in range(N)]
        _write(
            folder / "bench" / "base" / bench / "base.json",
            {"model": "base", "per_problem": {i: int(k < 6) for k, i in enumerate(ids)}},
        )
        if copies is not None:
            _write(
                folder / "bench" / "base" / bench / "base" / "answers.json", {"copies_input": ids[:2] if copies else []}
            )
        for slot in [*slots, *(["teacher0"] if arm == "population" else [])]:
            per_problem = {i: int(rng.random() < rate) for i in ids}
            if copies is not None:
                per_problem.update({i: 1 for i in copies})  # the copier is right on these
                _write(
                    folder / "bench" / arm / bench / f"{arm}-{slot}" / "answers.json",
                    {"copies_input": copies, "copies_argument": copies[:1], "correct": sorted(per_problem)},
                )
            _write(
                folder / "bench" / arm / bench / f"{arm}-{slot}.json",
                {
                    "model": f"{arm}-{slot}",
                    "per_problem": per_problem,
                    "diagnostics": {
                        "n": N,
                        "truncated": 3,
                        "no_answer": 6,
                        "copies_input": 0,
                        "copies_argument": 9,
                        "mean_answer_tokens": 7.5,
                    },
                },
            )


@pytest.fixture
def runs(tmp_path) -> Path:
    root = tmp_path / "runs"
    for seed in range(3):
        _run(root, "2t2s", seed, 0.45)
        _run(root, "baseline", seed, 0.05, arm="baseline")
        _run(root, "1t1s", seed, 0.10)
    return root


def test_table_has_intervals_accounting_and_diagnostics(runs, tmp_path):
    study = summarize(load_runs(runs))
    rows = {row["control"]: row for row in study["controls"]}
    assert list(rows) == ["baseline", "1t1s", "2t2s"]
    population = rows["2t2s"]["bench"]["cruxeval_o"]
    assert (
        population["students"]["n"] == 3
        and population["students"]["low"] <= population["students"]["mean"] <= population["students"]["high"]
    )
    assert population["base"] == pytest.approx(0.1)
    assert population["students_minus_base"]["mean"] == pytest.approx(population["students"]["mean"] - 0.1)
    # "all members" averages the teacher in too: recompute seed 0 from its files
    folder = runs / "2t2s-s0" / "bench" / "population" / "cruxeval_o"
    verdicts = [json.loads(f.read_text())["per_problem"] for f in sorted(folder.glob("*.json"))]
    assert len(verdicts) == 3
    assert population["members"]["values"][0] == pytest.approx(np.mean([list(v.values()) for v in verdicts]), abs=1e-6)
    assert population["students"]["values"][0] == pytest.approx(
        np.mean([list(v.values()) for v in verdicts[:2]]), abs=1e-6
    )
    assert rows["baseline"]["accounting"]["students.trained_tokens"] == pytest.approx(2000)
    assert rows["2t2s"]["diagnostics"]["cruxeval_i"]["copies_argument"] == pytest.approx(9 / N)
    verdicts = {(c["left"], c["right"], c["bench"]): c for c in study["comparisons"]}
    assert verdicts[("2t2s", "baseline", "cruxeval_o")]["verdict"] == "2t2s higher"
    assert verdicts[("2t2s", "1t1s", "cruxeval_o")]["low"] > 0
    # per run: the base first, then each run's students' mean, accounting and wall, as its files say
    per_run = {row["run"]: row for row in study["per_run"]}
    assert study["per_run"][0]["run"] == "base" and per_run["base"]["bench"]["cruxeval_o"]["pass@1"] == pytest.approx(
        0.1
    )
    assert per_run["2t2s-s0"]["bench"]["cruxeval_o"]["pass@1"] == pytest.approx(population["students"]["values"][0])
    assert per_run["2t2s-s0"]["bench"]["cruxeval_i"]["copies_argument"] == pytest.approx(9 / N)
    assert (
        per_run["baseline-s2"]["accounting"]["students"]["trained_tokens"] == 3000
        and per_run["baseline-s2"]["wall_s"] == 1802
    )
    assert main([str(runs), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "study.md").read_text()
    assert (
        "2t2s - baseline" in text
        and "Accounting per adapter" in text
        and (tmp_path / "out" / "study.png").stat().st_size > 0
    )
    assert "| baseline-s2 | " in text and "| 12 / 3,000 / 40 / 0.5 | 12 / 10 / 4 / 0.1 | 30 | avx2 avx512f |" in text
    # a run that recorded no machine (runs before run.json had it) leaves the cell blank
    assert per_run["2t2s-s0"]["machine"] is None and per_run["baseline-s2"]["machine"]["cpus"] == 2
    assert per_run["2t2s-s1"]["wall_s"] == 1801  # the 600 s it spent stopped are not its run time
    assert "| 12 / 2,000 / 40 / 0.5 | 12 / 10 / 4 / 0.1 | 30 (3 attempts) |  |" in text  # resumed: every attempt summed


def test_nocopy_controls_are_compared_among_themselves_never_with_the_grid(runs):
    assert (
        nocopy("1t1s") == "1t1s-nocopy" and nocopy("1t1s-null") == "1t1s-nocopy-null"
    )  # as scripts/study.sh names them
    _run(runs, "1t1s-nocopy", 0, 0.30)
    _run(runs, "baseline-nocopy", 0, 0.05, arm="baseline")
    _run(runs, "1t1s-nocopy-null", 0, 0.05)
    study = summarize(load_runs(runs))
    assert [row["control"] for row in study["controls"]] == [
        "baseline",
        "1t1s",
        "2t2s",
        "baseline-nocopy",
        "1t1s-nocopy",
        "1t1s-nocopy-null",
    ]
    pairs = {(c["left"], c["right"]) for c in study["comparisons"]}
    assert {("1t1s-nocopy", "baseline-nocopy"), ("1t1s-nocopy", "1t1s-nocopy-null"), ("1t1s", "baseline")} <= pairs
    # a -nocopy control runs at another commit: never set against a control of the grid (against the base
    # model, yes: with the base's verdicts its own runs recorded)
    assert all(
        left.endswith(("-nocopy", "-nocopy-null")) == right.endswith(("-nocopy", "-nocopy-null"))
        for left, right in pairs
        if right != "base"
    )
    assert ("1t1s-nocopy", "base") in pairs
    one_v_one = next(
        c
        for c in study["comparisons"]
        if (c["left"], c["right"], c["bench"]) == ("1t1s-nocopy", "baseline-nocopy", "cruxeval_o")
    )
    assert one_v_one["seeds"] == [1, 1] and one_v_one["verdict"] == "1t1s-nocopy higher"


def test_no_runs_is_a_clear_error(tmp_path, capsys):
    assert main([str(tmp_path / "nothing"), "--out", str(tmp_path / "out")]) == 1
    assert "scripts/study.sh" in capsys.readouterr().err


def test_without_copies_counts_copied_answers_wrong_and_keeps_the_rest():
    from populora.analysis.runs import without_copies

    verdicts = {"a": 1, "b": 1, "c": 0, "d": 1}
    flags = {"copies_input": ["a"], "copies_argument": ["c", "d"], "correct": ["a", "b", "d"]}
    assert without_copies(verdicts, flags) == {"a": 0, "b": 1, "c": 0, "d": 0}
    assert without_copies(verdicts, {}) == verdicts


def test_copy_free_reading_separates_a_copier_from_a_solver(tmp_path):
    """A control that scores only by copying beats the other on pass@1 but not with copies counted wrong."""
    root = tmp_path / "runs"
    copied = [f"sample_{i}" for i in range(30, 48)]  # 18 of 60 problems answered by echoing the input
    for seed in range(3):
        _run(root, "1t1s", seed, 0.05, copies=copied)
        _run(root, "baseline", seed, 0.05, arm="baseline", copies=[])
    study = summarize(load_runs(root))
    rows = {row["control"]: row for row in study["controls"]}
    free = rows["1t1s"]["bench"]["cruxeval_o"]["copy_free"]
    assert rows["1t1s"]["bench"]["cruxeval_o"]["students"]["mean"] > 0.3
    assert free["students"]["mean"] < 0.15 and free["base"] == pytest.approx(4 / N, abs=1e-6)
    by_score = {
        (c["bench"], c["score"]): c for c in study["comparisons"] if (c["left"], c["right"]) == ("1t1s", "baseline")
    }
    assert by_score[("cruxeval_o", "pass@1")]["verdict"] == "1t1s higher"
    assert by_score[("cruxeval_o", "copies wrong")]["verdict"] == "no detectable difference"


def test_copy_free_reading_is_left_out_where_a_run_has_no_answer_flags(runs):
    study = summarize(load_runs(runs))
    assert all("copy_free" not in entry for row in study["controls"] for entry in row["bench"].values())
    assert {c["score"] for c in study["comparisons"]} == {"pass@1"}


def test_points_never_print_a_negative_zero():
    from populora.analysis.tables import _pts

    assert (_pts(-1e-9), _pts(0.0), _pts(-0.015), _pts(None), _pts(float("nan"))) == ("0.0", "0.0", "-1.5", "-", "-")


def test_training_copies_by_generation_per_run(runs, tmp_path):
    gens = {
        f"gen{g:03d}": {
            "code_o": {"n": 16, "correct": 2, "copies": g * 3, "copies_correct": g % 2},
            "code_i": {"n": 16, "correct": 4, "copies": 1, "copies_correct": 1},
        }
        for g in range(3)
    }
    _write(runs / "1t1s-s0" / "training_answers.json", gens)
    study = summarize(load_runs(runs))
    rows = {(r["run"], r["type"]): r for r in study["training_copies"]}
    assert set(rows) == {("1t1s-s0", "code_o"), ("1t1s-s0", "code_i")}  # runs without the file: no row
    assert rows[("1t1s-s0", "code_o")]["copies"] == [0, 3, 6] and rows[("1t1s-s0", "code_o")]["n"] == [16] * 3
    assert rows[("1t1s-s0", "code_o")]["copies_correct"] == [0, 1, 0]
    assert main([str(runs), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "study.md").read_text()
    assert "| 1t1s-s0 | code_o | 0/16 (0; 2) | 3/16 (1; 2) | 6/16 (0; 2) |" in text


def _heldout(root: Path, control: str, seed: int, rates: list[float | None], *, arm: str = "population") -> None:
    """The run's held-out verdicts per generation (students at `rates[g]`, the base at 0.2), by slot; a rate of
    None: that generation was not scored (heldout.every), its table empty."""
    rng = random.Random(f"heldout{control}{seed}")
    ids = [f"heldout-code_o-{i:03d}" for i in range(100)]
    slots = ["solo"] if arm == "baseline" else ["student0", "student1"]
    _write(
        root / f"{control}-s{seed}" / "dynamics" / arm / "heldout_verdicts.json",
        {
            "base": {t: int(k < 20) for k, t in enumerate(ids)},
            "roles": {"students": slots},
            "generations": [
                {slot: {t: int(rng.random() < rate) for t in ids} for slot in slots} if rate is not None else {}
                for rate in rates
            ],
        },
    )


def test_heldout_pool_is_read_as_a_benchmark_with_learning_curves(runs, tmp_path):
    for seed in range(3):
        _heldout(runs, "2t2s", seed, [0.2, 0.5, 0.8])
        _heldout(runs, "baseline", seed, [0.2, 0.2, 0.2], arm="baseline")
    study = summarize(load_runs(runs))
    rows = {row["control"]: row for row in study["controls"]}
    assert "heldout" not in rows["1t1s"]["bench"]  # no pool in that control's runs
    final = rows["2t2s"]["bench"]["heldout"]
    assert final["base"] == pytest.approx(0.2) and final["students"]["mean"] == pytest.approx(0.8, abs=0.06)
    curves = study["heldout_curves"]
    assert set(curves["controls"]) == {"2t2s", "baseline"} and len(curves["controls"]["2t2s"]) == 3
    by_gen = {c["generation"]: c for c in curves["comparisons"] if (c["left"], c["right"]) == ("2t2s", "baseline")}
    assert by_gen[0]["low"] <= 0 <= by_gen[0]["high"]  # equal at generation 0
    assert by_gen[2]["low"] > 0.4  # the population pulled away
    final_cmp = [c for c in study["comparisons"] if c["bench"] == "heldout"]
    assert final_cmp and final_cmp[0]["verdict"] == "2t2s higher"
    assert main([str(runs), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "study.md").read_text()
    assert "## Held-out pool by generation" in text and "| 2t2s - baseline |" in text
    # the null at generation 0 carries its minimum detectable effect; the clear gain at the end does not
    row = next(line for line in text.splitlines() if line.startswith("| 2t2s - baseline |") and "[" in line)
    cells = row.split(" | ")
    assert "(MDE " in cells[1] and "(MDE " not in cells[3]


def test_generations_the_pool_did_not_score_are_gaps_not_zeros(runs, tmp_path):
    """heldout.every: a generation no run scored is None in the curves, has no comparison, and the table and the
    figure leave it out; the final generation (always scored) is the endpoint."""
    for seed in range(3):
        _heldout(runs, "2t2s", seed, [None, 0.5, None, 0.8])
        _heldout(runs, "baseline", seed, [None, 0.2, None, 0.2], arm="baseline")
    study = summarize(load_runs(runs))
    curves = study["heldout_curves"]
    assert [point is None for point in curves["controls"]["2t2s"]] == [True, False, True, False]
    assert {c["generation"] for c in curves["comparisons"]} == {1, 3}
    final = {row["control"]: row for row in study["controls"]}["2t2s"]["bench"]["heldout"]
    assert final["students"]["mean"] == pytest.approx(0.8, abs=0.06)
    assert main([str(runs), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "study.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("| 2t2s | ") and "·" in line)
    assert row.split(" | ")[1] == "·" and row.split(" | ")[3] == "·" and "[" in row.split(" | ")[2]


def test_every_control_is_compared_with_the_base_model_problem_by_problem(runs, tmp_path):
    """The study's first question (do the students beat the model they started from?): a t-interval over
    the seeds' gains on the base (whose verdicts are the same in every run); one seed: paired by problem."""
    for seed in range(3):
        _heldout(runs, "2t2s", seed, [0.2, 0.5, 0.8])
    study = summarize(load_runs(runs))
    against_base = {(c["left"], c["bench"], c["score"]): c for c in study["comparisons"] if c["right"] == "base"}
    assert {control for control, _, _ in against_base} == {"baseline", "1t1s", "2t2s"}
    population = against_base[("2t2s", "cruxeval_o", "pass@1")]
    rows = {row["control"]: row for row in study["controls"]}
    assert population["delta"] == pytest.approx(
        rows["2t2s"]["bench"]["cruxeval_o"]["students_minus_base"]["mean"], abs=1e-6
    )
    assert population["seeds"] == [3, 3] and population["low"] > 0 and population["verdict"] == "2t2s higher"
    # one seed: the base's verdicts are paired with the students' problem by problem, so a control that
    # equals the base everywhere differs by exactly 0, with an interval of width 0 and the bound as its MDE
    same = summarize(load_runs(_copy_of_base(runs, tmp_path)))
    equal = next(c for c in same["comparisons"] if c["right"] == "base" and c["bench"] == "cruxeval_o")
    assert (equal["delta"], equal["low"], equal["high"]) == (0, 0, 0) and equal["mde"] == pytest.approx(3 / N)
    assert equal["method"] == "one seed: tasks only" and equal["verdict"] == "no detectable difference"
    # per generation on the held-out pool: level with the base at generation 0, above it at the end
    by_gen = {
        c["generation"]: c
        for c in study["heldout_curves"]["comparisons"]
        if (c["left"], c["right"]) == ("2t2s", "base")
    }
    assert sorted(by_gen) == [0, 1, 2] and by_gen[0]["low"] <= 0 <= by_gen[0]["high"] and by_gen[2]["low"] > 0.4
    assert main([str(runs), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "study.md").read_text()
    assert "| 2t2s - base | cruxeval_o | pass@1 | 3 vs 3 |" in text and "| 2t2s - base | 0.0 [" in text


def _copy_of_base(runs: Path, tmp_path: Path) -> Path:
    """One 1t1s run whose students answer exactly as the base model did."""
    root = tmp_path / "same"
    _run(root, "1t1s", 0, 0.1)
    for bench in ("cruxeval_o", "cruxeval_i"):
        base = json.loads((root / "1t1s-s0" / "bench" / "base" / bench / "base.json").read_text())["per_problem"]
        for result in (root / "1t1s-s0" / "bench" / "population" / bench).glob("*.json"):
            doc = json.loads(result.read_text())
            result.write_text(json.dumps({**doc, "per_problem": base}))
    return root


def _add_gold(root: Path, shift: dict[str, float]) -> None:
    """Every CRUXEval result gets per-problem gold log-likelihoods: the base's around -12 nats, each
    control's students `shift[control]` nats above it (plus noise), as the bench stage writes them."""
    rng = random.Random("gold")
    for result in sorted(root.glob("*/bench/*/cruxeval_*/*.json")):
        doc = json.loads(result.read_text())
        control = result.parts[-5].rsplit("-s", 1)[0]
        up = 0.0 if doc["model"] == "base" else shift[control]
        doc["per_problem_gold_logprob"] = {
            i: -12.0 + 0.1 * (k % 7) + up + rng.gauss(0, 0.3) for k, i in enumerate(doc["per_problem"])
        }
        result.write_text(json.dumps(doc))


def test_gold_log_likelihood_is_compared_in_nats(runs, tmp_path):
    """The issue's continuous score: CRUXEval's gold-answer log-likelihood, per control, against the base
    and between controls, across seeds; a run without it leaves its control's reading out."""
    _add_gold(runs, {"2t2s": 1.0, "1t1s": 0.0, "baseline": 0.0})
    study = summarize(load_runs(runs))
    rows = {row["control"]: row for row in study["controls"]}
    gold = rows["2t2s"]["bench"]["cruxeval_o"]["gold"]
    assert gold["students_minus_base"]["mean"] == pytest.approx(1.0, abs=0.1)
    found = {
        (c["left"], c["right"]): c
        for c in study["comparisons"]
        if c["score"] == "gold log-likelihood" and c["bench"] == "cruxeval_o"
    }
    assert found[("2t2s", "1t1s")]["verdict"] == "2t2s higher" and found[("2t2s", "1t1s")]["low"] > 0.8
    assert found[("1t1s", "base")]["low"] <= 0 <= found[("1t1s", "base")]["high"]
    assert main([str(runs), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "study.md").read_text()
    assert "## The gold answer's log-likelihood" in text
    assert (
        f"| 2t2s - 1t1s | cruxeval_o | gold log-likelihood | 3 vs 3 | {found[('2t2s', '1t1s')]['delta']:.2f} |" in text
    )
    # one run scored without it (vLLM's engine skips it): that control's gold reading is left out, not guessed
    for result in (runs / "1t1s-s1" / "bench" / "population" / "cruxeval_o").glob("*.json"):
        doc = json.loads(result.read_text())
        doc.pop("per_problem_gold_logprob")
        result.write_text(json.dumps(doc))
    study = summarize(load_runs(runs))
    assert "gold" not in {row["control"]: row for row in study["controls"]}["1t1s"]["bench"]["cruxeval_o"]
    assert not [
        c
        for c in study["comparisons"]
        if c["score"] == "gold log-likelihood" and c["bench"] == "cruxeval_o" and "1t1s" in (c["left"], c["right"])
    ]


def test_curve_table_puts_the_mde_beside_each_null_never_zero():
    from populora.analysis.tables import curve_table

    point = {"mean": 0.1, "low": 0.05, "high": 0.15, "n": 3}
    comparisons = [  # generation 0: every seed scored the base; 1: a null with spread; 2: an effect; 3: one seed
        {
            "left": "1T-1S",
            "right": "base",
            "generation": 0,
            "delta": 0.0,
            "low": 0.0,
            "high": 0.0,
            "mde": 0.023438,
            "df": 2,
        },
        {
            "left": "1T-1S",
            "right": "base",
            "generation": 1,
            "delta": 0.01,
            "low": -0.02,
            "high": 0.04,
            "mde": 0.05,
            "df": 2,
        },
        {
            "left": "1T-1S",
            "right": "base",
            "generation": 2,
            "delta": 0.05,
            "low": 0.02,
            "high": 0.08,
            "mde": 0.05,
            "df": 2,
        },
        {
            "left": "1T-1S",
            "right": "base",
            "generation": 3,
            "delta": 0.0,
            "low": -0.01,
            "high": 0.01,
            "mde": 0.03,
            "df": None,
        },
    ]
    lines = curve_table({"controls": {"1T-1S": [point] * 4}, "n_tasks": 128, "base": 0.07, "comparisons": comparisons})
    row = next(line for line in lines if line.startswith("| 1T-1S - base |")).split(" | ")
    assert row[1] == "0.0 [0.0, 0.0] (MDE 2.3)"  # no verdict moved: the rule-of-three bound, not an MDE of 0
    assert row[2] == "1.0 [-2.0, 4.0] (MDE 5.0)"
    assert row[3] == "5.0 [2.0, 8.0]"
    assert row[4].startswith("0.0 [-1.0, 1.0] (MDE 3.0; one seed)")


def test_heldout_curves_split_by_task_type_show_a_type_at_the_floor(runs, tmp_path):
    """A pool half of whose tasks nobody ever gets right: the pooled curve halves the other type's gain,
    the split shows where the signal is (the learning study's code_o half)."""
    ids = [f"heldout-code_o-{i:03d}" for i in range(50)] + [f"heldout-code_i-{i:03d}" for i in range(50)]
    for seed in range(3):
        rng = random.Random(f"typed{seed}")
        doc = {
            "base": {t: int("code_i" in t and k % 50 < 10) for k, t in enumerate(ids)},
            "roles": {"students": ["student0", "student1"]},
            "generations": [
                {
                    slot: {t: int("code_i" in t and rng.random() < rate) for t in ids}
                    for slot in ("student0", "student1")
                }
                for rate in (0.2, 0.6)
            ],
        }
        _write(runs / f"2t2s-s{seed}" / "dynamics" / "population" / "heldout_verdicts.json", doc)
    curves = summarize(load_runs(runs))["heldout_curves"]
    by_type = curves["by_type"]
    assert list(by_type) == ["code_o", "code_i"] and by_type["code_i"]["n_tasks"] == 50
    assert by_type["code_o"]["base"] == 0 and by_type["code_i"]["base"] == pytest.approx(0.2)
    assert [p["mean"] for p in by_type["code_o"]["controls"]["2t2s"]] == [0, 0]
    code_i, pooled = by_type["code_i"]["controls"]["2t2s"][-1]["mean"], curves["controls"]["2t2s"][-1]["mean"]
    assert code_i == pytest.approx(0.6, abs=0.08) and pooled == pytest.approx(code_i / 2, abs=1e-5)
    assert main([str(runs), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "study.md").read_text()
    assert "| 2t2s | code_o, 50 tasks (0.0) | 0.0 | 0.0 |" in text and "| 2t2s | code_i, 50 tasks (20.0) |" in text
    # the figure draws the split too, after the pooled curves
    study = json.loads((tmp_path / "out" / "study.json").read_text())
    assert figure_panels(study)[-2:] == ["held-out curves", "held-out curves by type"]
    assert (tmp_path / "out" / "study.png").stat().st_size > 0


def test_pool_task_type_reads_the_ids_the_pool_gives():
    from populora.heldout.pool import accept_into_pool, pool_task_type

    assert pool_task_type("heldout-code_i-007") == "code_i" and pool_task_type("heldout-code_o-120") == "code_o"
    assert pool_task_type("sample_3") is None and pool_task_type("heldout-code_f-001") is None
    assert pool_task_type("heldout-code_o-x") is None
    row = {"type": "code_i", "valid": True, "program": "def f(x):\n    return x + 1", "inputs": ["1"], "outputs": ["2"]}
    pool = accept_into_pool([], [row], [], per_type=1)
    assert [pool_task_type(t["task_id"]) for t in pool] == ["code_i"]


def test_wall_time_is_averaged_per_kind_of_machine_and_the_title_is_the_studys(runs, tmp_path):
    # seed 2 recorded its machine, seeds 0-1 did not: a mean across the two kinds would mean nothing
    study = summarize(load_runs(runs))
    row = next(r for r in study["controls"] if r["control"] == "baseline")
    assert row["wall_by_machine"] == [
        {"machine": None, "n": 2, "mean_s": 1800.5},
        {"machine": "avx2 avx512f", "n": 1, "mean_s": 1802.0},
    ]
    assert main([str(runs), "--out", str(tmp_path / "out"), "--title", "Second study: where the students learn"]) == 0
    text = (tmp_path / "out" / "study.md").read_text()
    assert text.startswith("# Second study: where the students learn\n")
    assert "| 30 (2 on an unrecorded machine); 30 (1 on avx2 avx512f) |" in text
    # one kind of machine: one mean, as before
    one_kind = {**row, "wall_by_machine": row["wall_by_machine"][:1]}
    assert wall_cell(one_kind) == f"{row['wall_s']['mean'] / 60:.0f}"


def test_runs_on_one_thread_beside_another_are_a_kind_of_their_own():
    """A study's runs made two at a time, one thread each (population-warm's plan change 10), take longer each than
    one alone on two threads of the same machine: their wall time is averaged apart and the table says so."""
    from populora.analysis.readings import wall_by_machine

    def run(wall: float, threads: int | None) -> dict:
        return {"wall_s": wall, "machine": {"features": "avx2", **({"threads": threads} if threads else {})}}

    members = [run(3600, 2), run(5400, 1), run(5000, 1), run(4000, None)]
    assert wall_by_machine(members) == [
        {"machine": "avx2, 2 threads", "n": 1, "mean_s": 3600.0},
        {"machine": "avx2, 1 thread", "n": 2, "mean_s": 5200.0},
        {"machine": "avx2", "n": 1, "mean_s": 4000.0},
    ]
    row = {"wall_s": {"mean": 4500.0}, "wall_by_machine": wall_by_machine(members)}
    assert wall_cell(row) == "60 (1 on avx2, 2 threads); 87 (2 on avx2, 1 thread); 67 (1 on avx2)"


def test_the_pass_rate_endpoint_carries_the_sampled_bases_noise(runs, tmp_path):
    """The primary endpoint (issue 57): the pass rate over heldout.samples answers at temperature 1. The base
    was sampled too, so its variance (`sampled_mean_variance`) widens the interval against it; the same seeds
    against a fixed base row would give a narrower one."""
    from populora.analysis.comparisons import base_rows, score_matrix
    from populora.core.stats import BASE_MEASURED, ONE_SAMPLE, sampled_mean_variance, seed_comparison

    for seed in range(3):
        _heldout(runs, "2t2s", seed, [0.2, 0.5])
        path = runs / f"2t2s-s{seed}" / "dynamics" / "population" / "heldout_verdicts.json"
        doc = json.loads(path.read_text())
        rng = random.Random(f"rates{seed}")
        doc["base_pass_rates"] = {t: 0.25 for t in doc["base"]}
        doc["pass_rates"] = [
            {},
            {slot: {t: rng.choice([0.25, 0.5, 0.75]) for t in doc["base"]} for slot in ("student0", "student1")},
        ]
        _write(path, doc)
        params = yaml.safe_load((runs / f"2t2s-s{seed}" / "params.yaml").read_text())
        _write(runs / f"2t2s-s{seed}" / "params.yaml", {**params, "heldout": {"samples": 4}})
    loaded = [r for r in load_runs(runs) if r["control"] == "2t2s"]
    assert set(loaded[0]["pass_rate"]["heldout"]) == {"base", "population-student0", "population-student1"}
    study = summarize(load_runs(runs))
    [row] = [
        c
        for c in study["comparisons"]
        if (c["left"], c["right"], c["bench"], c["score"]) == ("2t2s", "base", "heldout", "pass rate at temperature 1")
    ]
    a, b = score_matrix(loaded, "heldout", score="pass_rate"), base_rows(loaded, "heldout", "pass_rate")
    fixed = seed_comparison(a, b, right_is_base=True, verdicts=False)
    assert row["method"] == BASE_MEASURED and fixed["method"] == ONE_SAMPLE
    assert sampled_mean_variance(b[0], 4) == pytest.approx(0.25 * 0.75 / 3 / 100)
    assert row["delta"] == pytest.approx(fixed["delta"]) and row["high"] - row["low"] > fixed["high"] - fixed["low"]
    assert {"2t2s"} <= {r["control"] for r in study["controls"] if "pass_rate" in r["bench"].get("heldout", {})}


def test_each_run_is_compared_with_its_own_base(runs):
    """A run whose base was made again (the warm start on another machine kind: another warm base) is compared
    with that base, not with the first run's: against the base a seed's gain is its students' score minus its own
    base's, in the interval per generation and in the control's row, and the row says the bases differ."""
    for seed in range(3):
        _heldout(runs, "2t2s", seed, [0.2, 0.5])
    path = runs / "2t2s-s2" / "dynamics" / "population" / "heldout_verdicts.json"
    doc = json.loads(path.read_text())
    doc["base"] = {t: int(k < 45) for k, t in enumerate(sorted(doc["base"]))}  # seed 2's base: 45%, the others 20%
    _write(path, doc)
    loaded = [r for r in load_runs(runs) if r["control"] == "2t2s"]
    study = summarize(load_runs(runs))
    gains = [
        mean(mean(run["heldout_curve"][1][m][t] for m in run["students"]) for t in run["verdicts"]["heldout"]["base"])
        - mean(run["verdicts"]["heldout"]["base"].values())
        for run in loaded
    ]
    assert gains[2] < gains[0] - 0.15  # seed 2's gain is smaller on its stronger base
    [final] = [
        c
        for c in study["comparisons"]
        if (c["left"], c["right"], c["bench"], c["score"]) == ("2t2s", "base", "heldout", "pass@1")
    ]
    assert final["delta"] == pytest.approx(mean(gains), abs=1e-6)
    [curve] = [
        c
        for c in study["heldout_curves"]["comparisons"]
        if (c["left"], c["right"], c["generation"]) == ("2t2s", "base", 1)
    ]
    assert curve["delta"] == pytest.approx(mean(gains), abs=1e-6)
    row = next(r for r in study["controls"] if r["control"] == "2t2s")["bench"]["heldout"]
    assert row["bases"] == {"2t2s-s0": 0.2, "2t2s-s1": 0.2, "2t2s-s2": 0.45}
    assert row["base"] == pytest.approx((0.2 + 0.2 + 0.45) / 3, abs=1e-6)  # rounded to 6 places
    assert row["students_minus_base"]["mean"] == pytest.approx(mean(gains), abs=1e-6)
    assert study["heldout_curves"]["bases"]["2t2s-s2"] == 0.45
    from populora.analysis.tables import bench_tables

    assert any("45.0 in 2t2s-s2" in line and "its own base" in line for line in bench_tables(study))


def test_bases_measured_once_for_several_seeds_share_their_noise():
    """The pass rate's base variance: seeds that share one base share its noise in full; a base per seed adds a
    1/N^2 share each (errs wide: that noise is in the seeds' spread too)."""
    from populora.core.stats import bases_mean_variance, sampled_mean_variance

    one, other = np.full(50, 0.5), np.full(50, 0.25)
    shared = bases_mean_variance(np.array([one, one, one, one]), 8)
    assert shared == pytest.approx(sampled_mean_variance(one, 8))
    mixed = bases_mean_variance(np.array([one, one, one, other]), 8)
    assert mixed == pytest.approx(
        (3 / 4) ** 2 * sampled_mean_variance(one, 8) + (1 / 4) ** 2 * sampled_mean_variance(other, 8)
    )
    assert mixed < shared
