"""Seeds declared before the runs (populora/analysis/plan.py): tuning seeds marked and left out of the
answer, departures from the plan flagged, the primary comparison reported; the learning study's
retroactive plan against its committed runs.

    python -m pytest -m "" -n 0 tests/test_study_plan.py -q
"""

from __future__ import annotations

import shutil

import pytest
import yaml

from populora.analysis import plan as study_plan
from populora.analysis.__main__ import main
from populora.analysis.comparisons import summarize
from populora.analysis.runs import load_runs
from tests.conftest import REPO
from tests.test_study_runs import _heldout, _run, _write

PLAN = {
    "written": "before the runs",
    "pool": None,
    "params": {"dag": {"generations": 6}},
    "controls": {
        "baseline": {"dag": {"arms": ["baseline"]}},
        "1t1s": {"dag": {"arms": ["population"]}},
        "2t2s": {"dag": {"arms": ["population"]}},
    },
    "seeds": [1, 2],
    "tuning_seeds": [0],
    "primary": {"endpoint": "heldout", "left": "2t2s", "right": "1t1s"},
}


@pytest.fixture
def grid(tmp_path):
    root = tmp_path / "runs"
    for seed in range(3):
        for control, rate, arm in (
            ("2t2s", 0.45, "population"),
            ("1t1s", 0.10, "population"),
            ("baseline", 0.05, "baseline"),
        ):
            _run(root, control, seed, rate, arm=arm)
            _heldout(root, control, seed, [0.2, 0.3 + (0.4 if seed == 0 else 0.0)], arm=arm)  # seed 0 "takes off"
    plan = tmp_path / "plan.yaml"
    plan.write_text(yaml.safe_dump(PLAN))
    return root, plan


def test_tuning_runs_are_marked_and_left_out_of_the_answer(grid, tmp_path):
    root, plan_file = grid
    study = summarize(load_runs(root), plan=study_plan.load(plan_file))
    assert sorted(study["tuning_runs"]) == ["1t1s-s0", "2t2s-s0", "baseline-s0"]
    assert all(row["seeds"] == [1, 2] for row in study["controls"])
    assert all(c["seeds"] == [2, 2] for c in study["comparisons"])
    curves = study["heldout_curves"]["controls"]["2t2s"]
    assert curves[-1]["n"] == 2 and curves[-1]["mean"] == pytest.approx(0.3, abs=0.08)  # seed 0's 0.7 left out
    # beside the answer: the same comparisons with the tuning runs in, to show what they moved
    with_tuning = {(c["left"], c["right"]): c for c in study["with_tuning"]}
    assert with_tuning[("2t2s", "base")]["seeds"] == [3, 3] and with_tuning[("2t2s", "base")]["delta"] > 0.15
    findings = " ".join(study["plan"])
    assert "2t2s mixes tuning seed(s) [0] with declared seed(s) [1, 2]" in findings and "differ" not in findings
    primary = study["primary"]
    assert (primary["left"], primary["right"], primary["endpoint"], primary["seeds"]) == (
        "2t2s",
        "1t1s",
        "heldout",
        [2, 2],
    )
    assert primary["method"] == "Welch t over seeds" and primary["mde"] > 0
    assert main([str(root), "--plan", str(plan_file), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "study.md").read_text()
    assert "Primary comparison (declared): **2t2s - 1t1s** on heldout" in text
    assert "| 2t2s-s0 *tuning* |" in text and "with the tuning runs counted in" in text


def test_an_interim_primary_with_one_seed_a_side_names_the_method_it_used(grid, tmp_path):
    """One declared seed of 2t2s against two of 1t1s: Welch cannot run; the primary line says what did."""
    root, plan_file = grid
    for seed in (0, 2):  # the tuning seed and one declared seed of 2t2s not run yet
        shutil.rmtree(root / f"2t2s-s{seed}")
    study = summarize(load_runs(root), plan=study_plan.load(plan_file))
    primary = study["primary"]
    assert primary["seeds"] == [1, 2] and primary["method"] != "Welch t over seeds"
    assert primary["test_name"].startswith(primary["method"]) and "needs 2+ seeds a side" in primary["test_name"]
    assert main([str(root), "--plan", str(plan_file), "--out", str(tmp_path / "out")]) == 0
    line = next(x for x in (tmp_path / "out" / "study.md").read_text().splitlines() if x.startswith("Primary"))
    assert (
        "Welch t over seed-level scores, 95%:" not in line
        and "needs 2+ seeds a side" in line
        and "seeds 1 vs 2" in line
    )


def test_departures_from_the_plan_are_flagged(grid):
    root, plan_file = grid
    _run(root, "2t2s", 7, 0.4)  # a seed nobody declared
    _run(root, "2t2s-noevo", 1, 0.4)  # a control the plan does not have
    params = root / "1t1s-s2" / "params.yaml"
    _write(params, {**yaml.safe_load(params.read_text()), "dag": {"arms": ["population"], "generations": 8}})
    found = study_plan.findings(load_runs(root), study_plan.load(plan_file))
    assert "2t2s-s7: seed 7 is neither a declared nor a tuning seed" in found
    assert "2t2s-noevo-s1: control '2t2s-noevo' is not in the plan" in found
    assert "1t1s-s2: params differ from the plan: dag.generations = 8 (plan: 6)" in found
    assert study_plan.findings(load_runs(root), None)[0].startswith("no plan")


def test_a_plan_is_checked_when_read(tmp_path):
    bad = tmp_path / "plan.yaml"
    bad.write_text(yaml.safe_dump({**PLAN, "tuning_seeds": [0, 1]}))
    with pytest.raises(study_plan.PlanError, match="both declared and tuning"):
        study_plan.load(bad)
    bad.write_text(yaml.safe_dump({k: v for k, v in PLAN.items() if k != "primary"}))
    with pytest.raises(study_plan.PlanError, match="no primary"):
        study_plan.load(bad)


def test_a_run_can_be_checked_against_the_plan_before_it_starts(grid, capsys):
    _, plan_file = grid
    assert study_plan.main([str(plan_file), "2t2s", "1"]) == 0 and study_plan.main([str(plan_file), "2t2s", "0"]) == 0
    assert study_plan.main([str(plan_file), "2t2s", "3"]) == 1
    assert "seed 3 is neither a declared nor a tuning seed" in capsys.readouterr().err


def test_the_learning_studys_runs_are_as_its_retroactive_plan_declares():
    """study/learning/plan.yaml (written after the runs) sets seed 0 apart as tuning; every run's params
    match its budget and controls, so the only findings are that it is retroactive and that every control
    mixes the tuning seed with the declared ones."""
    plan = study_plan.load(REPO / "study" / "learning" / "plan.yaml")
    runs = load_runs(REPO / "study" / "learning" / "runs")
    found = study_plan.findings(runs, plan)
    assert plan["retroactive"] and found[0].startswith("the plan was written after the runs")
    assert sorted(f.split()[0] for f in found[1:]) == ["1t1s", "2t2s", "2t2s-null", "baseline"]
    assert all("mixes tuning seed(s) [0]" in f for f in found[1:])


def test_a_plan_that_names_a_file_its_commit_lacks_stops_the_run(tmp_path, monkeypatch, capsys):
    """The first population plan named params/population-study.yaml, which no commit ever had."""
    plan = {
        "controls": {"1t1s": {}},
        "seeds": [3],
        "params": {},
        "primary": {"endpoint": "heldout", "left": "1t1s", "right": "base"},
        "overlay": ["params/learning-study.yaml", "params/no-such-overlay.yaml"],
    }
    (tmp_path / "params").mkdir()
    (tmp_path / "params" / "learning-study.yaml").write_text("{}\n")
    (tmp_path / "plan.yaml").write_text(yaml.safe_dump(plan))
    assert study_plan.missing_files(plan, tmp_path) == ["params/no-such-overlay.yaml"]
    monkeypatch.chdir(tmp_path)
    assert study_plan.main(["plan.yaml", "1t1s", "3"]) == 1
    assert "params/no-such-overlay.yaml" in capsys.readouterr().err
    (tmp_path / "params" / "no-such-overlay.yaml").write_text("{}\n")
    assert study_plan.main(["plan.yaml", "1t1s", "3"]) == 0


def _with_pass_rates(root, samples: int = 8) -> None:
    """Give every run of the grid pass rates over `samples` answers at temperature 1 (the runs' last generation):
    2t2s's a little above 1t1s's, so the pass-rate primary differs from the greedy one."""
    import json
    import random

    for run in sorted(root.iterdir()):
        control, seed = run.name.rsplit("-s", 1)
        arm = "baseline" if control == "baseline" else "population"
        path = run / "dynamics" / arm / "heldout_verdicts.json"
        doc = json.loads(path.read_text())
        rng = random.Random(run.name)
        level = {"2t2s": 0.5, "1t1s": 0.3, "baseline": 0.2}[control] + 0.05 * int(seed)
        doc["base_pass_rates"] = {t: 0.25 for t in doc["base"]}
        doc["pass_rates"] = [{} for _ in doc["generations"][:-1]] + [
            {
                slot: {t: min(1.0, max(0.0, level + rng.choice([-0.125, 0, 0.125]))) for t in doc["base"]}
                for slot in doc["generations"][-1]
            }
        ]
        _write(path, doc)
        params = yaml.safe_load((run / "params.yaml").read_text())
        _write(run / "params.yaml", {**params, "heldout": {**(params.get("heldout") or {}), "samples": samples}})


def test_the_primary_is_read_on_the_pass_rate_where_the_runs_sampled_it(grid, tmp_path):
    """Plans on pools v2 and v3 declare the mean pass rate over 8 answers at temperature 1 as the endpoint
    (greedy beside it): where the runs have it the primary is that comparison, and study.md's line names it; a
    study that scored greedily only keeps pass@1; a plan may name the score, and a score the analysis does not
    compute is refused when the plan is read."""
    root, plan_file = grid
    greedy = summarize(load_runs(root), plan=study_plan.load(plan_file))["primary"]
    assert greedy["score"] == "pass@1"
    _with_pass_rates(root)
    study = summarize(load_runs(root), plan=study_plan.load(plan_file))
    primary = study["primary"]
    [sampled] = [
        c
        for c in study["comparisons"]
        if (c["left"], c["right"], c["bench"], c["score"]) == ("2t2s", "1t1s", "heldout", "pass rate at temperature 1")
    ]
    assert primary["score"] == "pass rate at temperature 1"
    assert (primary["delta"], primary["low"], primary["high"]) == (sampled["delta"], sampled["low"], sampled["high"])
    assert primary["delta"] != greedy["delta"]
    assert main([str(root), "--plan", str(plan_file), "--out", str(tmp_path / "out")]) == 0
    line = next(x for x in (tmp_path / "out" / "study.md").read_text().splitlines() if x.startswith("Primary"))
    assert "on heldout (pass rate at temperature 1)" in line
    named = tmp_path / "named.yaml"
    named.write_text(yaml.safe_dump({**PLAN, "primary": {**PLAN["primary"], "score": "pass@1"}}))
    assert summarize(load_runs(root), plan=study_plan.load(named))["primary"]["delta"] == greedy["delta"]
    named.write_text(yaml.safe_dump({**PLAN, "primary": {**PLAN["primary"], "score": "pass@64"}}))
    with pytest.raises(study_plan.PlanError, match="primary score 'pass@64'"):
        study_plan.load(named)
