"""Every member of an arm shares one generation pass on the EvalPlus and lm-eval benchmarks too
(stacked adapters, rows routed to their member's): each member's answers equal those it gives
benchmarked alone, and members answer differently."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from stages import bench as bench_stage
from tests.tiny_model import export_members

REPO = Path(__file__).resolve().parents[1]
BENCH_DATA = Path(os.environ.get("POPULORA_BENCHMARKS") or REPO.parent / "shared" / "benchmarks")
needs_data = pytest.mark.skipif(
    not (BENCH_DATA / "evalplus").is_dir(), reason=f"offline benchmark data not at {BENCH_DATA}"
)
ANSWER = {"humaneval_plus": "raw", "gsm8k": "response"}  # the model's own text in samples.jsonl


def _answers(folder: Path, model: str, bench: str) -> list[str]:
    return [json.loads(line)[ANSWER[bench]] for line in (folder / model / "samples.jsonl").read_text().splitlines()]


@needs_data
@pytest.mark.slow  # subprocesses / whole harness runs: CI's full lane, not the fast one
@pytest.mark.parametrize("bench", ["humaneval_plus", "gsm8k"])
def test_members_in_one_pass_answer_as_when_benchmarked_alone(tmp_path, tiny_model_dir, monkeypatch, bench):
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    params = tmp_path / "params.yaml"
    # batch 2 < 3 problems x 2 members: the shared pass spans several batches
    params.write_text(
        f"model:\n  device: cpu\nbench:\n  data_dir: {BENCH_DATA}\n  limit: 3\n  max_new_tokens: 16\n"
        "  batch_size: 2\n  together: []\n"
    )  # a job of its own
    seeds = {"student0": 1, "student1": 2}
    argv = [
        "--params",
        str(params),
        "--arm",
        "population",
        "--bench",
        bench,
        "--base-model",
        str(tiny_model_dir),
        "--log",
        str(tmp_path / "bench.log"),
    ]
    both = export_members(tmp_path / "both", tiny_model_dir, seeds)
    assert bench_stage.main([*argv, "--models", str(both), "--results", str(tmp_path / "together")]) == 0
    answers = {}
    for slot, seed in seeds.items():
        alone = export_members(tmp_path / slot, tiny_model_dir, {slot: seed})
        assert bench_stage.main([*argv, "--models", str(alone), "--results", str(tmp_path / f"alone-{slot}")]) == 0
        model = f"population-{slot}"
        together = json.loads((tmp_path / "together" / f"{model}.json").read_text())
        single = json.loads((tmp_path / f"alone-{slot}" / f"{model}.json").read_text())
        assert together["n"] == single["n"] == 3 and together["models_in_pass"] == 2 and single["models_in_pass"] == 1
        assert together["per_problem"] == single["per_problem"] and together["metrics"] == single["metrics"]
        answers[slot] = _answers(tmp_path / "together", model, bench)
        assert answers[slot] == _answers(tmp_path / f"alone-{slot}", model, bench)
    assert answers["student0"] != answers["student1"]
    if bench == "gsm8k":  # lm-eval's record names the member's own adapter
        harness = json.loads((tmp_path / "together" / "population-student1" / "harness" / "results.json").read_text())
        assert harness["config"]["model_args"]["peft"] == str(both / "student1" / "adapter")
        assert harness["config"]["model_args"]["stacked_with"] == ["population-student0", "population-student1"]
