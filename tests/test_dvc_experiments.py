"""The README's experiment commands, for real: `dvc exp run` twice on tiny params, then the diffs.

A scratch git + DVC project holds copies of the library, the stages and the workflow, with a
dvc.yaml rendered for one generation on the tiny random model. The first experiment runs the
whole DAG; the second changes the teacher reward (`-S reward.teacher_mode=zero_sum`), so DVC
reruns only what depends on it. `dvc metrics diff` between the two must list the benchmark
summary under the documented stable keys.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.dvc_project import BIN, new_dvc_project
from tests.dvc_project import run as _run

pytestmark = pytest.mark.slow



@pytest.fixture(scope="module")
def experiments(tmp_path_factory, tiny_params_dict) -> Path:
    root = tmp_path_factory.mktemp("dvc_project")
    params = dict(tiny_params_dict)
    params["dag"] = {**params["dag"], "generations": 1}
    params["bench"] = {**params["bench"], "benchmarks": ["gsm8k"], "limit": 1, "max_new_tokens": 16,
                       "data_dir": str(REPO.parent / "shared" / "benchmarks")}
    new_dvc_project(root, params)
    _run(root, f"{BIN}/dvc", "exp", "run", "-n", "learnability")
    _run(root, f"{BIN}/dvc", "exp", "run", "-n", "zerosum", "-S", "reward.teacher_mode=zero_sum")
    return root


def test_both_experiments_are_recorded_with_their_params(experiments):
    shown = json.loads(_run(experiments, f"{BIN}/dvc", "exp", "show", "--json").stdout)
    names = {exp.get("name") for commit in shown for exp in commit.get("experiments") or []}
    assert {"learnability", "zerosum"} <= names


def test_metrics_diff_lists_the_benchmark_summary_under_stable_keys(experiments):
    diff = json.loads(_run(experiments, f"{BIN}/dvc", "metrics", "diff", "learnability", "zerosum", "--all", "--json").stdout)
    summary = diff["results/metrics.json"]
    for key in ("bench.gsm8k.population.mean", "bench.gsm8k.population.best", "bench.gsm8k.population.weakest",
                "bench.gsm8k.baseline", "bench.gsm8k.base", "avg.math.population.mean", "avg.overall.baseline"):
        assert key in summary, f"{key} missing from dvc metrics diff: {sorted(summary)[:20]}"
        assert set(summary[key]) >= {"old", "new"}
    # the base model is untouched by the reward mode: same score in both experiments
    assert summary["bench.gsm8k.base"]["old"] == summary["bench.gsm8k.base"]["new"]


def test_params_diff_shows_the_changed_reward_mode(experiments):
    diff = json.loads(_run(experiments, f"{BIN}/dvc", "params", "diff", "learnability", "zerosum", "--json").stdout)
    assert diff["params.yaml"]["reward.teacher_mode"] == {"old": "learnability", "new": "zero_sum"}


def test_every_dvc_plot_renders(experiments):
    shown = json.loads(_run(experiments, f"{BIN}/dvc", "plots", "show", "--json").stdout)
    assert not shown.get("errors"), shown.get("errors")
    for plot_id in ("population_solve_rate", "population_ratings", "population_pairing", "baseline_validity",
                    "arms_validity_rate", "arms_student_reward"):
        assert shown["data"].get(plot_id), f"plot {plot_id} has no data"


def test_plots_diff_draws_both_experiments(experiments):
    shown = json.loads(_run(experiments, f"{BIN}/dvc", "plots", "diff", "learnability", "zerosum", "--json").stdout)
    assert not shown.get("errors"), shown.get("errors")
    revisions = {rev for plot in shown["data"]["population_solve_rate"] for rev in plot.get("revisions", [])}
    assert revisions == {"learnability", "zerosum"}


@pytest.fixture(scope="module")
def arm_experiments(experiments) -> Path:
    """One experiment per arm, the README's commands as they are."""
    root = experiments
    for arm in ("baseline", "population"):
        _run(root, "git", "checkout", "--", "params.yaml", "dvc.yaml")
        _run(root, f"{BIN}/dvc", "exp", "run", "-n", arm, "-S", f"dag.arms=[{arm}]")
    return root


def test_arms_as_experiments_diff_under_arm_independent_keys(arm_experiments):
    diff = json.loads(_run(arm_experiments, f"{BIN}/dvc", "metrics", "diff", "baseline", "population", "--all",
                           "--json").stdout)
    summary = diff["results/metrics.json"]
    for key in ("bench.gsm8k.mean", "bench.gsm8k.best", "bench.gsm8k.weakest", "bench.gsm8k.students.mean",
                "bench.gsm8k.base", "bench.gsm8k.diff.mean_minus_base.delta"):
        assert summary.get(key, {}).keys() >= {"old", "new"}, f"{key}: {summary.get(key)} ({sorted(summary)[:20]})"
    # each experiment benchmarked its own arm only: the other arm's members are absent on one side
    assert summary["bench.gsm8k.member.baseline-solo"].get("new") is None
    assert summary["bench.gsm8k.member.population-student0"].get("old") is None
    params = json.loads(_run(arm_experiments, f"{BIN}/dvc", "params", "diff", "baseline", "population",
                             "--json").stdout)
    arms = params["params.yaml"]["dag.arms"]  # DVC shows list values as their string form
    assert (str(arms["old"]), str(arms["new"])) == ("['baseline']", "['population']")
