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

from tests.conftest import REPO, without_warm_start_or_pool
from tests.dvc_project import BIN, new_dvc_project
from tests.dvc_project import run as _run

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def experiments(tmp_path_factory, tiny_params_dict) -> Path:
    root = tmp_path_factory.mktemp("dvc_project")
    params = without_warm_start_or_pool(tiny_params_dict, propose_pool=True)  # the tiny model proposes its pool
    # one update job per arm (the default shape, one per adapter, is tested by the Snakemake smoke run and
    # SLURM): DVC runs a stage at a time, and each job loads the model again
    params["dag"] = {**params["dag"], "generations": 1, "update_jobs": 1}
    params["bench"] = {
        **params["bench"],
        "benchmarks": ["gsm8k"],
        "limit": 1,
        "max_new_tokens": 16,
        "data_dir": str(REPO.parent / "shared" / "benchmarks"),
    }
    new_dvc_project(root, params)
    _run(root, f"{BIN}/dvc", "exp", "run", "-n", "learnability")
    _run(root, f"{BIN}/dvc", "exp", "run", "-n", "zerosum", "-S", "reward.teacher_mode=zero_sum")
    return root


def test_both_experiments_are_recorded_with_their_params(experiments):
    shown = json.loads(_run(experiments, f"{BIN}/dvc", "exp", "show", "--json").stdout)
    names = {exp.get("name") for commit in shown for exp in commit.get("experiments") or []}
    assert {"learnability", "zerosum"} <= names


def test_metrics_diff_lists_the_headline_under_stable_keys(experiments):
    diff = json.loads(
        _run(experiments, f"{BIN}/dvc", "metrics", "diff", "learnability", "zerosum", "--all", "--json").stdout
    )
    assert set(diff) == {"results/headline.json", "results/progress.json"}, sorted(diff)  # nothing else is a metric
    summary = diff["results/headline.json"]
    for key in (
        "math.mean",
        "math.best",
        "math.weakest",
        "math.baseline",
        "math.base",
        "math.mean_minus_baseline",
        "overall.mean",
        "overall.baseline",
        "solve_rate.mean",
        "solve_rate.baseline",
    ):
        assert key in summary, f"{key} missing from dvc metrics diff: {sorted(summary)[:20]}"
        assert set(summary[key]) >= {"old", "new"}
    # the base model is untouched by the reward mode: same score in both experiments
    assert summary["math.base"]["old"] == summary["math.base"]["new"]


def test_exp_show_has_a_readable_number_of_metric_columns(experiments):
    """`dvc exp show`: the headline and the live progress are the only metrics (a few dozen columns, not the
    thousand of the full tables, which stay plain outputs)."""
    csv = _run(experiments, f"{BIN}/dvc", "exp", "show", "--csv", "--drop", ".*/.*").stdout  # the file-hash columns
    header = csv.splitlines()[0].split(",")
    shown = json.loads(_run(experiments, f"{BIN}/dvc", "exp", "show", "--json").stdout)
    metric_files = {
        name
        for commit in shown
        for exp in commit.get("experiments") or []
        for rev in exp["revs"]
        for name in ((rev.get("data") or {}).get("metrics") or {})
    }
    assert metric_files <= {"results/headline.json", "results/progress.json"}, metric_files
    metric_columns = [
        c
        for c in header
        if c.split(".")[0] in {"math", "overall", "code", "cruxeval", "heldout", "solve_rate", "population", "baseline"}
    ]
    assert 10 <= len(metric_columns) <= 45, metric_columns


def test_params_diff_shows_the_changed_reward_mode(experiments):
    diff = json.loads(_run(experiments, f"{BIN}/dvc", "params", "diff", "learnability", "zerosum", "--json").stdout)
    assert diff["params.yaml"]["reward.teacher_mode"] == {"old": "learnability", "new": "zero_sum"}


def test_every_dvc_plot_renders(experiments):
    shown = json.loads(_run(experiments, f"{BIN}/dvc", "plots", "show", "--json").stdout)
    assert not shown.get("errors"), shown.get("errors")
    for plot_id in (
        "population_solve_rate",
        "population_ratings",
        "population_pairing",
        "baseline_validity",
        "arms_validity_rate",
        "arms_student_reward",
    ):
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
    diff = json.loads(
        _run(arm_experiments, f"{BIN}/dvc", "metrics", "diff", "baseline", "population", "--all", "--json").stdout
    )
    summary = diff["results/headline.json"]
    for key in ("math.mean", "math.best", "math.weakest", "math.base", "math.mean_minus_base", "solve_rate.mean"):
        assert summary.get(key, {}).keys() >= {"old", "new"}, f"{key}: {summary.get(key)} ({sorted(summary)[:20]})"
    # each experiment ran one arm: no baseline-side keys in either
    assert "math.baseline" not in summary and "math.mean_minus_baseline" not in summary
    params = json.loads(
        _run(arm_experiments, f"{BIN}/dvc", "params", "diff", "baseline", "population", "--json").stdout
    )
    arms = params["params.yaml"]["dag.arms"]  # DVC shows list values as their string form
    assert (str(arms["old"]), str(arms["new"])) == ("['baseline']", "['population']")
