"""Math benchmarks through lm-eval: task rendering and the bench stage on the tiny model."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from populora.bench import MATH_BENCHMARKS, BenchError
from populora.bench import lmeval as lm
from populora.core.refs import TEACHER, ModelRef
from stages import bench as bench_stage

REPO = Path(__file__).resolve().parents[1]
BENCH_DATA = Path(os.environ.get("POPULORA_BENCHMARKS") or REPO.parent / "shared" / "benchmarks")
needs_data = pytest.mark.skipif(
    not (BENCH_DATA / "math").is_dir(), reason=f"offline benchmark data not at {BENCH_DATA}"
)


class _TagLoader(yaml.SafeLoader):
    """Reads lm-eval's `!function` tags as plain strings."""


_TagLoader.add_constructor("!function", lambda loader, node: f"!function {loader.construct_scalar(node)}")


def test_every_math_benchmark_has_a_task_and_a_processor():
    utils = (lm.TASKS_DIR / "utils.py").read_text()
    for benchmark in MATH_BENCHMARKS:
        config = yaml.load((lm.TASKS_DIR / f"{lm.task_name(benchmark)}.yaml").read_text(), Loader=_TagLoader)
        assert config["task"] == lm.task_name(benchmark)
        assert config["process_docs"] == f"!function utils.process_{benchmark}"
        assert f'process_{benchmark} = _processor("{benchmark}")' in utils


def test_task_files_are_runnable_as_shipped():
    """No placeholders: the data folder comes through lm-eval's task metadata (custom_dataset)."""
    for path in lm.TASKS_DIR.glob("*.yaml"):
        assert "@MATH_DATA@" not in path.read_text()
    for benchmark in MATH_BENCHMARKS:
        config = yaml.load((lm.TASKS_DIR / f"{lm.task_name(benchmark)}.yaml").read_text(), Loader=_TagLoader)
        assert config["custom_dataset"] == f"!function utils.load_{benchmark}" and "dataset_kwargs" not in config
    template = yaml.load((lm.TASKS_DIR / "_populora_math.yaml").read_text(), Loader=_TagLoader)
    assert (
        "<|im_end|>" in template["generation_kwargs"]["until"] and template["generation_kwargs"]["do_sample"] is False
    )
    assert template["num_fewshot"] == 0


def test_data_location_metadata_then_environment_then_default(tmp_path, monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location("populora_task_utils", lm.TASKS_DIR / "utils.py")
    utils = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(utils)
    (tmp_path / "a" / "math" / "aime24").mkdir(parents=True)
    (tmp_path / "a" / "math" / "aime24" / "test.jsonl").write_text("{}\n")
    monkeypatch.setenv("POPULORA_BENCHMARKS", str(tmp_path / "b"))
    assert utils.data_location("aime24", str(tmp_path / "a")) == str(tmp_path / "a" / "math" / "aime24" / "test.jsonl")
    with pytest.raises(FileNotFoundError, match="--metadata"):
        utils.data_location("aime24")  # the environment variable names a folder without the file
    monkeypatch.setenv("POPULORA_BENCHMARKS", str(tmp_path / "a"))
    assert utils.data_location("aime24").startswith(str(tmp_path / "a"))
    assert utils.data_location("aime24", "official") == f"{lm.OFFICIAL_MATH_DATA}/aime24/test.jsonl"
    assert lm.task_metadata("aime24", None) == {"data_dir": "official"}
    assert lm.task_metadata("aime24", tmp_path / "a") == {"data_dir": str((tmp_path / "a").resolve())}


def test_missing_math_file_names_it(tmp_path):
    with pytest.raises(BenchError, match=r"math/gsm8k/test\.jsonl.*bench\.data_dir"):
        lm.task_metadata("gsm8k", tmp_path)


@needs_data
@pytest.mark.slow  # subprocesses / whole harness runs: CI's full lane, not the fast one
def test_lm_eval_cli_runs_the_shipped_tasks(tmp_path, tiny_model_dir):
    """`lm_eval --include_path workflow/lm_eval_tasks` as a user would type it, data through --metadata."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_DATASETS_OFFLINE": "1"}
    env.pop("POPULORA_BENCHMARKS", None)
    command = [
        str(Path(sys.executable).parent / "lm_eval"),
        "run",
        "--model",
        "hf",
        "--model_args",
        f"pretrained={tiny_model_dir}",
        "--include_path",
        str(lm.TASKS_DIR),
        "--tasks",
        "populora_amc23",
        "--limit",
        "1",
        "--gen_kwargs",
        "max_gen_toks=4",
        "--device",
        "cpu",
        "--metadata",
        json.dumps({"data_dir": str(BENCH_DATA)}),
        "--output_path",
        str(tmp_path / "out"),
    ]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "populora_amc23" in done.stdout and "accuracy" in done.stdout


@needs_data
def test_bench_stage_gsm8k_on_tiny_model_with_adapter(tmp_path, tiny_model_dir, monkeypatch):
    from peft import get_peft_model

    from populora.lm.model import load_base, lora_config

    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    model_dir = tmp_path / "models" / "population" / "teacher0"
    _, model = load_base(tiny_model_dir, device="cpu")
    get_peft_model(model, lora_config(4, 8.0, 0.0, ["q_proj", "v_proj"])).save_pretrained(model_dir / "adapter")
    (model_dir / "model.json").write_text(
        json.dumps({**ModelRef("population", "teacher0", TEACHER).fields(), "adapter": "adapter"})
    )
    params = tmp_path / "params.yaml"
    params.write_text(
        f"model:\n  device: cpu\nbench:\n  data_dir: {BENCH_DATA}\n  limit: 2\n  max_new_tokens: 16\n  batch_size: 2\n"
        "  together: []\n  roles: [students, teachers]\n"
    )  # a job of its own, every member
    folder = tmp_path / "bench" / "population" / "gsm8k"
    out, samples = folder / "population-teacher0.json", folder / "population-teacher0"
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
        str(model_dir.parent),
        "--results",
        str(folder),
        "--log",
        str(tmp_path / "bench.log"),
    ]
    assert bench_stage.main(argv) == 0
    result = json.loads(out.read_text())
    assert result["benchmark"] == "gsm8k" and result["n"] == 2 and set(result["metrics"]) == {"accuracy"}
    assert 0.0 <= result["metrics"]["accuracy"] <= 1.0
    rows = [json.loads(line) for line in (samples / "samples.jsonl").read_text().splitlines()]
    assert [r["gold"] for r in rows] == ["18", "3"]  # the first two GSM8K test problems, in file order
    assert all(
        r["prompt"].startswith("<|im_start|>user\n") and r["prompt"].endswith("<|im_start|>assistant\n") for r in rows
    )
    assert all("Please reason step by step, and put your final answer within \\boxed{}." in r["prompt"] for r in rows)
    harness = json.loads((samples / "harness" / "results.json").read_text())
    assert harness["config"]["model_args"]["peft"] == str(model_dir / "adapter")
    assert harness["results"]["populora_gsm8k"]["accuracy,none"] == result["metrics"]["accuracy"]
    assert (samples / "harness" / "tasks" / "populora_gsm8k.yaml").is_file()
    ran = json.loads((samples / "harness" / "tasks" / "lm_eval_args.json").read_text())
    assert ran["metadata"] == {"data_dir": str(BENCH_DATA.resolve())} and ran["gen_kwargs"] == {"max_gen_toks": 16}
    assert result["correct"] == sum(result["per_problem"].values()) and set(result["per_problem"]) == {"0", "1"}
    assert "stderr" in result and result["interval"]["method"] == "wilson"
