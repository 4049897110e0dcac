"""Run one benchmark for a list of models: the bare base, or every final member of an arm.

`run_benchmark(settings, models, ...)` (settings: `populora.bench.settings.settings_for`) returns one result per model (see stages/bench.py for the
fields) and writes each model's per-problem samples and harness files under `<out>/<model>/`.
Every benchmark generates for all of its models in one pass with stacked adapters
(`populora.lm.multilora`: each row of a batch runs through its model's adapter, the base-model rows
through none): EvalPlus prompts and scoring for code, lm-eval's HF backend for math (lm-eval runs
once per member, the generation is shared; see `lmeval_runner.evaluate_members`), and CRUXEval and
LiveCodeBench, graded in the verifier's sandbox.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

from populora.bench import BenchError
from populora.bench.settings import BenchSettings
from populora.bench.stats import wilson_interval
from populora.core.io import read_json, write_json, write_jsonl
from populora.core.paths import MODEL_DESCRIPTION
from populora.core.refs import BASE_REF, ModelRef


@dataclass(frozen=True)
class BenchModel:
    """One benchmarked model: the base, or an arm's slot (`ref`) with its exported adapter folder."""

    ref: ModelRef
    adapter: Path | None = None
    member: str | None = None  # the lineage id of the member (None for the base)

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def adapters(self) -> dict[str, Path]:
        return {self.name: self.adapter} if self.adapter is not None else {}


def base_model_entry() -> BenchModel:
    return BenchModel(BASE_REF)


def exported_models(models_dir: Path) -> list[BenchModel]:
    """The members an export folder holds (`<slot>/model.json` + `<slot>/adapter/`), by slot name."""
    folders = sorted(path.parent for path in Path(models_dir).glob(f"*/{MODEL_DESCRIPTION}"))
    if not folders:
        raise BenchError(f"{models_dir} holds no exported member (<slot>/model.json). "
                         "Fix: run the export stage of this arm first.")
    models = []
    for folder in folders:
        described = read_json(folder / MODEL_DESCRIPTION)
        try:
            ref = ModelRef.from_fields(described)
        except (KeyError, ValueError) as error:
            raise BenchError(f"{folder / MODEL_DESCRIPTION}: {error}") from None
        models.append(BenchModel(ref, adapter_of(folder), described.get("member")))
    return models


def adapter_of(model_dir: Path) -> Path:
    """The adapter folder named by an export folder's model.json."""
    description_path = model_dir / MODEL_DESCRIPTION
    if not description_path.is_file():
        raise BenchError(f"{description_path} not found: {model_dir} is not an export folder. "
                         "Fix: run the export stage for this model first.")
    adapter = read_json(description_path).get("adapter")
    if adapter is None:
        raise BenchError(f"{description_path} names no adapter. Fix: re-run the export stage of this arm.")
    folder = model_dir / adapter
    missing = [name for name in ("adapter_config.json", "adapter_model.safetensors") if not (folder / name).is_file()]
    if missing:
        raise BenchError(f"adapter folder {folder} lacks {', '.join(missing)}. "
                         "Fix: re-run the export stage for this model (its checkpoint may be incomplete).")
    return folder


def run_code(settings: BenchSettings, models: list[BenchModel], base_model: Path, out: Path, log) -> dict[str, dict]:
    """EvalPlus (HumanEval+ / MBPP+) of every model, generated in one pass with stacked adapters;
    each model's samples and evalplus's own files under `out/<model>/`."""
    from populora.bench import CODE_BENCHMARKS
    from populora.bench import evalplus_eval as ev
    from populora.bench.codegen import generate_member_solutions

    bench = settings.benchmark
    dataset = CODE_BENCHMARKS[bench]
    data_dir = settings.data_dir
    problems = ev.load_problems(bench, data_dir, settings.limit)
    log.info("%s: %d problems from %s, %d model(s) in one pass", bench, len(problems),
             data_dir or "the official evalplus release", len(models))
    expected = ev.expected_outputs(problems, dataset)
    adapters = {name: path for model in models for name, path in model.adapters.items()}
    tokenizer, lm = settings.load_model(base_model, adapters)
    names = [model.name if model.adapter is not None else None for model in models]
    start = time.perf_counter()
    generated = generate_member_solutions(lm, tokenizer, problems, dataset, names,
                                          max_new_tokens=settings.max_new_tokens,
                                          batch_size=settings.batch_size)
    generation_s = time.perf_counter() - start
    del lm  # free memory before the sandboxed checks
    results = {}
    for model, name in zip(models, names):
        completions = generated[name]
        samples = out / model.name
        solutions = {c.task_id: c.solution for c in completions}
        log.info("%s: scoring %d solutions with evalplus's check_correctness", model.name, len(solutions))
        verdicts = ev.check_solutions(dataset, problems, expected, solutions)
        scores = ev.pass_at_1(verdicts)
        rows = [{**c.__dict__, **{k: v for k, v in verdicts[c.task_id].items() if not k.endswith("_fail_tests")},
                 "passed": verdicts[c.task_id]["plus_status"] == "pass" and verdicts[c.task_id]["base_status"] == "pass"}
                for c in completions]
        write_jsonl(samples / "samples.jsonl", rows)
        write_jsonl(samples / "harness" / "samples.jsonl", [{"task_id": c.task_id, "solution": c.solution} for c in completions])
        write_jsonl(samples / "harness" / "samples.raw.jsonl", [{"task_id": c.task_id, "solution": c.raw} for c in completions])
        harness_samples = samples / "harness" / "samples.jsonl"  # evalplus's results file name follows its samples file
        # written as evalplus writes it (json.dump, inputs may hold inf/nan); `out` is a staging folder
        ev.results_path(harness_samples).write_text(json.dumps(
            ev.eval_results(verdicts, solutions, ev.dataset_hash(bench, data_dir, settings.limit))))
        results[model.name] = {
            "n": len(rows), "per_problem": {row["task_id"]: int(row["passed"]) for row in rows},
            "metrics": {"pass@1": scores["plus_pass@1"], **scores},
            "hit_token_limit": sum(c.hit_token_limit for c in completions), "harness": f"evalplus {version('evalplus')}",
            "generation_s": round(generation_s, 1), "models_in_pass": len(models),
            "data": str(data_dir) if data_dir else "official"}
    return results


def run_math(settings: BenchSettings, models: list[BenchModel], base_model: Path, out: Path, log) -> dict[str, dict]:
    """The lm-eval math task of every model; samples and lm-eval's own files under `out/<model>/`.
    The bare base runs as lm-eval's `hf` model; members share one generation pass (stacked adapters)."""
    from populora.bench import lmeval_runner as lm

    bench = settings.benchmark
    data_dir = settings.data_dir
    limit = settings.limit
    log.info("%s through lm-eval (%s, first %s problems), %d model(s)", bench, data_dir or "official data",
             limit or "all", len(models))
    members = [model for model in models if model.adapter is not None]
    runs, start = {}, time.perf_counter()
    if settings.engine == "vllm":
        # lm-eval's own vllm model, one engine per model, each in a process of its own: an engine's
        # memory (weights, KV cache reservation) is only given back when its process ends
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor


        for model in models:
            with ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool:
                runs[model.name] = pool.submit(
                    lm.evaluate_jsonable, bench, base_model=base_model, adapter=model.adapter, data_dir=data_dir,
                    limit=limit,
                    max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
                    dtype=settings.dtype, device=settings.device,
                    harness_dir=out / model.name / "harness", tasks_dir=settings.tasks_dir,
                    vllm=settings.lmeval_vllm_args()).result()
        members = []
    for model in models:
        if model.adapter is None and model.name not in runs:
            runs[model.name] = lm.evaluate(
                bench, base_model=base_model, adapter=None, data_dir=data_dir, limit=limit,
                max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size,
                dtype=settings.dtype, device=settings.device,
                harness_dir=out / model.name / "harness", tasks_dir=settings.tasks_dir)
    if members:
        tokenizer, multilora = settings.load_model(base_model, {m.name: m.adapter for m in members})
        runs.update(lm.evaluate_members(
            bench, multilora=multilora, tokenizer=tokenizer, members={m.name: out / m.name / "harness" for m in members},
            base_model=base_model, adapters={m.name: m.adapter for m in members}, data_dir=data_dir, limit=limit,
            max_new_tokens=settings.max_new_tokens, batch_size=settings.batch_size, tasks_dir=settings.tasks_dir))
        del multilora
    run_s = time.perf_counter() - start  # the lm-eval runs whole, generation included
    results = {}
    for model in models:
        run, samples = runs[model.name], out / model.name
        rows = lm.sample_rows(run, bench)
        write_jsonl(samples / "samples.jsonl", rows)
        write_jsonl(samples / "harness" / "lm_eval_samples.jsonl", lm.jsonable(run["samples"][lm.task_name(bench)]))
        write_json(samples / "harness" / "results.json", lm.jsonable({k: v for k, v in run.items() if k != "samples"}))
        results[model.name] = {
            "n": len(rows), "per_problem": {str(row["doc_id"]): int(row["correct"]) for row in rows},
            "metrics": {"accuracy": lm.accuracy(run, bench)}, "stderr": {"accuracy": lm.stderr(run, bench)},
            "harness": f"lm_eval {version('lm_eval')}", "run_s": round(run_s, 1),
            "models_in_pass": len(members) if model.adapter is not None else 1,
            "data": str(data_dir) if data_dir else lm.OFFICIAL_MATH_DATA}
    return results


def run_cruxeval(settings: BenchSettings, models: list[BenchModel], base_model: Path, out: Path, log) -> dict[str, dict]:
    """CRUXEval-O/-I of every model in one generation pass (rows select their model's adapter)."""
    from populora.bench import cruxeval as cx
    from populora.bench.diagnostics import answer_diagnostics
    from populora.lm.sampling import GenRow, run_plans
    from populora.selfplay.prompts import chat_wrapper
    from populora.verifier import grade_rows

    bench = settings.benchmark
    task_type, cfg = cx.BENCHMARKS[bench], settings.cruxeval
    data_dir = settings.data_dir
    scored, pool = cx.split(cx.load_rows(data_dir), settings.limit)
    tasks = [cx.task_row(row, task_type) for row in scored]
    pool_tasks = [cx.task_row(row, task_type) for row in pool]
    log.info("%s: %d problems (%s) from %s, %s prompt, %d model(s) in one pass", bench, len(tasks), task_type,
             data_dir or cx.OFFICIAL_URL, cfg.prompt, len(models))
    adapters = {name: path for model in models for name, path in model.adapters.items()}
    tokenizer, lm = settings.load_model(base_model, adapters)
    built = cx.plans(tasks, pool_tasks, prompt=cfg.prompt, mode=settings.solve_mode, worked_examples=cfg.worked_examples,
                     chat=chat_wrapper(tokenizer))
    start = time.perf_counter()
    rows = [GenRow(plan, model.name if model.adapter is not None else None) for model in models for plan, _ in built]
    outputs = run_plans(lm, tokenizer, rows, temperature=0.0, top_p=1.0, max_new_tokens=settings.max_new_tokens,
                        batch_size=settings.batch_size, seed=0, desc=bench)
    generation_s = time.perf_counter() - start
    del lm
    all_tasks = tasks * len(models)
    answers = []
    for task, output in zip(all_tasks, outputs):
        answer, reason = cx.extract(output.completion, task_type, prompt=cfg.prompt, mode=settings.solve_mode,
                                    truncated=output.truncated)
        answers.append({"task_id": task["task_id"], "answer": answer, "parse_reason": reason})
    log.info("grading %d answers in the verifier's sandbox", len(answers))
    graded = grade_rows(all_tasks, answers, settings.verify)
    results = {}
    for index, model in enumerate(models):
        part = slice(index * len(tasks), (index + 1) * len(tasks))
        samples = [{"task_id": t["task_id"], "type": task_type, "program": t["program"], "input": t["inputs"][0],
                    "gold_output": t["outputs"][0], "examples": examples, "completion": o.completion,
                    "truncated": o.truncated, "tokens": o.tokens_generated, "answer": g["answer"],
                    "parse_reason": g["parse_reason"], "correct": bool(g["correct"]), "reason": g["reason"]}
                   for t, (_, examples), o, g in zip(tasks, built, outputs[part], graded[part])]
        write_jsonl(out / model.name / "samples.jsonl", samples)
        correct = sum(row["correct"] for row in samples)
        results[model.name] = {
            "diagnostics": answer_diagnostics(samples), "max_new_tokens": settings.max_new_tokens,
            "n": len(samples), "per_problem": {row["task_id"]: int(row["correct"]) for row in samples},
            "metrics": {"pass@1": correct / len(samples) if samples else 0.0}, "prompt": cfg.prompt,
            "mode": settings.solve_mode if cfg.prompt == "project" else "official",
            "worked_examples": cfg.worked_examples if cfg.prompt == "project" else 2,
            "generation_s": round(generation_s, 1), "models_in_pass": len(models),
            "s_per_problem": round(generation_s / max(1, len(rows)), 2),
            "tokens": sum(row["tokens"] for row in samples), "harness": "populora.verifier",
            "data": str(data_dir) if data_dir else cx.OFFICIAL_URL}
    return results


def run_livecodebench(settings: BenchSettings, models: list[BenchModel], base_model: Path, out: Path, log) -> dict[str, dict]:
    """LiveCodeBench of every model in one greedy generation pass (rows select their model's adapter),
    every test case of every solution run in the verifier's sandbox (populora/bench/livecodebench*.py)."""
    from collections import Counter

    from populora.bench import livecodebench as lcb
    from populora.bench.livecodebench_grading import grade
    from populora.lm.plans import Plan, Step
    from populora.lm.sampling import GenRow, run_plans

    bench = settings.benchmark
    cfg = settings.livecodebench
    problems, source = lcb.load_problems(settings.data_dir, cfg, settings.limit)
    log.info("%s: %d problems of %s (contests %s to %s) from %s, %d model(s) in one pass", bench, len(problems),
             cfg.release, cfg.start_date or "the first", cfg.end_date or "the last", source, len(models))
    adapters = {name: path for model in models for name, path in model.adapters.items()}
    tokenizer, lm = settings.load_model(base_model, adapters)
    plans = [Plan(prompt=lcb.chat_prompt(problem, tokenizer), steps=(Step("", stop=None),)) for problem in problems]
    rows = [GenRow(plan, model.name if model.adapter is not None else None) for model in models for plan in plans]
    start = time.perf_counter()
    outputs = run_plans(lm, tokenizer, rows, temperature=0.0, top_p=1.0, max_new_tokens=settings.max_new_tokens,
                        batch_size=settings.batch_size, seed=0, desc=bench)
    generation_s = time.perf_counter() - start
    del lm
    codes = [lcb.extract_code(output.completion) for output in outputs]
    log.info("running the tests of %d solutions in the sandbox (%g s per test)", len(codes), cfg.timeout_s)
    verdicts = grade(list(zip(problems * len(models), codes)), settings.verify, timeout_s=cfg.timeout_s,
                     memory_mb=cfg.memory_mb, log=log)
    results = {}
    for index, model in enumerate(models):
        part = slice(index * len(problems), (index + 1) * len(problems))
        samples = [{"task_id": p["task_id"], "title": p["title"], "platform": p["platform"], "difficulty": p["difficulty"],
                    "contest_date": p["contest_date"], "functional": bool(p["fn_name"]), "prompt": plan.prompt,
                    "completion": o.completion, "code": code, "tokens": o.tokens_generated, "hit_token_limit": o.truncated,
                    **v} for p, plan, o, code, v in zip(problems, plans, outputs[part], codes[part], verdicts[part])]
        write_jsonl(out / model.name / "samples.jsonl", samples)
        correct = sum(row["passed"] for row in samples)
        by_difficulty = {level: {"n": sum(r["difficulty"] == level for r in samples),
                                 "correct": sum(r["passed"] for r in samples if r["difficulty"] == level)}
                         for level in sorted({r["difficulty"] for r in samples})}
        results[model.name] = {
            "n": len(samples), "per_problem": {row["task_id"]: int(row["passed"]) for row in samples},
            "metrics": {"pass@1": correct / len(samples)}, "by_difficulty": by_difficulty,
            "reasons": dict(Counter(row["reason"] for row in samples if row["reason"])),
            "hit_token_limit": sum(row["hit_token_limit"] for row in samples), "release": cfg.release,
            "start_date": cfg.start_date and cfg.start_date.isoformat(),
            "end_date": cfg.end_date and cfg.end_date.isoformat(), "timeout_s": cfg.timeout_s,
            "harness": "populora.bench.livecodebench_grading (lcb_runner's judging, populora.sandbox)",
            "generation_s": round(generation_s, 1), "models_in_pass": len(models), "data": source}
    return results


def with_uncertainty(result: dict, bench: str) -> dict:
    """Add `correct` (from the per-problem verdicts) and the 95% Wilson interval of the primary score."""
    from populora.bench import primary_metric

    correct = sum(result["per_problem"].values())
    n = result["n"]
    score = result["metrics"][primary_metric(bench)]
    if n and abs(correct / n - score) > 1e-9:
        raise BenchError(f"{bench}: {correct}/{n} problems correct but the harness reports {score}. "
                         "Fix: report this as a bug (per-problem verdicts and the score disagree).")
    low, high = wilson_interval(correct, n)
    return {**result, "correct": correct, "interval": {"method": "wilson", "level": 0.95, "low": low, "high": high}}


RUNNERS = {"evalplus": run_code, "lm_eval": run_math, "cruxeval": run_cruxeval, "livecodebench": run_livecodebench}


def run_benchmark(settings: BenchSettings, models: list[BenchModel], base_model: Path, out: Path, log) -> dict[str, dict]:
    """Every model's result on the benchmark (with `correct`, its Wilson interval and the model's ref
    fields); samples under `out/<model>/`."""
    results = RUNNERS[settings.runner](settings, models, base_model, out, log)
    return {model.name: {**with_uncertainty(results[model.name], settings.benchmark), **model.ref.fields(),
                         "member": model.member}
            for model in models}
