"""bench.together: several benchmarks in one job (stages/bench_together.py), the model loaded once.

    python -m pytest -m "" -n 0 tests/test_bench_together.py -q

On the tiny model, the together job of two members over CRUXEval-O, HumanEval+ and GSM8K (one benchmark of
each family) writes what three jobs of their own write (the same verdicts, answers and gold log-likelihoods)
and loads the stacked model once. With a stand-in for one benchmark's run (no model): a job that fails part
way keeps its finished benchmarks and its rerun runs only the others, a change of params runs them again;
a benchmark of the group given a job of its own (DVC's matrix runs every one) writes a note and loads nothing.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from populora.bench import settings as settings_module
from populora.core.refs import BASE_REF, ModelRef
from populora.report.metrics import read_results
from stages import bench, bench_together
from tests.tiny_model import export_members

REPO = Path(__file__).resolve().parents[1]
BENCH_DATA = Path(os.environ.get("POPULORA_BENCHMARKS") or REPO.parent / "shared" / "benchmarks")
needs_data = pytest.mark.skipif(
    not (BENCH_DATA / "cruxeval" / "cruxeval.jsonl").is_file(), reason=f"benchmark data not at {BENCH_DATA}"
)
GROUP = ["cruxeval_o", "humaneval_plus", "gsm8k"]


def _params(tmp_path: Path, together: list[str], extra: str = "") -> Path:
    path = tmp_path / f"params-{len(together)}{extra and '-x'}.yaml"
    path.write_text(
        f"model:\n  device: cpu\nverify:\n  workers: 1\nbench:\n  data_dir: {BENCH_DATA}\n"
        f"  benchmarks: [{', '.join(GROUP)}]\n  together: [{', '.join(together)}]\n  limit: 1\n"
        f"  limits: {{cruxeval_o: 2}}\n  max_new_tokens: 16\n  cruxeval:\n    max_new_tokens: 16\n{extra}"
    )
    return path


@needs_data
@pytest.mark.slow  # three benchmarks twice on the tiny model (~1 min)
def test_the_together_job_writes_what_jobs_of_their_own_write(tmp_path, tiny_model_dir, monkeypatch):
    from populora.lm import engines

    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    members = export_members(tmp_path / "models", tiny_model_dir, {"student0": 1, "student1": 2})
    loads = []
    load = engines.HfSampler.load
    monkeypatch.setattr(engines.HfSampler, "load", lambda self, *a, **k: loads.append(a) or load(self, *a, **k))
    settings_module._LOADED.clear()
    common = ["--arm", "population", "--base-model", str(tiny_model_dir), "--models", str(members)]
    together = tmp_path / "bench" / "population" / "together"
    assert (
        bench_together.main(
            [
                "--params",
                str(_params(tmp_path, GROUP)),
                *common,
                "--results",
                str(together),
                "--log",
                str(tmp_path / "together.log"),
            ]
        )
        == 0
    )
    assert len(loads) == 1  # the stacked members, once for the three benchmarks
    assert sorted(p.name for p in together.iterdir()) == sorted(GROUP)
    assert not Path(f"{together}.partial").exists()
    settings_module._LOADED.clear()
    for name in GROUP:  # each in a job of its own (bench.together: [])
        assert (
            bench.main(
                [
                    "--params",
                    str(_params(tmp_path, [])),
                    *common,
                    "--bench",
                    name,
                    "--results",
                    str(tmp_path / "own" / name),
                    "--log",
                    str(tmp_path / f"{name}.log"),
                ]
            )
            == 0
        )
    for name in GROUP:
        for model in ("population-student0", "population-student1"):
            ours, own = (
                json.loads((folder / name / f"{model}.json").read_text()) for folder in (together, tmp_path / "own")
            )
            for field in ("per_problem", "n", "correct", "metrics", "per_problem_gold_logprob", "arm", "slot", "role"):
                assert ours.get(field) == own.get(field), (name, model, field)
            rows = [(folder / name / model / "samples.jsonl").read_text() for folder in (together, tmp_path / "own")]
            assert rows[0] == rows[1], (name, model)
    # the summary's reader finds them under together/
    results = read_results(
        tmp_path / "bench", {"population": [ModelRef("population", "student0", "student")]}, GROUP, together=GROUP
    )
    assert [r["benchmark"] for r in results] == GROUP


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    """`run_one` without a model: records what ran, fails where told; the base model folder is never read."""
    ran, failing = [], set()

    def run_one(settings, models, base_model, results, log):
        ran.append(settings.benchmark)
        if settings.benchmark in failing:
            return 1
        results.mkdir(parents=True, exist_ok=True)  # replace_dir replaces an old one
        (results / "base.json").write_text(
            json.dumps({"benchmark": settings.benchmark, "max": settings.max_new_tokens})
        )
        return 0

    monkeypatch.setattr(bench_together, "run_one", run_one)
    base = tmp_path / "base_model"
    base.mkdir()
    (base / "config.json").write_text("{}")
    return ran, failing, base


@needs_data
def test_a_failed_together_job_keeps_its_finished_benchmarks(tmp_path, stand_in):
    ran, failing, base = stand_in
    out = tmp_path / "bench" / "base" / "together"
    argv = ["--base-model", str(base), "--results", str(out), "--log", str(tmp_path / "log")]
    params = ["--params", str(_params(tmp_path, GROUP))]
    failing.add("gsm8k")
    assert bench_together.main([*params, *argv]) == 1
    assert ran == GROUP and not out.exists()
    failing.clear()
    assert bench_together.main([*params, *argv]) == 0
    assert ran[3:] == ["gsm8k"]  # the two finished ones taken back
    assert "humaneval_plus: kept from an earlier attempt" in (tmp_path / "log").read_text()
    assert sorted(p.name for p in out.iterdir()) == sorted(GROUP) and not Path(f"{out}.partial").exists()
    # other settings (the batch size, in every benchmark's key): a finished benchmark is not taken back
    failing.add("gsm8k")
    assert bench_together.main([*params, *argv]) == 1
    changed = ["--params", str(_params(tmp_path, GROUP, extra="  batch_size: 3\n"))]
    failing.clear()
    assert bench_together.main([*changed, *argv]) == 0
    assert ran[4:] == [*GROUP, *GROUP]


@needs_data
def test_a_grouped_benchmarks_own_job_writes_a_note_and_loads_nothing(tmp_path, stand_in, monkeypatch):
    ran, _, base = stand_in
    monkeypatch.setattr(bench, "run_one", lambda *a: pytest.fail("a grouped benchmark ran in a job of its own"))
    own = tmp_path / "gsm8k"
    assert (
        bench.main(
            [
                "--params",
                str(_params(tmp_path, GROUP)),
                "--bench",
                "gsm8k",
                "--base-model",
                str(base),
                "--results",
                str(own),
            ]
        )
        == 0
    )
    assert [p.name for p in own.iterdir()] == [bench.TOGETHER_NOTE]
    # an empty group: the together job (DVC runs it anyway) writes a note
    empty = tmp_path / "together"
    assert (
        bench_together.main(
            ["--params", str(_params(tmp_path, [])), "--base-model", str(base), "--results", str(empty)]
        )
        == 0
    )
    assert [p.name for p in empty.iterdir()] == [bench.TOGETHER_NOTE] and ran == []


def test_read_results_looks_under_together_for_the_group(tmp_path):
    for folder in ("base/together/gsm8k", "base/cruxeval_o"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "base.json").write_text(json.dumps({"benchmark": folder.rsplit("/", 1)[1]}))
    results = read_results(tmp_path, {"base": [BASE_REF]}, ["gsm8k", "cruxeval_o"], together=["gsm8k"])
    assert [r["benchmark"] for r in results] == ["gsm8k", "cruxeval_o"]
