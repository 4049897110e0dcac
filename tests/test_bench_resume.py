"""A bench job resumes: what an earlier attempt finished is taken back, not run again.

    python -m pytest -m "" tests/test_bench_resume.py -q

populora.bench.jobs.run_resumable (the vllm engine's math benchmarks, model by model) with a stand-in
`run_benchmark` (no model): the second model fails on the first attempt; the retry runs only that one
and the third; a change of params runs everything again. Then the bench stage on the tiny model,
SIGKILLed right after it kept its first piece of work and run again: CRUXEval (pieces of problems),
lm-eval's base model (its request cache) and lm-eval's stacked members (their store of generations)
generate only what was not kept, and end with the verdicts and answers of an uninterrupted run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from populora.bench import BenchError, jobs
from populora.bench.models import BenchModel
from populora.bench.settings import settings_for
from populora.config import parse_params
from populora.core.refs import ModelRef
from stages import bench
from tests.tiny_model import export_members

REPO = Path(__file__).resolve().parents[1]


class Log:
    def info(self, *args):
        pass


@pytest.fixture
def setup(tmp_path, monkeypatch):
    base = tmp_path / "base_model"
    base.mkdir()
    (base / "config.json").write_text("{}")
    models = []
    for slot in ("student0", "student1", "teacher0"):
        adapter = tmp_path / "models" / slot / "adapter"
        adapter.mkdir(parents=True)
        (adapter / "adapter_config.json").write_text("{}")
        models.append(BenchModel(ModelRef("population", slot, slot.rstrip("01")), adapter))
    ran, failing = [], {"population-student1"}

    def run_benchmark(settings, chosen, base_model, out, log, partial=None):
        (model,) = chosen
        ran.append(model.name)
        if model.name in failing:
            raise BenchError("out of time")
        (out / model.name).mkdir()
        (out / model.name / "samples.jsonl").write_text(model.name)
        return {model.name: {"correct": 1, "n": 2}}

    monkeypatch.setattr(jobs, "run_benchmark", run_benchmark)
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    return tmp_path, base, models, ran, failing, raw


def _run(tmp_path, base, models, raw, attempt: int):
    out = tmp_path / f"staging{attempt}"
    out.mkdir()
    settings = settings_for(parse_params(raw), "gsm8k")  # the key is the benchmark's resolved settings
    return out, jobs.run_resumable(settings, models, base, out, tmp_path / "gsm8k", Log())


def test_a_retry_runs_only_the_models_not_finished(setup):
    tmp_path, base, models, ran, failing, raw = setup
    with pytest.raises(BenchError):
        _run(tmp_path, base, models, raw, 1)
    assert ran == ["population-student0", "population-student1"]
    assert (tmp_path / "gsm8k.partial" / "population-student0" / "samples.jsonl").is_file()
    failing.clear()
    out, results = _run(tmp_path, base, models, raw, 2)
    assert ran[2:] == ["population-student1", "population-teacher0"]  # student0 taken back
    assert set(results) == {m.name for m in models} and results["population-student0"] == {"correct": 1, "n": 2}
    assert all((out / m.name / "samples.jsonl").read_text() == m.name for m in models)


def test_another_params_or_adapter_runs_everything_again(setup):
    tmp_path, base, models, ran, failing, raw = setup
    failing.clear()
    _run(tmp_path, base, models, raw, 1)
    raw["bench"]["max_new_tokens"] += 1
    _run(tmp_path, base, models, raw, 2)
    assert ran == [m.name for m in models] * 2
    (models[0].adapter / "adapter_model.safetensors").write_bytes(b"new")
    _run(tmp_path, base, models, raw, 3)
    assert ran[6:] == ["population-student0"]


# ---------------------------------------------------------------- a killed job keeps its finished problems

BENCH_DATA = Path(os.environ.get("POPULORA_BENCHMARKS") or REPO.parent / "shared" / "benchmarks")
needs_data = pytest.mark.skipif(
    not (BENCH_DATA / "cruxeval" / "cruxeval.jsonl").is_file() or not (BENCH_DATA / "math").is_dir(),
    reason=f"benchmark data not at {BENCH_DATA}",
)

# Runs the bench stage with `patch` applied: it stops (sleeps) right after the first piece of work
# is kept, so the test can SIGKILL it there, as SLURM or a user would.
KILLABLE = """
import pathlib, sys, time
from populora.bench import lmeval, partial
marker = pathlib.Path(sys.argv[1])

def stop_here():
    marker.write_text("kept")
    time.sleep(600)

def after(function):
    def wrapped(*args, **kwargs):
        result = function(*args, **kwargs)
        stop_here()
        return result
    return wrapped

{patch}
from stages import bench
sys.exit(bench.main(sys.argv[2:]))
"""
PATCHES = {  # where each runner keeps a piece of finished work
    "pieces": "partial.Partial.keep_piece = after(partial.Partial.keep_piece)",
    "lm_eval_cache": "lmeval._CountingHook.add_partial = after(lmeval._CountingHook.add_partial)",
    "members_store": "lmeval._append_line = after(lmeval._append_line)",
}


def _kill_after_first_piece(tmp_path, argv: list[str], patch: str) -> None:
    marker = tmp_path / "kept.marker"
    script = KILLABLE.replace("{patch}", PATCHES[patch])
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    stderr = tmp_path / "killed.stderr"
    with open(stderr, "w") as sink:
        job = subprocess.Popen(
            [sys.executable, "-c", script, str(marker), *argv],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=sink,
        )
        try:
            deadline = time.monotonic() + 300
            while not marker.exists():
                assert job.poll() is None, f"the job ended before keeping anything:\n{stderr.read_text()[-3000:]}"
                assert time.monotonic() < deadline, "no piece kept within 300 s"
                time.sleep(0.05)
        finally:
            job.send_signal(signal.SIGKILL)
            job.wait()
    assert "\r" not in stderr.read_text()  # off a terminal: progress lines, no bar


def _params_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(
        f"model:\n  device: cpu\nverify:\n  workers: 1\nbench:\n  data_dir: {BENCH_DATA}\n  together: []\n{text}"
    )  # jobs of their own (a together job resumes: test_bench_together.py)
    return path


def _rerun_and_compare(tmp_path, argv, results: Path, answer: str, models: list[str]) -> str:
    """Rerun the killed job, then the same job uninterrupted elsewhere: same verdicts and answers.
    Returns the rerun's log."""
    log = tmp_path / "rerun.log"
    assert Path(f"{results}.partial").is_dir()
    assert bench.main([*argv, "--results", str(results), "--log", str(log)]) == 0
    assert not Path(f"{results}.partial").exists()  # gone once the results are in place
    fresh = tmp_path / "fresh"
    assert bench.main([*argv, "--results", str(fresh), "--log", str(tmp_path / "fresh.log")]) == 0
    for name in models:
        resumed, whole = (json.loads((folder / f"{name}.json").read_text()) for folder in (results, fresh))
        assert resumed["per_problem"] == whole["per_problem"] and resumed["n"] == whole["n"]
        rows = [
            [json.loads(line)[answer] for line in (folder / name / "samples.jsonl").read_text().splitlines()]
            for folder in (results, fresh)
        ]
        assert rows[0] == rows[1]
        assert resumed.get("per_problem_gold_logprob") == whole.get("per_problem_gold_logprob")
    return log.read_text()


@needs_data
@pytest.mark.slow  # stage subprocesses on the tiny model
def test_a_killed_cruxeval_job_reruns_only_the_problems_it_had_not_finished(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    # two members, batch 1: pieces of 4 // 2 = 2 problems (populora.bench.partial.piece_size), 4 pieces
    params = _params_file(tmp_path, "  limits: {cruxeval_o: 8}\n  batch_size: 1\n  cruxeval:\n    max_new_tokens: 24\n")
    members = export_members(tmp_path / "models", tiny_model_dir, {"student0": 1, "student1": 2})
    argv = [
        "--params",
        str(params),
        "--arm",
        "population",
        "--bench",
        "cruxeval_o",
        "--base-model",
        str(tiny_model_dir),
        "--models",
        str(members),
    ]
    results = tmp_path / "bench" / "cruxeval_o"
    _kill_after_first_piece(tmp_path, [*argv, "--results", str(results)], "pieces")
    kept = sorted(p.name for p in Path(f"{results}.partial", "_pieces", "population-student0").iterdir())
    assert kept == ["piece-00000.json"] and not results.exists()
    log = _rerun_and_compare(tmp_path, argv, results, "completion", ["population-student0", "population-student1"])
    assert "cruxeval_o: 2 of 8 problems kept from an earlier attempt" in log
    assert "cruxeval_o: generated 6 problems for 2 model(s) in 3 piece(s) of up to 2" in log


@needs_data
@pytest.mark.slow  # lm-eval runs on the tiny model
def test_a_killed_lm_eval_job_takes_back_its_finished_requests(tmp_path, tiny_model_dir, monkeypatch):
    """The bare base: lm-eval's request cache (use_cache) under <results>.partial/."""
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    params = _params_file(tmp_path, "  limit: 4\n  max_new_tokens: 16\n  batch_size: 1\n")
    argv = ["--params", str(params), "--bench", "gsm8k", "--base-model", str(tiny_model_dir)]
    results = tmp_path / "bench" / "gsm8k"
    _kill_after_first_piece(tmp_path, [*argv, "--results", str(results)], "lm_eval_cache")
    assert [p.name.endswith("_rank0.db") for p in Path(f"{results}.partial", "_lm_eval").iterdir()] == [True]
    log = _rerun_and_compare(tmp_path, argv, results, "response", ["base"])
    assert "gsm8k (lm-eval): 3/3 requests (100%)" in log  # one of the four answered from the cache


@needs_data
@pytest.mark.slow  # lm-eval runs on the tiny model
def test_a_killed_lm_eval_members_job_takes_back_its_finished_batches(tmp_path, tiny_model_dir, monkeypatch):
    """Members in one stacked pass: every member's generations are kept per batch."""
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    params = _params_file(tmp_path, "  limit: 3\n  max_new_tokens: 16\n  batch_size: 1\n")
    members = export_members(tmp_path / "models", tiny_model_dir, {"student0": 1, "student1": 2})
    argv = [
        "--params",
        str(params),
        "--arm",
        "population",
        "--bench",
        "gsm8k",
        "--base-model",
        str(tiny_model_dir),
        "--models",
        str(members),
    ]
    results = tmp_path / "bench" / "gsm8k"
    _kill_after_first_piece(tmp_path, [*argv, "--results", str(results)], "members_store")
    log = _rerun_and_compare(tmp_path, argv, results, "response", ["population-student0", "population-student1"])
    assert "gsm8k: 1 generated rows kept from an earlier attempt" in log
    assert "gsm8k: generated 2 rows for 2 member(s) (1 kept from an earlier attempt)" in log
