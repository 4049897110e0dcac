"""CRUXEval-O / -I: rows as verifier tasks, prompts (project and official), parsing, sandboxed
grading of real rows, the bench stage on the tiny model, per-benchmark limits, data checks."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from populora.bench import cruxeval as cx
from populora.config import ParamsError, parse_params
from populora.verifier import grade_rows
from stages import bench as bench_stage
from tests.tiny_model import export_members

REPO = Path(__file__).resolve().parents[1]
BENCH_DATA = Path(os.environ.get("POPULORA_BENCHMARKS") or REPO.parent / "shared" / "benchmarks")
needs_data = pytest.mark.skipif(not (BENCH_DATA / cx.DATA_FILE).is_file(), reason=f"CRUXEval not at {BENCH_DATA}")

ROW = {"id": "sample_x", "code": "def f(a, b):\n    return [a] * b", "input": "'x', 2", "output": "['x', 'x']"}


def test_rows_become_valid_verifier_tasks_and_grade_in_the_sandbox():
    tasks = [cx.task_row(ROW, "code_o"), {**cx.task_row(ROW, "code_i"), "task_id": "sample_x:i"}]
    answers = [
        {"task_id": "sample_x", "answer": "['x','x']"},  # same value, other spelling: correct
        {"task_id": "sample_x", "answer": "['x']"},  # wrong value
        {"task_id": "sample_x:i", "answer": "'x', 2"},  # the gold input
        {"task_id": "sample_x:i", "answer": "b=2, a='x'"},  # another input with the same output: correct
        {"task_id": "sample_x:i", "answer": "'y', 2"},  # executes, wrong output
        {"task_id": "sample_x:i", "answer": "__import__('os').getcwd()"},  # hostile: never executed
    ]
    graded = grade_rows(tasks, answers, timeout_s=2.0, workers=1)
    assert [g["correct"] for g in graded] == [True, False, True, True, False, False]
    assert graded[1]["reason"] == "wrong" and graded[5]["reason"] == "unsafe_answer"


def test_split_scores_the_first_rows_and_keeps_the_rest_for_examples():
    rows = [dict(ROW, id=f"s{i}") for i in range(5)]
    scored, pool = cx.split(rows, 2)
    assert [r["id"] for r in scored] == ["s0", "s1"] and [r["id"] for r in pool] == ["s2", "s3", "s4"]
    assert cx.split(rows, None) == (rows, [])


def test_project_prompt_is_the_students_prompt_with_outside_examples_same_for_every_call():
    rows = [dict(ROW, id=f"s{i}", input=f"'x', {i}") for i in range(6)]
    scored, pool = cx.split(rows, 2)
    tasks, pool_tasks = [cx.task_row(r, "code_o") for r in scored], [cx.task_row(r, "code_o") for r in pool]
    first = cx.project_prompts(tasks, pool_tasks, worked_examples=1)
    assert first == cx.project_prompts(tasks, pool_tasks, worked_examples=1)  # fixed seed: paired across models
    for text, ids in first:
        assert text.startswith("# Task: Deduce the Output") and "# Worked example 1:" in text
        assert len(ids) == 1 and ids[0] in {"s2", "s3", "s4", "s5"}
    # everything scored: examples come from the other scored rows, never the task itself
    every = cx.project_prompts(tasks, [], worked_examples=1)
    assert [ids for _, ids in every] == [["s1"], ["s0"]]
    plans = cx.plans(
        tasks, pool_tasks, prompt="project", mode="scaffolded", worked_examples=1, chat=lambda p: f"<u>{p}</u>"
    )
    assert plans[0][0].prompt.startswith("<u># Task") and plans[0][0].steps[0].prefill == "```output\n"


def test_official_prompts_and_post_processing():
    o_plan, _ = cx.plans(
        [cx.task_row(ROW, "code_o")], [], prompt="official", mode="scaffolded", worked_examples=1, chat=None
    )[0]
    assert o_plan.prompt.endswith(
        "[PYTHON]\ndef f(a, b):\n    return [a] * b\nassert f('x', 2) == ??\n[/PYTHON]\n[ANSWER]\n"
    )
    assert o_plan.steps[0].stops == ("[/ANSWER]",)
    i_prompt = cx.official_prompt(cx.task_row(ROW, "code_i"))
    assert i_prompt.endswith("assert f(??) == ['x', 'x']\n[/PYTHON]\n[ANSWER]\n")
    assert cx.parse_official("assert f('x', 2) == ['x', 'x']\n", "code_o") == ("['x', 'x']", None)
    assert cx.parse_official("['x', 'x'] [/ANSWER] junk", "code_o") == ("['x', 'x']", None)
    assert cx.parse_official("assert f('x', 2) == ['x', 'x']", "code_i") == ("'x', 2", None)
    assert cx.parse_official("f(b=2, a='x') == ['x', 'x']", "code_i") == ("b=2, a='x'", None)
    assert cx.parse_official("I think the answer is 3", "code_i") == (None, "format")
    assert cx.parse_official("", "code_o") == (None, "no_answer_block")
    # the project format goes through the students' parser
    assert cx.extract("```output\n['x']\n", "code_o", prompt="project", mode="scaffolded", truncated=False) == (
        "['x']",
        None,
    )
    assert cx.extract("```output\n['x", "code_o", prompt="project", mode="scaffolded", truncated=True) == (
        None,
        "truncated",
    )


@needs_data
def test_official_file_rows_grade_their_own_gold_answers():
    rows = cx.load_rows(BENCH_DATA)
    assert len(rows) == 800 and rows[0]["id"] == "sample_0"
    sample = rows[:8]
    tasks = [cx.task_row(r, "code_o") for r in sample] + [
        {**cx.task_row(r, "code_i"), "task_id": r["id"] + ":i"} for r in sample
    ]
    answers = [{"task_id": r["id"], "answer": r["output"]} for r in sample]
    answers += [{"task_id": r["id"] + ":i", "answer": r["input"]} for r in sample]
    assert all(g["correct"] for g in grade_rows(tasks, answers, timeout_s=5.0, workers=2))


def _params(tmp_path: Path, **cruxeval) -> Path:
    extra = "".join(f"    {k}: {v}\n" for k, v in cruxeval.items())
    path = tmp_path / "params.yaml"
    path.write_text(
        "model:\n  device: cpu\nverify:\n  workers: 1\n"
        f"bench:\n  benchmarks: [cruxeval_o, cruxeval_i]\n  data_dir: {BENCH_DATA}\n  limit: 1\n"
        f"  limits: {{cruxeval_o: 3, cruxeval_i: 2}}\n  batch_size: 2\n  cruxeval:\n    max_new_tokens: 8\n{extra}"
    )
    return path


@needs_data
@pytest.mark.parametrize("bench,prompt", [("cruxeval_o", "project"), ("cruxeval_i", "official")])
def test_bench_stage_on_the_tiny_model(tmp_path, tiny_model_dir, monkeypatch, bench, prompt):
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    folder = tmp_path / "bench" / "base" / bench
    argv = [
        "--params",
        str(_params(tmp_path, prompt=prompt)),
        "--bench",
        bench,
        "--base-model",
        str(tiny_model_dir),
        "--results",
        str(folder),
        "--log",
        str(tmp_path / "bench.log"),
    ]
    assert bench_stage.main(argv) == 0
    assert sorted(path.name for path in folder.iterdir()) == ["base", "base.json"]
    result = json.loads((folder / "base.json").read_text())
    samples = folder / "base"
    n = 3 if bench == "cruxeval_o" else 2  # bench.limits overrides bench.limit (1)
    assert result["n"] == n and result["limit"] == n and result["prompt"] == prompt and result["max_new_tokens"] == 8
    assert list(result["per_problem"]) == [f"sample_{i}" for i in range(n)]
    assert result["correct"] == sum(result["per_problem"].values())
    diagnostics = result["diagnostics"]  # the format and copying counts of populora.bench.diagnostics
    assert diagnostics["n"] == n and diagnostics["correct"] == result["correct"]
    assert diagnostics["correct"] + diagnostics["wrong"] + diagnostics["no_answer"] == n
    assert result["metrics"]["pass@1"] == pytest.approx(result["correct"] / n)
    assert (
        result["interval"]["method"] == "wilson"
        and result["interval"]["low"] <= result["metrics"]["pass@1"] <= result["interval"]["high"]
    )
    rows = [json.loads(line) for line in (samples / "samples.jsonl").read_text().splitlines()]
    assert [r["task_id"] for r in rows] == list(result["per_problem"])
    assert all(r["reason"] or r["correct"] for r in rows)  # every verdict has a reason or is correct
    assert (
        all(r["examples"] == [] for r in rows) if prompt == "official" else all(len(r["examples"]) == 1 for r in rows)
    )
    # the gold answer's log-likelihood, one per problem, a negative number of nats
    assert list(result["per_problem_gold_logprob"]) == list(result["per_problem"])
    assert all(v < 0 for v in result["per_problem_gold_logprob"].values()) and result["gold_loglik"]["tokens"] > n
    assert result["gold_loglik"]["in_generation"] == n  # scored in each answer's own prefill, no second pass
    # beside the score: CRUXEval-O's copy baseline (sample_2 returns its argument), -I's echo (sample_1 maps its
    # output to itself), graded in the sandbox
    kind, solved = ("copy", {"sample_2"}) if bench == "cruxeval_o" else ("echo", {"sample_1"})
    assert result["baseline"]["kind"] == kind and result["baseline"]["n"] == n
    assert {t for t, v in result["baseline"]["per_problem"].items() if v} == solved


def test_limits_override_limit_and_are_validated():
    bench = parse_params(
        {"bench": {"benchmarks": ["gsm8k", "cruxeval_o"], "data_dir": None, "limit": 2, "limits": {"cruxeval_o": 100}}}
    ).bench
    assert bench.limit_of("cruxeval_o") == 100 and bench.limit_of("gsm8k") == 2
    full = parse_params({"bench": {"data_dir": None, "limit": 2, "limits": {"cruxeval_i": None}}}).bench
    assert full.limit_of("cruxeval_i") is None
    with pytest.raises(ParamsError, match="bench.limits"):
        parse_params({"bench": {"data_dir": None, "limits": {"cruxeval_o": 0}}})
    with pytest.raises(ParamsError, match="bench.limits"):
        parse_params({"bench": {"data_dir": None, "limits": {"cruxevl_o": 5}}})
    with pytest.raises(ParamsError, match="bench.cruxeval.prompt"):
        parse_params({"bench": {"data_dir": None, "cruxeval": {"prompt": "azr"}}})


def test_missing_data_fails_when_params_load_naming_file_and_fix(tmp_path, monkeypatch):
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    (tmp_path / "cruxeval").mkdir()
    with pytest.raises(ParamsError) as error:
        parse_params({"bench": {"benchmarks": ["cruxeval_o"], "data_dir": str(tmp_path)}})
    message = str(error.value)
    assert "bench.data_dir" in message and "cruxeval/cruxeval.jsonl" in message and "Fix:" in message
    assert "POPULORA_BENCHMARKS" in message and "null" in message
    # only the files of the selected benchmarks are needed
    (tmp_path / "cruxeval" / "cruxeval.jsonl").write_text(json.dumps(ROW) + "\n")
    assert parse_params({"bench": {"benchmarks": ["cruxeval_o", "cruxeval_i"], "data_dir": str(tmp_path)}})
    # the environment variable wins, and is named in the message when it is the culprit
    monkeypatch.setenv("POPULORA_BENCHMARKS", str(tmp_path / "elsewhere"))
    with pytest.raises(ParamsError, match="POPULORA_BENCHMARKS=.*elsewhere"):
        parse_params({"bench": {"benchmarks": ["cruxeval_o"], "data_dir": str(tmp_path)}})
    # null (and no environment override): the official downloads, nothing to check
    monkeypatch.delenv("POPULORA_BENCHMARKS")
    assert parse_params({"bench": {"benchmarks": ["cruxeval_o"], "data_dir": None}}).bench.data_dir is None


@needs_data
def test_every_member_in_one_pass_answers_as_when_benchmarked_alone(tmp_path, tiny_model_dir, monkeypatch):
    """Members of an arm share one generation pass (stacked adapters, rows select theirs): each
    member's answers are exactly those it gives benchmarked alone, and they differ between members."""
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    params = _params(tmp_path, prompt="project")
    both = export_members(tmp_path / "both", tiny_model_dir, {"student0": 1, "student1": 2})
    argv = [
        "--params",
        str(params),
        "--arm",
        "population",
        "--bench",
        "cruxeval_o",
        "--base-model",
        str(tiny_model_dir),
        "--log",
        str(tmp_path / "bench.log"),
    ]
    assert bench_stage.main([*argv, "--models", str(both), "--results", str(tmp_path / "together")]) == 0
    completions = {}
    for slot, seed in {"student0": 1, "student1": 2}.items():
        alone = export_members(tmp_path / slot, tiny_model_dir, {slot: seed})
        assert bench_stage.main([*argv, "--models", str(alone), "--results", str(tmp_path / f"alone-{slot}")]) == 0
        model = f"population-{slot}"
        together = json.loads((tmp_path / "together" / f"{model}.json").read_text())
        single = json.loads((tmp_path / f"alone-{slot}" / f"{model}.json").read_text())
        assert together["n"] == single["n"] == 3 and together["member"] == f"population/{slot}@g000"
        assert together["per_problem"] == single["per_problem"] and together["models_in_pass"] == 2
        assert together["data"].startswith("cruxeval/cruxeval.jsonl sha256:")  # no folder: the same on every machine
        assert together["per_problem_gold_logprob"] == pytest.approx(single["per_problem_gold_logprob"], abs=1e-4)

        def read(folder, model=model):
            return [
                json.loads(line)["completion"] for line in (folder / model / "samples.jsonl").read_text().splitlines()
            ]

        assert read(tmp_path / "together") == read(tmp_path / f"alone-{slot}")
        completions[slot] = read(tmp_path / "together")
    assert completions["student0"] != completions["student1"]


def test_an_empty_export_folder_fails_naming_the_fix(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    (tmp_path / "empty").mkdir()
    argv = [
        "--params",
        str(_params(tmp_path, prompt="project")),
        "--arm",
        "population",
        "--bench",
        "cruxeval_o",
        "--base-model",
        str(tiny_model_dir),
        "--models",
        str(tmp_path / "empty"),
        "--results",
        str(tmp_path / "r"),
    ]
    assert bench_stage.main(argv) == 1
    assert not (tmp_path / "r").exists()


@needs_data
def test_only_the_members_of_bench_roles_are_benchmarked(tmp_path, tiny_model_dir, monkeypatch):
    from populora.config import load_params
    from populora.core.topology import benchmarked_models

    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    params = _params(tmp_path, prompt="project")
    params.write_text(params.read_text() + "  roles: [students]\npopulation:\n  teachers: 1\n  students: 1\n")
    models = export_members(tmp_path, tiny_model_dir, {"teacher0": 1, "student0": 2})
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
        str(models),
        "--results",
        str(tmp_path / "r"),
    ]
    assert bench_stage.main(argv) == 0
    assert sorted(p.name for p in (tmp_path / "r").glob("*.json")) == ["population-student0.json"]
    names = {folder: [ref.name for ref in refs] for folder, refs in benchmarked_models(load_params(params)).items()}
    assert names == {"base": ["base"], "population": ["population-student0"], "baseline": ["baseline-solo"]}
    result = json.loads((tmp_path / "r" / "population-student0.json").read_text())
    assert (result["arm"], result["slot"], result["role"]) == ("population", "student0", "student")


@needs_data
def test_the_raw_base_is_scored_beside_the_base_and_reported(tmp_path, tiny_model_dir, monkeypatch):
    from populora.report.markdown import raw_base_line
    from populora.report.metrics import benchmark_metrics

    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    folder = tmp_path / "bench" / "base" / "cruxeval_o"
    params = _params(tmp_path)
    params.write_text(params.read_text() + "warm_start:\n  enabled: true\n")
    argv = [
        "--params",
        str(params),
        "--bench",
        "cruxeval_o",
        "--base-model",
        str(tiny_model_dir),
        "--raw-base",
        str(tiny_model_dir),
        "--results",
        str(folder),
    ]
    assert bench_stage.main(argv) == 0
    assert sorted(path.name for path in folder.parent.iterdir()) == ["cruxeval_o"]  # nothing left aside
    result = json.loads((folder / "base.json").read_text())
    raw = result["raw_base"]
    assert raw["n"] == result["n"] == 3 and raw["per_problem"] == result["per_problem"]  # the same model twice
    assert (folder / "raw_base" / "samples.jsonl").is_file()
    metrics = benchmark_metrics([result])
    assert metrics["bench.cruxeval_o.raw_base"] == result["metrics"]["pass@1"]
    assert metrics["bench.cruxeval_o.diff.base_minus_raw_base.delta"] == 0
    assert "cruxeval_o: raw base" in raw_base_line(metrics)
    # off with the warm start: the base is the raw base, scored once
    params.write_text(params.read_text().replace("enabled: true", "enabled: false"))
    assert bench_stage.main(argv) == 0
    assert "raw_base" not in json.loads((folder / "base.json").read_text())
