"""perf/same_bytes.py's pure parts: what counts as a difference, which differences are timing, the stage order,
which of the run's outputs a stage gets, a control's changed params.

The whole check (a study run's generation again at a new commit) needs a finished study run and its DVC
cache; its pieces that decide the verdict are tested here on small inputs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json

import pytest

from tests.conftest import REPO

spec = importlib.util.spec_from_file_location("same_bytes", REPO / "perf" / "same_bytes.py")
same_bytes = importlib.util.module_from_spec(spec)
spec.loader.exec_module(same_bytes)


def test_json_differences_name_the_key_paths():
    old = {"a": 1, "b": {"wall_s": 3.0, "x": [1, 2]}, "gone": 0}
    new = {"a": 1, "b": {"wall_s": 4.5, "x": [1, 3]}, "added": 0}
    assert same_bytes.json_differences(old, new) == [
        "added: only new",
        "b.wall_s: 3.0 -> 4.5",
        "b.x[1]: 2 -> 3",
        "gone: only old",
    ]
    assert same_bytes.json_differences(old, old) == []


def test_only_time_fields_count_as_timing():
    assert same_bytes.is_timing("b.wall_s: 3.0 -> 4.5")
    assert same_bytes.is_timing("cost.tokens_per_s: 10 -> 11")
    assert not same_bytes.is_timing("b.x[1]: 2 -> 3")
    assert not same_bytes.is_timing("loss_sum: 1.0 -> 1.5")
    assert not same_bytes.is_timing("heldout.student0.accuracy: 0.1 -> 0.2")
    assert not same_bytes.is_timing("wall_s: only new")  # a new key is a change of what is written, not timing


def _write_cache(root, content: bytes) -> str:
    md5 = hashlib.md5(content).hexdigest()
    path = root / ".dvc" / "cache" / "files" / "md5" / md5[:2] / md5[2:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return md5


@pytest.mark.parametrize(
    ("new_metrics", "verdict"),
    [
        ({"accuracy": 0.5, "wall_s": 2.0}, "same bytes"),
        ({"accuracy": 0.5, "wall_s": 9.0}, "timing fields only"),
        ({"accuracy": 0.5, "wall_s": 2.0, "unanswered": 0.1}, "keys added, the rest timing or the same"),
        ({"accuracy": 0.7, "wall_s": 2.0}, "DIFFERS"),
        ({"wall_s": 2.0}, "DIFFERS"),  # a key the old code wrote is gone
    ],
)
def test_an_output_folder_is_compared_file_by_file(tmp_path, new_metrics, verdict):
    project = tmp_path / "project"
    weights = b"\x00\x01weights"
    old_metrics = json.dumps({"accuracy": 0.5, "wall_s": 2.0}).encode()
    manifest = [
        {"relpath": "adapter.safetensors", "md5": _write_cache(project, weights)},
        {"relpath": "metrics.json", "md5": _write_cache(project, old_metrics)},
    ]
    dir_md5 = hashlib.md5(json.dumps(manifest).encode()).hexdigest() + ".dir"
    listing = project / ".dvc/cache/files/md5" / dir_md5[:2] / dir_md5[2:]
    listing.parent.mkdir(parents=True, exist_ok=True)
    listing.write_text(json.dumps(manifest))
    work = tmp_path / "work"
    out = work / "results" / "trained"
    out.mkdir(parents=True)
    (out / "adapter.safetensors").write_bytes(weights)
    (out / "metrics.json").write_text(json.dumps(new_metrics))
    result = same_bytes.compare({"path": "results/trained", "md5": dir_md5}, work, same_bytes.Cache(project))
    assert result["verdict"] == verdict
    assert result["files"] == 2
    assert (result["differences"] == {}) == (verdict == "same bytes")


def test_stages_run_after_the_stages_they_read():
    plans = [
        {"name": "update", "deps": ["rollouts", "params.yaml"], "outs": ["trained"]},
        {"name": "checkpoint", "deps": ["trained", "tasks"], "outs": ["checkpoint"]},
        {"name": "reward", "deps": ["tasks"], "outs": ["rollouts"]},
    ]
    assert [p["name"] for p in same_bytes.in_dag_order(plans)] == ["reward", "update", "checkpoint"]


def test_the_generation_picks_its_own_stages_only():
    class Stage:
        def __init__(self, addressing):
            self.name = addressing

    stages = [
        Stage(a) for a in ("pair@population-gen1", "update@population-gen1-0", "pair@population-gen10", "dag_shape")
    ]
    picked = same_bytes.chosen_stages(stages, "population:1")
    assert [s.name for s in picked] == ["pair@population-gen1", "update@population-gen1-0"]


def test_the_record_leaves_out_the_scratch_folder():
    args = ["--project", "../pw-20", "--work", "/tmp/x", "--exp", "a", "--work=/tmp/y", "--json", "r.json"]
    assert same_bytes.without_work(args) == ["--project", "../pw-20", "--exp", "a", "--json", "r.json"]


def test_a_control_changes_a_key_the_run_has_and_refuses_one_it_has_not():
    params = {"update": {"learning_rate": 0.001, "steps": 1}, "dag": {"arms": ["population"]}}
    changed = same_bytes.with_settings(params, ["update.learning_rate=0.00101", "dag.arms=[baseline]"])
    assert changed == {"update": {"learning_rate": 0.00101, "steps": 1}, "dag": {"arms": ["baseline"]}}
    assert params["update"]["learning_rate"] == 0.001  # the run's own params untouched
    for missing in ("update.lr=1", "updat.learning_rate=1", "update.learning_rate.x=1"):
        with pytest.raises(SystemExit, match="the run's params have no"):
            same_bytes.with_settings(params, [missing])


def test_a_stage_gets_the_runs_outputs_it_reads_that_no_chosen_stage_before_it_wrote():
    old_outs = {path: {} for path in ("results/a/tasks.jsonl", "results/a/update/part0", "results/a/update/part1")}
    deps = ["results/a/tasks.jsonl", "results/a/update", "results/.code/update", "params.yaml", "populora/x.py"]
    # a folder of several outputs (the update jobs' parts) is restored part by part; code stamps are the checkout's
    assert same_bytes.inputs_to_restore(deps, old_outs, set(), "gather") == [
        "results/a/tasks.jsonl",
        "results/a/update/part0",
        "results/a/update/part1",
    ]
    written = {"results/a/update/part0", "results/a/tasks.jsonl"}
    assert same_bytes.inputs_to_restore(deps, old_outs, written, "gather") == ["results/a/update/part1"]
    with pytest.raises(SystemExit, match="gather reads results/b, which the run's dvc.lock has no output for"):
        same_bytes.inputs_to_restore(["results/b"], old_outs, set(), "gather")


def test_the_workspace_run_is_read_from_the_clones_files(tmp_path):
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (tmp_path / "params.yaml").write_text("base: {seed: 21}\n")
    assert same_bytes.run_files(tmp_path, "workspace") == (None, "schema: '2.0'\nstages: {}\n", "base: {seed: 21}\n")
