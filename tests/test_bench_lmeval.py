"""Math benchmarks through lm-eval: task rendering and the bench stage on the tiny model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from populora.bench import MATH_BENCHMARKS, BenchError
from populora.bench import lmeval_runner as lm
from stages import bench as bench_stage

REPO = Path(__file__).resolve().parents[1]
BENCH_DATA = Path(os.environ.get("POPULORA_BENCHMARKS") or REPO.parent / "shared" / "benchmarks")
needs_data = pytest.mark.skipif(not (BENCH_DATA / "math").is_dir(), reason=f"offline benchmark data not at {BENCH_DATA}")


class _TagLoader(yaml.SafeLoader):
    """Reads lm-eval's `!function` tags as plain strings."""


_TagLoader.add_constructor("!function", lambda loader, node: f"!function {loader.construct_scalar(node)}")


def test_every_math_benchmark_has_a_task_and_a_processor():
    utils = (lm.TASKS_DIR / "utils.py").read_text()
    for benchmark in MATH_BENCHMARKS:
        config = yaml.load((lm.TASKS_DIR / f"{lm.task_name(benchmark)}.yaml").read_text(), Loader=_TagLoader)
        assert config["task"] == lm.task_name(benchmark)
        assert config["process_docs"] == f"!function utils.process_{benchmark}"
        assert f"process_{benchmark} = _processor(\"{benchmark}\")" in utils


def test_render_fills_data_location_and_generation_cap(tmp_path):
    out = lm.render_tasks(tmp_path / "tasks", math_data="/data/math", max_gen_toks=77)
    task = yaml.load((out / "populora_aime24.yaml").read_text(), Loader=_TagLoader)
    assert task["dataset_kwargs"]["data_files"]["test"] == "/data/math/aime24/test.jsonl"
    template = yaml.load((out / "_populora_math.yaml").read_text(), Loader=_TagLoader)
    assert template["generation_kwargs"]["max_gen_toks"] == 77
    assert "<|im_end|>" in template["generation_kwargs"]["until"] and template["generation_kwargs"]["do_sample"] is False
    assert template["num_fewshot"] == 0 and (out / "utils.py").is_file()
    assert "@MATH_DATA@" in (lm.TASKS_DIR / "populora_aime24.yaml").read_text()  # the source stays a template


def test_missing_math_file_names_it(tmp_path):
    with pytest.raises(BenchError, match=r"math/gsm8k/test\.jsonl.*bench\.data_dir"):
        lm.math_data_location("gsm8k", tmp_path)


@needs_data
def test_bench_stage_gsm8k_on_tiny_model_with_adapter(tmp_path, tiny_model_dir, monkeypatch):
    from peft import get_peft_model

    from populora.model import load_base, lora_config

    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    model_dir = tmp_path / "models" / "population-teacher0"
    _, model = load_base(tiny_model_dir, device="cpu")
    get_peft_model(model, lora_config(4, 8.0, 0.0, ["q_proj", "v_proj"])).save_pretrained(model_dir / "adapter")
    (model_dir / "model.json").write_text(json.dumps({"model": "population-teacher0", "adapter": "adapter"}))
    params = tmp_path / "params.yaml"
    params.write_text(f"model:\n  device: cpu\nbench:\n  data_dir: {BENCH_DATA}\n  limit: 2\n  max_new_tokens: 16\n  batch_size: 2\n")
    out, samples = tmp_path / "bench" / "gsm8k.json", tmp_path / "bench" / "gsm8k"
    argv = ["--params", str(params), "--model", "population-teacher0", "--bench", "gsm8k", "--base-model", str(tiny_model_dir),
            "--model-dir", str(model_dir), "--out", str(out), "--samples", str(samples), "--log", str(tmp_path / "bench.log")]
    assert bench_stage.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["benchmark"] == "gsm8k" and result["n"] == 2 and set(result["metrics"]) == {"accuracy"}
    assert 0.0 <= result["metrics"]["accuracy"] <= 1.0
    rows = [json.loads(line) for line in (samples / "samples.jsonl").read_text().splitlines()]
    assert [r["gold"] for r in rows] == ["18", "3"]  # the first two GSM8K test problems, in file order
    assert all(r["prompt"].startswith("<|im_start|>user\n") and r["prompt"].endswith("<|im_start|>assistant\n") for r in rows)
    assert all("Please reason step by step, and put your final answer within \\boxed{}." in r["prompt"] for r in rows)
    harness = json.loads((samples / "harness" / "results.json").read_text())
    assert harness["config"]["model_args"]["peft"] == str(model_dir / "adapter")
    assert harness["results"]["populora_gsm8k"]["accuracy,none"] == result["metrics"]["accuracy"]
    assert (samples / "harness" / "tasks" / "populora_gsm8k.yaml").is_file()
