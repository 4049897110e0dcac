"""HumanEval+ / MBPP+ through evalplus: prompt strings, scorer on canonical solutions, the stage
on the tiny model, and clear failures for a missing data file or an adapter that does not load."""

from __future__ import annotations

import inspect
import json
import os
from pathlib import Path

import pytest

from populora.bench import BenchError
from populora.bench import evalplus as ev
from populora.bench.evalplus import INSTRUCTION_PREFIX, RESPONSE_PREFIX, build_prompt, cut_at_stops, stop_strings
from stages import bench as bench_stage

REPO = Path(__file__).resolve().parents[1]
BENCH_DATA = Path(os.environ.get("POPULORA_BENCHMARKS") or REPO.parent / "shared" / "benchmarks")
needs_data = pytest.mark.skipif(
    not (BENCH_DATA / "evalplus").is_dir(), reason=f"offline benchmark data not at {BENCH_DATA}"
)


def write_params(path: Path, data_dir: Path | str, limit: int = 2) -> Path:
    path.write_text(
        "model:\n  device: cpu\n"
        f"bench:\n  data_dir: {data_dir}\n  limit: {limit}\n  max_new_tokens: 16\n  batch_size: 2\n"
        "  together: []\n  roles: [students, teachers]\n"  # a job of its own, every member
    )
    return path


def export_folder(path: Path, model: str, adapter: str | None = "adapter") -> Path:
    """One member's folder of an arm's export (`<models>/<slot>/model.json`) of population-<slot>."""
    from populora.core.refs import STUDENT, TEACHER, ModelRef

    arm, slot = model.split("-", 1)
    ref = ModelRef(arm, slot, STUDENT if slot.startswith(STUDENT) else TEACHER)
    path.mkdir(parents=True, exist_ok=True)
    (path / "model.json").write_text(json.dumps({**ref.fields(), "adapter": adapter}))
    return path


def test_prompt_strings_match_installed_evalplus():
    from evalplus.codegen import run_codegen

    source = inspect.getsource(run_codegen)
    assert f'"{INSTRUCTION_PREFIX}"' in source and f'"{RESPONSE_PREFIX}"' in source


def test_prompt_prefills_the_code_block(tiny_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    prompt = build_prompt("def f(x):\n    '''Return x.'''\n", tokenizer)
    assert prompt.startswith("<|im_start|>user\n" + INSTRUCTION_PREFIX + "\n```\ndef f(x):")
    assert prompt.endswith("<|im_start|>assistant\n" + RESPONSE_PREFIX + "\n```python\n")
    assert "\n```\n" in stop_strings(tokenizer, "humaneval")
    assert (
        cut_at_stops("def f():\n\treturn 1\n```\nmore", stop_strings(tokenizer, "humaneval"))
        == "def f():\n    return 1"
    )


@needs_data
def test_scorer_passes_canonical_solutions_and_fails_wrong_ones():
    problems = ev.load_problems("humaneval_plus", BENCH_DATA, 2)
    assert list(problems) == ["HumanEval/0", "HumanEval/1"]  # the first two, in file order
    expected = ev.expected_outputs(problems, "humaneval")
    canonical = {t: p["prompt"] + p["canonical_solution"] for t, p in problems.items()}
    wrong = dict(canonical, **{"HumanEval/1": problems["HumanEval/1"]["prompt"] + "    return []\n"})
    verdicts = ev.check_solutions("humaneval", problems, expected, canonical)
    assert ev.pass_at_1(verdicts) == {"base_pass@1": 1.0, "plus_pass@1": 1.0}
    verdicts = ev.check_solutions("humaneval", problems, expected, wrong)
    assert verdicts["HumanEval/0"]["plus_status"] == "pass" and verdicts["HumanEval/1"]["base_status"] == "fail"
    assert ev.pass_at_1(verdicts) == {"base_pass@1": 0.5, "plus_pass@1": 0.5}
    # evalplus's fast_check records the first failing input; a passing task has none
    assert verdicts["HumanEval/0"]["base_fail_tests"] == [] and len(verdicts["HumanEval/1"]["base_fail_tests"]) == 1
    assert verdicts["HumanEval/1"]["base_fail_tests"][0] in problems["HumanEval/1"]["base_input"]


@needs_data
def test_scorer_on_mbpp_canonical_solutions():
    problems = ev.load_problems("mbpp_plus", BENCH_DATA, 2)
    expected = ev.expected_outputs(problems, "mbpp")
    verdicts = ev.check_solutions("mbpp", problems, expected, {t: p["canonical_solution"] for t, p in problems.items()})
    assert ev.pass_at_1(verdicts)["plus_pass@1"] == 1.0


@needs_data
def test_bench_stage_humaneval_on_tiny_model(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    params = write_params(tmp_path / "params.yaml", BENCH_DATA)
    folder = tmp_path / "bench" / "base" / "humaneval_plus"
    out, samples = folder / "base.json", folder / "base"
    argv = [
        "--params",
        str(params),
        "--bench",
        "humaneval_plus",
        "--base-model",
        str(tiny_model_dir),
        "--results",
        str(folder),
    ]
    assert bench_stage.main(argv) == 0
    result = json.loads(out.read_text())
    assert (
        result["model"] == "base"
        and result["benchmark"] == "humaneval_plus"
        and result["n"] == 2
        and result["limit"] == 2
    )
    assert set(result["metrics"]) == {"pass@1", "base_pass@1", "plus_pass@1"}
    assert 0.0 <= result["metrics"]["pass@1"] <= result["metrics"]["base_pass@1"] <= 1.0 and result["wall_s"] > 0
    rows = [json.loads(line) for line in (samples / "samples.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == ["HumanEval/0", "HumanEval/1"]
    assert all(r["prompt"].endswith("```python\n") and r["base_status"] in ("pass", "fail", "timeout") for r in rows)
    # evalplus's own file name and shape: `evalplus.evaluate --samples harness/samples.jsonl` reads it back
    from evalplus.evaluate import compatible_eval_result

    written = json.loads((samples / "harness" / "samples_eval_results.json").read_text())
    assert list(written) == ["date", "hash", "eval"] and len(written["hash"]) == 32
    assert written["hash"] == ev.dataset_hash("humaneval_plus", BENCH_DATA, 2)
    assert compatible_eval_result(written)["eval"].keys() == {"HumanEval/0", "HumanEval/1"}
    for entries in written["eval"].values():
        assert [set(e) for e in entries] == [
            {"task_id", "solution", "base_status", "plus_status", "base_fail_tests", "plus_fail_tests"}
        ]
        if entries[0]["base_status"] == "pass":
            assert entries[0]["base_fail_tests"] == []
    assert not (samples / "harness" / "eval_results.json").exists()


def test_missing_data_folder_fails_at_params_load_and_keeps_old_results(tmp_path, tiny_model_dir, monkeypatch):
    """A missing data folder fails when params load (before any stage works), naming the file and the fix."""
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    params = write_params(tmp_path / "params.yaml", tmp_path / "no-such-folder")
    folder = tmp_path / "results"
    out, samples = folder / "base.json", folder / "base"
    samples.mkdir(parents=True)
    out.write_text('{"old": true}')
    (samples / "samples.jsonl").write_text("old\n")
    argv = [
        "--params",
        str(params),
        "--bench",
        "mbpp_plus",
        "--base-model",
        str(tiny_model_dir),
        "--results",
        str(folder),
        "--log",
        str(tmp_path / "logs" / "bench.log"),
    ]
    with pytest.raises(SystemExit) as exit_info:
        bench_stage.main(argv)
    assert exit_info.value.code == 2
    message = (tmp_path / "logs" / "bench.log").read_text()
    assert "bench.data_dir" in message and "MbppPlus-v0.2.0.jsonl.gz" in message and "POPULORA_BENCHMARKS" in message
    assert "Fix:" in message
    assert out.read_text() == '{"old": true}' and (samples / "samples.jsonl").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no staging folder left


def test_missing_data_file_error_names_the_file(tmp_path):
    with pytest.raises(BenchError, match="HumanEvalPlus-v0.1.10.jsonl.gz"):
        ev.load_problems("humaneval_plus", tmp_path, 2)


@needs_data
def test_adapter_that_does_not_load_fails_clearly(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    params = write_params(tmp_path / "params.yaml", BENCH_DATA)
    model_dir = export_folder(tmp_path / "models" / "teacher0", "population-teacher0")
    (model_dir / "adapter").mkdir()
    (model_dir / "adapter" / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4}))
    (model_dir / "adapter" / "adapter_model.safetensors").write_bytes(b"not a safetensors file")
    argv = [
        "--params",
        str(params),
        "--arm",
        "population",
        "--bench",
        "humaneval_plus",
        "--base-model",
        str(tiny_model_dir),
        "--models",
        str(tmp_path / "models"),
        "--results",
        str(tmp_path / "results"),
        "--log",
        str(tmp_path / "bench.log"),
    ]
    assert bench_stage.main(argv) == 1
    message = (tmp_path / "bench.log").read_text()
    assert "population-teacher0 did not load" in message and str(model_dir / "adapter") in message
    assert "export" in message and not (tmp_path / "results").exists()


def test_export_folder_without_adapter_files_fails_clearly(tmp_path):
    from populora.bench.models import adapter_of

    model_dir = export_folder(tmp_path / "m", "population-student0", "adapter")
    with pytest.raises(BenchError, match="adapter_model.safetensors.*re-run the export stage"):
        adapter_of(model_dir)
