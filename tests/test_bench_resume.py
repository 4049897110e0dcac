"""A bench job on the vllm engine resumes: models an earlier attempt finished are taken back, not rerun.

    python -m pytest tests/test_bench_resume.py -q

stages.bench.run_resumable with a stand-in `run_benchmark` (no model): the second model fails on the
first attempt; the retry runs only that one and the third; a change of params runs everything again.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from populora.bench import BenchError
from populora.bench.models import BenchModel
from populora.bench.settings import settings_for
from populora.config import parse_params
from populora.core.refs import ModelRef
from stages import bench

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

    def run_benchmark(settings, chosen, base_model, out, log):
        (model,) = chosen
        ran.append(model.name)
        if model.name in failing:
            raise BenchError("out of time")
        (out / model.name).mkdir()
        (out / model.name / "samples.jsonl").write_text(model.name)
        return {model.name: {"correct": 1, "n": 2}}

    monkeypatch.setattr(bench, "run_benchmark", run_benchmark)
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    return tmp_path, base, models, ran, failing, raw


def _run(tmp_path, base, models, raw, attempt: int):
    out = tmp_path / f"staging{attempt}"
    out.mkdir()
    settings = settings_for(parse_params(raw), "gsm8k")  # the key is the benchmark's resolved settings
    return out, bench.run_resumable(settings, models, base, out, tmp_path / "gsm8k", Log())


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
