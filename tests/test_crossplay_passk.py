"""Issue 51's measuring tools: the cross-play matrix (`populora.analysis.crossplay`: every generation's
students on a frozen sample of every generation's teachers' tasks) and pass@k on the held-out pool
(`populora.analysis.passk`, the unbiased estimator of `populora.heldout.scoring.pass_at_k`)."""

from __future__ import annotations

import json
import math
import shutil

import pytest
import yaml

from populora.analysis.crossplay import crossplay_matrix, generation_dirs, sample_tasks
from populora.analysis.passk import curves, ks_for, subsample
from populora.heldout.scoring import pass_at_k, pass_at_k_curve

# --- pass@k ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("n", [1, 2, 5, 16, 64])
def test_pass_at_k_is_one_minus_the_chance_that_k_draws_miss_every_right_answer(n):
    for c in range(n + 1):
        for k in range(1, n + 1):
            exact = 1 - math.comb(n - c, k) / math.comb(n, k)
            assert pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
        assert pass_at_k(n, c, 1) == pytest.approx(c / n)  # pass@1 is the pass rate
        values = [pass_at_k(n, c, k) for k in range(1, n + 1)]
        assert values == sorted(values)  # more answers never solve less
    assert pass_at_k(n, 0, n) == 0.0 and pass_at_k(n, 1, n) == 1.0


@pytest.mark.parametrize("p, n, k", [(0.05, 64, 1), (0.05, 64, 16), (0.3, 16, 4), (0.9, 8, 8), (0.01, 64, 64)])
def test_pass_at_k_is_unbiased(p, n, k):
    """Over the binomial distribution of c, the estimate's expectation is exactly 1 - (1 - p)^k, the true
    chance that k independent answers include a right one (what the naive 1 - (1 - c/n)^k is not)."""
    expected = sum(math.comb(n, c) * p**c * (1 - p) ** (n - c) * pass_at_k(n, c, k) for c in range(n + 1))
    assert expected == pytest.approx(1 - (1 - p) ** k, abs=1e-9)
    naive = sum(math.comb(n, c) * p**c * (1 - p) ** (n - c) * (1 - (1 - c / n) ** k) for c in range(n + 1))
    if 1 < k < n:
        assert naive < 1 - (1 - p) ** k - 1e-6  # the plug-in estimate is biased low: why the estimator is used


def test_pass_at_k_refuses_impossible_counts():
    for n, c, k in [(4, 5, 1), (4, -1, 1), (4, 1, 0), (4, 1, 5)]:
        with pytest.raises(ValueError, match="pass@k needs"):
            pass_at_k(n, c, k)


def test_the_curve_averages_tasks_and_groups_average_their_students():
    assert pass_at_k_curve({"a": 0, "b": 4}, 4, [1, 4]) == {1: 0.5, 4: 0.5}
    assert pass_at_k_curve({}, 4, [1]) == {1: None}
    pool = [{"task_id": "o1", "type": "code_o"}, {"task_id": "i1", "type": "code_i"}]
    counts = {"base": {"o1": 1, "i1": 0}, "r.s0": {"o1": 2, "i1": 0}, "r.s1": {"o1": 0, "i1": 4}}
    out = curves(counts, pool, 4, [1, 2, 4], {"r": ["r.s0", "r.s1"]})
    assert out["members"]["base"]["all"] == {"1": 0.125, "2": 0.25, "4": 0.5}
    assert out["members"]["r.s0"]["code_o"]["1"] == 0.5 and out["members"]["r.s1"]["code_i"]["4"] == 1.0
    # the run's students: the mean of their curves (s0: 0.25 / 0.4167 / 0.5; s1: 0.5 at every k)
    assert out["groups"]["r"]["all"] == {"1": 0.375, "2": pytest.approx(0.458333, abs=2e-6), "4": 0.5}
    assert ks_for(16) == [1, 2, 4, 8, 16] and ks_for(10) == [1, 2, 4, 8, 10]


def test_subsample_keeps_every_type_in_pool_order():
    pool = [{"task_id": f"{t}-{i}", "type": t} for t in ("code_o", "code_i") for i in range(10)]
    kept = subsample(pool, 6, seed=1)
    assert len(kept) == 6 and sum(t["type"] == "code_i" for t in kept) == 3
    assert kept == [t for t in pool if t in kept] and subsample(pool, 6, seed=1) == kept
    assert subsample(pool, None, 0) == pool


# --- the cross-play matrix ---------------------------------------------------------------------------


def _tasks(gen: int, types: list[str]) -> list[dict]:
    return [{"task_id": f"g{gen}-{t}-{k}", "type": t} for k, t in enumerate(types)]


def test_matrix_cells_are_each_generations_students_on_each_generations_tasks():
    tasks = {0: _tasks(0, ["code_o", "code_i"]), 1: _tasks(1, ["code_o", "code_o"])}
    students = {0: ["g000-s0", "g000-s1"], 1: ["g001-s0", "g001-s1"]}
    verdicts = {
        "g000-s0": {"g0-code_o-0": 1, "g0-code_i-1": 0, "g1-code_o-0": 0, "g1-code_o-1": 0},
        "g000-s1": {"g0-code_o-0": 1, "g0-code_i-1": 1},  # no verdict on generation 1's tasks: wrong
        "g001-s0": {"g0-code_o-0": 1, "g0-code_i-1": 1, "g1-code_o-0": 1, "g1-code_o-1": 0},
        "g001-s1": {"g0-code_o-0": 1, "g0-code_i-1": 1, "g1-code_o-0": 1, "g1-code_o-1": 1},
        "base": {"g0-code_o-0": 1, "g0-code_i-1": 0, "g1-code_o-0": 0, "g1-code_o-1": 0},
    }
    doc = crossplay_matrix(verdicts, tasks, students)
    assert doc["student_gens"] == [0, 1] and doc["teacher_gens"] == [0, 1] and doc["n_tasks"] == [2, 2]
    assert doc["matrix"] == [[0.75, 0.0], [1.0, 0.75]]
    assert doc["base"] == [0.5, 0.0]
    assert doc["by_type"]["code_o"] == [[1.0, 0.0], [1.0, 0.75]] and doc["by_type"]["code_i"] == [
        [0.5, None],
        [1.0, None],
    ]
    assert doc["n_tasks_by_type"] == {"code_o": [1, 2], "code_i": [1, 0]}
    assert doc["per_student"]["g000-s1"] == [1.0, 0.0] and doc["per_student"]["g001-s0"] == [1.0, 0.5]
    assert doc["triangles"] == {
        "diagonal": 0.75,
        "later_students_on_earlier_tasks": 1.0,
        "earlier_students_on_later_tasks": 0.0,
    }
    assert doc["row_means"] == [0.375, 0.875] and doc["column_means"] == [0.875, 0.375]
    assert "base" not in crossplay_matrix(verdicts, tasks, students, base=None)
    json.dumps(doc)  # JSON as it is (generation keys as text)


def test_task_sample_is_valid_capped_seeded_and_takes_the_types_in_turn():
    def row(i, t, valid=True, reason=None):
        return {
            "task_id": f"t{i}",
            "type": t,
            "valid": valid,
            "parse_reason": reason,
            "program": "def f(a):\n    return a",
            "inputs": ["1"],
            "outputs": ["1"],
            "message": None,
            "teacher": "teacher0",
            "gen": 0,
        }

    rows = [row(i, "code_o") for i in range(6)] + [row(10 + i, "code_i") for i in range(2)]
    rows += [row(20, "code_i", valid=False), row(21, "code_i", reason="duplicate"), row(22, "code_f")]
    picked = sample_tasks(rows, 5, seed=3, types=("code_o", "code_i"))
    assert len(picked) == 5 and [t["type"] for t in picked[:4]] == ["code_o", "code_i"] * 2
    assert {t["task_id"] for t in picked if t["type"] == "code_i"} == {"t10", "t11"}  # never the invalid ones
    assert picked == sample_tasks(rows, 5, seed=3, types=("code_o", "code_i"))
    assert len(sample_tasks(rows, 100, seed=0, types=("code_o", "code_i", "code_f"))) == 9


def _finished_run(tmp_path, tiny_model_dir, tiny_params_dict):
    """A run's results as the pipeline leaves them, by hand: results/population/gen00N/{checkpoint,tasks.jsonl}
    (generation 1's checkpoint a copy of generation 0's), the params, the base model."""
    from populora.verifier import verify_rows
    from stages import init

    params = tmp_path / "params.yaml"
    raw = {**tiny_params_dict, "dag": {**tiny_params_dict["dag"], "arms": ["population"]}}
    params.write_text(yaml.safe_dump(raw))
    results = tmp_path / "results"
    first = results / "population" / "gen000" / "checkpoint"
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
                str(first),
            ]
        )
        == 0
    )
    shutil.copytree(first, results / "population" / "gen001" / "checkpoint")
    programs = [
        "def f(a):\n    return a * 3 + 1",
        "def f(s):\n    return s[::-1] + 'q'",
        "def f(a, b):\n    return a - b",
    ]
    inputs = ["4", "'ab'", "7, 2"]
    for gen in (0, 1):
        rows = [
            {
                "task_id": f"population-g{gen:03d}-teacher{k % 2}-{t}-{k}",
                "type": t,
                "program": programs[k],
                "inputs": [inputs[k]],
                "message": None,
                "teacher": f"teacher{k % 2}",
                "arm": "population",
                "gen": gen,
                "origin": "proposed",
                "parse_reason": None,
                "segments": [],
                "tokens": 0,
            }
            for k, t in enumerate(["code_o", "code_i", "code_o"])
        ]
        verified = verify_rows(rows)
        assert all(r["valid"] for r in verified)
        (results / "population" / f"gen{gen:03d}" / "tasks.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in verified)
        )
    return params, results


def test_crossplay_command_on_a_tiny_finished_run(tiny_model_dir, tiny_params_dict, tmp_path):
    from populora.analysis import crossplay

    params, results = _finished_run(tmp_path, tiny_model_dir, tiny_params_dict)
    assert sorted(generation_dirs(results, "population")) == [0, 1]
    shutil.copytree(tiny_model_dir, results / "warm_base")  # the base the adapters trained on: found by default
    out = tmp_path / "crossplay"
    assert (
        crossplay.main(
            [
                str(results),
                "--params",
                str(params),
                "--out",
                str(out),
                "--tasks-per-gen",
                "2",
                "--types",
                "code_o",
                "code_i",
            ]
        )
        == 0
    )
    doc = json.loads((out / "crossplay.json").read_text())
    assert doc["student_gens"] == [0, 1] and doc["teacher_gens"] == [0, 1] and doc["n_tasks"] == [2, 2]
    assert doc["students"] == {"0": ["g000-student0", "g000-student1"], "1": ["g001-student0", "g001-student1"]}
    assert len(doc["matrix"]) == 2 and all(len(row) == 2 and all(0 <= v <= 1 for v in row) for row in doc["matrix"])
    assert len(doc["base"]) == 2
    # every student of every generation (and the base) answered every sampled task, of both types
    sampled = [t["task_id"] for g in ("0", "1") for t in doc["sampled_tasks"][g]]
    assert {t["type"] for g in ("0", "1") for t in doc["sampled_tasks"][g]} == {"code_o", "code_i"}
    assert set(doc["verdicts"]) == {"base", *doc["members"]} and all(
        set(v) == set(sampled) for v in doc["verdicts"].values()
    )
    assert doc["members"]["g001-student1"]["slot"] == "student1" and doc["command"].startswith(
        "python -m populora.analysis.crossplay"
    )
    assert (out / "crossplay.png").stat().st_size > 0 and doc["base_model"] == str(results / "warm_base")
    # a generation that is not there is refused, naming it
    assert crossplay.main([str(results), "--params", str(params), "--out", str(out), "--gens", "0", "7"]) == 1


def test_passk_command_on_the_tiny_model(tiny_model_dir, tiny_params_dict, tmp_path):
    from populora.analysis import passk
    from populora.heldout.pool import accept_into_pool, attach_examples
    from populora.tasks.tasks import seed_proposals
    from populora.verifier import verify_rows

    params, results = _finished_run(tmp_path, tiny_model_dir, tiny_params_dict)
    seeds = verify_rows(seed_proposals("builtin"))
    rows = verify_rows(
        [
            {
                "task_id": "a",
                "type": "code_o",
                "program": "def f(a):\n    return a * 7 - 2",
                "inputs": ["3"],
                "message": None,
            },
            {
                "task_id": "b",
                "type": "code_i",
                "program": "def f(s):\n    return s[::-1] + 'z'",
                "inputs": ["'ab'"],
                "message": None,
            },
        ]
    )
    pool_path = tmp_path / "pool.jsonl"
    pool_path.write_text(
        "".join(
            json.dumps(t) + "\n"
            for t in attach_examples(accept_into_pool([], rows, seeds, per_type=2), seeds, 1, seed=0)
        )
    )
    out = tmp_path / "passk"
    assert (
        passk.main(
            [
                "--pool",
                str(pool_path),
                "--params",
                str(params),
                "--base-model",
                str(tiny_model_dir),
                "--run",
                f"tiny={results / 'population'}",
                "--samples",
                "4",
                "--ks",
                "1",
                "2",
                "8",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    doc = json.loads((out / "passk.json").read_text())
    assert doc["ks"] == [1, 2, 4] and doc["samples"] == 4 and doc["n_tasks"] == 2
    assert doc["runs"]["tiny"]["checkpoint"].endswith("gen001/checkpoint")  # the arm's last generation
    assert set(doc["members"]) == {"base", "tiny.student0", "tiny.student1"} and set(doc["groups"]) == {"tiny"}
    assert all(0 <= c <= 4 for table in doc["counts"].values() for c in table.values())
    for curve in [*doc["members"].values(), *doc["groups"].values()]:
        values = [curve["all"][str(k)] for k in doc["ks"]]
        assert values == sorted(values) and all(0 <= v <= 1 for v in values)
    assert set(doc["baselines"]) == {"code_o", "code_i"} and (out / "passk.png").stat().st_size > 0
    assert (
        passk.main(["--pool", str(pool_path), "--params", str(params), "--run", "no-equals-sign", "--out", str(out)])
        == 1
    )


def test_the_study_reports_pass_at_k_per_control_across_seeds(tmp_path):
    """Run folders holding passk/passk.json (scripts/study.sh STUDY_PASSK): per control and k the mean over
    seeds with its interval, the base from the run that measured it, Welch between controls, a table and a panel."""
    from populora.analysis.__main__ import main
    from populora.analysis.figure import figure_panels
    from tests.test_study_runs import _run

    root = tmp_path / "runs"
    for control, level in (("1t1s", 0.10), ("2t2s", 0.20)):
        for seed in range(3):
            _run(root, control, seed, 0.3)
            curve = {str(k): round(min(1.0, (level + 0.01 * seed) * k**0.5), 6) for k in (1, 4, 16)}
            doc = {
                "samples": 16,
                "ks": [1, 4, 16],
                "groups": {f"{control}-s{seed}": {"all": curve}},
                "members": {
                    **({"base": {"all": {"1": 0.05, "4": 0.15, "16": 0.3}}} if (control, seed) == ("1t1s", 0) else {})
                },
                "baselines": {
                    "code_o": {"n_tasks": 10, "best": {"correct": 0}},
                    "code_i": {"n_tasks": 10, "best": {"correct": 1}},
                },
            }
            (root / f"{control}-s{seed}" / "passk").mkdir()
            (root / f"{control}-s{seed}" / "passk" / "passk.json").write_text(json.dumps(doc))
    assert main([str(root), "--out", str(tmp_path / "out")]) == 0
    study = json.loads((tmp_path / "out" / "study.json").read_text())
    passk = study["passk"]
    assert passk["ks"] == [1, 4, 16] and passk["base"] == {"1": 0.05, "4": 0.15, "16": 0.3}
    assert passk["controls"]["2t2s"]["1"]["mean"] == pytest.approx(0.21) and passk["controls"]["1t1s"]["4"]["n"] == 3
    c = next(c for c in passk["comparisons"] if (c["left"], c["right"], c["k"]) == ("2t2s", "1t1s", 1))
    assert c["delta"] == pytest.approx(0.1) and c["low"] > 0
    text = (tmp_path / "out" / "study.md").read_text()
    assert "## pass@k on the held-out pool" in text and "| base model | 5.0 | 15.0 | 30.0 |" in text
    assert "| best constant answer (k = 1) | 5.0 | 5.0 | 5.0 |" in text and "| 2t2s - 1t1s | 1 | +10.0 [" in text
    assert "pass@k" in figure_panels(study) and (tmp_path / "out" / "study.png").stat().st_size > 0


def test_runs_on_two_bases_get_a_base_curve_each_not_the_first_ones(tmp_path):
    """Each machine type makes its own warm base: pass@k measured on two (passk/base_id beside the figures) is
    reported base by base, and no single base stands beside every control."""
    from populora.analysis.passk import passk_summary, passk_table
    from populora.analysis.runs import read_passk

    def run(name: str, base: float | None, base_id: str | None) -> dict:
        folder = tmp_path / name / "passk"
        folder.mkdir(parents=True)
        members = {"base": {"all": {"1": base, "4": 2 * base}}} if base is not None else {}
        doc = {"samples": 8, "ks": [1, 4], "groups": {name: {"all": {"1": 0.2, "4": 0.4}}}, "members": members}
        (folder / "passk.json").write_text(json.dumps(doc))
        if base_id:
            (folder / "base_id").write_text(base_id + "\n")
        return {"passk": read_passk(folder / "passk.json")}

    one = [run("a-s1", 0.05, "ddf76a94.dir"), run("a-s2", None, None)]
    summary = passk_summary({"a": one})
    assert summary["base"] == {"1": 0.05, "4": 0.1} and summary["bases"] == {}
    two = [*one, run("a-s3", 0.07, "8ab7974e.dir")]
    summary = passk_summary({"a": two})
    assert summary["base"] is None
    assert summary["bases"] == {"ddf76a94.dir": {"1": 0.05, "4": 0.1}, "8ab7974e.dir": {"1": 0.07, "4": 0.14}}
    table = "\n".join(passk_table(summary))
    assert "| base model ddf76a94 | 5.0 | 10.0 |" in table and "| base model 8ab7974e | 7.0 | 14.0 |" in table
    assert "| base model |" not in table


def test_pass_at_k_stands_beside_the_best_k_constants_where_the_baselines_have_them(tmp_path):
    """k answers a task may be k different constants: the table's and the figure's control at k is the best k
    constants (best_at_k), summed over the types; without best_at_k, the best single constant, said to be k = 1."""
    from populora.analysis.passk import constant_share_at_k, passk_table, plot_curves

    baselines = {
        "code_o": {"n_tasks": 10, "best": {"correct": 1}, "best_at_k": {"1": {"correct": 1}, "4": {"correct": 3}}},
        "code_i": {"n_tasks": 10, "best": {"correct": 2}, "best_at_k": {"1": {"correct": 2}, "4": {"correct": 7}}},
    }
    assert constant_share_at_k(baselines, "all", 4) == pytest.approx(0.5)
    assert constant_share_at_k(baselines, "code_o", 4) == pytest.approx(0.3)
    assert constant_share_at_k(baselines, "all", 16) is None  # not measured at that k
    doc = {"ks": [1, 4], "samples": [8], "base": None, "controls": {}, "comparisons": [], "baselines": baselines}
    table = "\n".join(passk_table(doc))
    assert "| best k constants | 15.0 | 50.0 |" in table and "best constant answer" not in table
    curves = {
        "ks": [1, 4],
        "types": ["code_o"],
        "task_types": ["code_o"] * 10,
        "n_tasks": 10,
        "samples": 8,
        "members": {},
        "groups": {"r": {"all": {"1": 0.2, "4": 0.4}, "code_o": {"1": 0.2, "4": 0.4}}},
        "baselines": baselines,
    }
    plot_curves(curves, tmp_path / "passk.png")
    assert (tmp_path / "passk.png").stat().st_size > 0


def test_the_plan_s_pool_baselines_give_pass_at_k_its_best_k_constants():
    """Runs measured before best_at_k existed carry the single constant; the plan's pool baselines, where they
    hold best_at_k, take their place in the study's pass@k (and only then)."""
    from populora.analysis.passk import with_pool_baselines

    summary = {"ks": [1, 4], "baselines": {"code_o": {"n_tasks": 10, "best": {"correct": 1}}}}
    at_k = {"code_o": {"n_tasks": 10, "best": {"correct": 1}, "best_at_k": {"1": {"correct": 1}}}}
    assert with_pool_baselines(summary, at_k)["baselines"] == at_k
    assert with_pool_baselines(summary, {"code_o": {"n_tasks": 10, "best": {"correct": 1}}}) == summary
    assert with_pool_baselines({}, at_k) == {}  # no run measured pass@k


# --- which base the adapters load on -----------------------------------------------------------------


def test_the_model_base_is_the_warm_base_where_the_run_made_one(tmp_path):
    from populora.core.paths import model_base

    assert model_base(tmp_path) == tmp_path / "base_model"  # a run older than the warm start
    (tmp_path / "warm_base").mkdir()
    assert model_base(tmp_path) == tmp_path / "warm_base"  # warm start on, or off (the raw base's hard links)
    assert model_base(str(tmp_path)) == tmp_path / "warm_base"


def test_a_warm_started_runs_raw_base_is_refused_before_anything_loads(tmp_path, capsys):
    """pass@k and cross-play on the raw base of a run whose adapters were trained on its warm start would score
    students on a model they never trained on, silently (study.sh passed results/base_model until the fix)."""
    from populora.analysis import crossplay, passk
    from populora.core.paths import check_adapter_base

    results = tmp_path / "results"
    (results / "base_model").mkdir(parents=True)
    (results / "warm_base").mkdir()
    check_adapter_base(results / "base_model")  # warm start off: warm_base holds no adapter, either base is right
    (results / "warm_base" / "warm_start_adapter").mkdir()
    check_adapter_base(results / "warm_base")
    check_adapter_base(tmp_path / "elsewhere")  # a base outside a run's results: nothing to check against
    with pytest.raises(ValueError, match="pass --base-model .*warm_base"):
        check_adapter_base(results / "base_model")

    params = tmp_path / "params.yaml"
    params.write_text("{}\n")
    pool = tmp_path / "pool.jsonl"
    pool.write_text(json.dumps({"task_id": "a", "type": "code_o"}) + "\n")
    raw = str(results / "base_model")
    argv = ["--pool", str(pool), "--params", str(params), "--base-model", raw, "--out", str(tmp_path / "o")]
    assert passk.main(argv) == 1
    assert "trained on its warm start" in capsys.readouterr().err
    argv = [str(results), "--params", str(params), "--base-model", raw, "--out", str(tmp_path / "o")]
    assert crossplay.main(argv) == 1
    assert "trained on its warm start" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
