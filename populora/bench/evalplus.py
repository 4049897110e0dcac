"""HumanEval+ / MBPP+, the `evalplus` runner: problems, prompts, generation and scoring, as
evalplus 0.3.1 does them.

    results = run(settings, models, base_model, out, log)     # every model in one generation pass

Generation runs the prompts of `evalplus.codegen` in batches through `model.generate` (left
padding, greedy), every model's rows in one pass (stacked adapters), in pieces of problems kept
for a rerun (`populora.bench.partial`), with progress lines (`populora.core.progress`). What is
reused from evalplus, so scores stay comparable with `evalplus.codegen --greedy`:

* the instruct prompt: `make_raw_chat_prompt` with evalplus's instruction and response prefixes
  (the strings live inside `evalplus.codegen.run_codegen`; tests/test_bench_evalplus.py checks
  they still match the installed source), so the chat template is applied and the assistant turn
  is prefilled with "Below is a Python script ...:\\n```python\\n";
* the stop strings: `evalplus.provider.utility.EOS` plus "\\n```\\n" for chat models (plus
  evalplus's direct-completion extras for a tokenizer without a chat template);
* the sanitizer: `evalplus.sanitize.sanitize(solution, entrypoint)`.

Loading: with an offline data folder, the first N rows of `HumanEvalPlus-v0.1.10.jsonl.gz` /
`MbppPlus-v0.2.0.jsonl.gz` are decompressed into a temporary override file holding exactly that
subset, and evalplus's own loader (`get_human_eval_plus` / `get_mbpp_plus`, which also
deserialises MBPP+'s tuple/set inputs) reads it. evalplus reads `HUMANEVAL_OVERRIDE_PATH` /
`MBPP_OVERRIDE_PATH` into module globals at import time, so the override is set on those globals
(and restored afterwards). Without a data folder evalplus downloads the official release.

Scoring mirrors `evalplus.evaluate.evaluate` without its side effects (a results file that is
silently reused, a pickle cache of expected outputs in ~/.cache, a 20 s watchdog thread):

1. expected outputs and reference times of the selected problems only, from their canonical
   solutions with `evalplus.gen.util.trusted_exec` (as `get_groundtruth` does);
2. every solution through `evalplus.evaluate.check_correctness` (base and plus tests,
   `fast_check` as evaluate's default), in one *spawned* worker process: evalplus's sandbox
   forks and caps the address space at 4 GiB, which a fork of a process holding torch and a
   model (or a CUDA context) could exceed (torch is imported lazily, so the worker stays small);
3. pass@1 with `evalplus.eval.estimate_pass_at_k`; "plus" passes only when base and plus tests pass.
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import logging
import multiprocessing
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import datetime
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from populora.bench import CODE_BENCHMARKS, BenchError, data_file, data_source, relative_data_file
from populora.bench.partial import Partial, piece_size
from populora.core.io import write_jsonl
from populora.core.progress import Progress

if TYPE_CHECKING:
    from populora.bench.models import BenchModel
    from populora.bench.settings import BenchSettings

log = logging.getLogger(__name__)

# AZR's evaluation flags (`--min-time-limit 10 --gt-time-limit-factor 8`; evalplus defaults are
# 1 s and 4x): generous limits keep a slow shared CPU from turning correct solutions into timeouts.
MIN_TIME_LIMIT = 10.0
GT_TIME_LIMIT_FACTOR = 8.0

_OVERRIDES = {
    "humaneval": ("evalplus.data.humaneval", "HUMANEVAL_OVERRIDE_PATH"),
    "mbpp": ("evalplus.data.mbpp", "MBPP_OVERRIDE_PATH"),
}


@contextmanager
def _override(dataset: str, path: Path):
    import importlib

    module_name, attribute = _OVERRIDES[dataset]
    module = importlib.import_module(module_name)
    previous = getattr(module, attribute)
    setattr(module, attribute, str(path))
    try:
        yield
    finally:
        setattr(module, attribute, previous)


def _evalplus_loader(dataset: str):
    from evalplus.data import get_human_eval_plus, get_mbpp_plus

    return get_human_eval_plus if dataset == "humaneval" else get_mbpp_plus


def first_rows(path: Path, limit: int | None) -> list[dict]:
    """The first `limit` JSON lines of a (gzipped) JSONL file, in file order."""
    rows: list[dict] = []
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        for line in handle:
            if limit is not None and len(rows) >= limit:
                break
            if line.strip():
                rows.append(json.loads(line))
    return rows


def subset_text(rows: list[dict]) -> str:
    """The override file evalplus reads for a subset (one JSON row per line)."""
    return "".join(json.dumps(row) + "\n" for row in rows)


def dataset_hash(bench: str, data_dir: Path | None, limit: int | None) -> str:
    """What evalplus records as `hash` in its results: the md5 of the problem file it read (here the
    subset override file; without a data folder, evalplus's own hash of the official release)."""
    if data_dir is None:
        from evalplus.data import get_human_eval_plus_hash, get_mbpp_plus_hash

        return (get_human_eval_plus_hash if CODE_BENCHMARKS[bench] == "humaneval" else get_mbpp_plus_hash)()
    return hashlib.md5(subset_text(first_rows(data_file(data_dir, bench), limit)).encode("utf-8")).hexdigest()


def results_path(samples_file: Path) -> Path:
    """Where `evalplus.evaluate --samples X.jsonl` writes its results: `X_eval_results.json`."""
    return Path(str(samples_file).removesuffix(".jsonl") + "_eval_results.json")


def load_problems(bench: str, data_dir: Path | None, limit: int | None) -> dict[str, dict]:
    """The first `limit` problems of a code benchmark (all when None), as evalplus loads them."""
    dataset = CODE_BENCHMARKS[bench]
    loader = _evalplus_loader(dataset)
    try:
        if data_dir is None:  # the official release, downloaded and cached by evalplus
            problems = loader()
            return dict(list(problems.items())[:limit] if limit is not None else problems.items())
        rows = first_rows(data_file(data_dir, bench), limit)
        with tempfile.TemporaryDirectory(prefix=f"populora-{dataset}-") as tmp:
            subset = Path(tmp) / f"{dataset}_subset.jsonl"
            subset.write_text(subset_text(rows), encoding="utf-8")
            with _override(dataset, subset):
                return loader()
    except (AssertionError, KeyError, json.JSONDecodeError, OSError) as error:
        raise BenchError(
            f"could not load the {bench} problems ({type(error).__name__}: {error}). "
            "Fix: check bench.data_dir / POPULORA_BENCHMARKS points at an unmodified evalplus release."
        ) from error


def expected_outputs(problems: dict[str, dict], dataset: str) -> dict[str, dict]:
    """Expected outputs and reference times from the canonical solutions (evalplus's get_groundtruth)."""
    from evalplus.eval._special_oracle import MBPP_OUTPUT_NOT_NONE_TASKS
    from evalplus.gen.util import trusted_exec

    not_none = MBPP_OUTPUT_NOT_NONE_TASKS if dataset == "mbpp" else []
    expected = {}
    with Progress(len(problems), f"{dataset} expected outputs", unit="problems", log=log) as progress:
        for task_id, problem in problems.items():
            code = problem["prompt"] + problem["canonical_solution"]
            oracle = {}
            for split in ("base", "plus"):
                oracle[split], oracle[f"{split}_time"] = trusted_exec(
                    code,
                    problem[f"{split}_input"],
                    problem["entry_point"],
                    record_time=True,
                    output_not_none=problem["entry_point"] in not_none,
                )
            expected[task_id] = oracle
            progress.update()
    return expected


def _check_serially(
    dataset: str, problems: dict[str, dict], expected: dict[str, dict], solutions: dict[str, str]
) -> dict[str, dict]:
    """Runs in the spawned worker: evalplus's check_correctness per task, one after another
    (each check already runs in its own sandbox process)."""
    from evalplus.data.mbpp import mbpp_serialize_inputs
    from evalplus.eval import PASS
    from evalplus.evaluate import check_correctness

    def failed(outcome, inputs, task_id):
        # evalplus.evaluate's get_failed_tests with fast_check: the last (first failing) input
        status, details = outcome
        tests = [] if status == PASS or not details else [inputs[len(details) - 1]]
        return mbpp_serialize_inputs(task_id, tests) if dataset == "mbpp" else tests

    verdicts = {}
    for task_id, solution in solutions.items():
        result = check_correctness(
            dataset,
            0,
            problems[task_id],
            solution,
            expected[task_id],
            False,
            True,
            task_id,
            MIN_TIME_LIMIT,
            GT_TIME_LIMIT_FACTOR,
        )
        verdicts[task_id] = {
            "base_status": result["base"][0],
            "plus_status": result["plus"][0],
            "base_passed_tests": int(sum(bool(x) for x in result["base"][1])),
            "plus_passed_tests": int(sum(bool(x) for x in result["plus"][1])),
            "base_fail_tests": failed(result["base"], problems[task_id]["base_input"], task_id),
            "plus_fail_tests": failed(result["plus"], problems[task_id]["plus_input"], task_id),
        }
    return verdicts


CHECK_CHUNK = 10  # solutions per call into the checking worker: how often progress is reported


def check_solutions(
    dataset: str,
    problems: dict[str, dict],
    expected: dict[str, dict],
    solutions: dict[str, str],
    *,
    desc: str = "evalplus checks",
    log=log,
) -> dict[str, dict]:
    """evalplus's verdict per task: {"base_status", "plus_status", "base_passed_tests", "plus_passed_tests"}.

    The checks run in a *spawned* worker: evalplus's sandbox forks and caps the address space at
    4 GiB, which a fork of this process (torch, a model, maybe a CUDA context) exceeds. They go to it
    `CHECK_CHUNK` solutions at a time, the progress (`desc`) counted between calls. The worker is
    started once per process and kept for every model and benchmark after (starting one, which
    imports evalplus, took 6-9 s: most of a 2-problem benchmark's checks per model).
    """
    ids = list(solutions)
    verdicts: dict[str, dict] = {}
    with Progress(len(ids), desc, unit="solutions", log=log) as progress:
        for start in range(0, len(ids), CHECK_CHUNK):
            part = ids[start : start + CHECK_CHUNK]
            try:
                verdicts.update(
                    _checker()
                    .submit(
                        _check_serially,
                        dataset,
                        {t: problems[t] for t in part},
                        {t: expected[t] for t in part},
                        {t: solutions[t] for t in part},
                    )
                    .result()
                )
            except BrokenProcessPool:
                _checker.cache_clear()  # the next call starts a fresh worker
                raise
            progress.update(len(part))
    return verdicts


@functools.cache
def _checker() -> ProcessPoolExecutor:
    """The process's checking worker (see `check_solutions`), spawned on first use; concurrent.futures
    shuts it down when the process exits."""
    return ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


def pass_at_1(verdicts: dict[str, dict]) -> dict[str, float]:
    """evalplus's pass@1 over one greedy sample per task: base tests, and base + plus tests."""
    import numpy as np
    from evalplus.eval import PASS, estimate_pass_at_k

    if not verdicts:
        raise BenchError("no verdicts to score")
    total = np.ones(len(verdicts), dtype=int)
    base = np.array([v["base_status"] == PASS for v in verdicts.values()], dtype=int)
    plus = np.array([v["base_status"] == PASS and v["plus_status"] == PASS for v in verdicts.values()], dtype=int)
    return {
        "base_pass@1": float(estimate_pass_at_k(total, base, 1).mean()),
        "plus_pass@1": float(estimate_pass_at_k(total, plus, 1).mean()),
    }


def eval_results(verdicts: dict[str, dict], solutions: dict[str, str], data_hash: str) -> dict:
    """The verdicts exactly as `evalplus.evaluate` writes `*_eval_results.json` (date, hash of the
    problem file, per task a list of samples with statuses and the failing inputs of fast_check)."""
    return {
        "date": datetime.now().strftime("%Y-%m-%d %H:%M"),
        "hash": data_hash,
        "eval": {
            task_id: [
                {
                    "task_id": task_id,
                    "solution": solutions[task_id],
                    "base_status": v["base_status"],
                    "plus_status": v["plus_status"],
                    "base_fail_tests": v.get("base_fail_tests", []),
                    "plus_fail_tests": v.get("plus_fail_tests", []),
                }
            ]
            for task_id, v in verdicts.items()
        },
    }


# ---------------------------------------------------------------- generation (evalplus.codegen, batched)

# Copied from evalplus.codegen.run_codegen (local variables there, so not importable).
INSTRUCTION_PREFIX = (
    "Please provide a self-contained Python script that solves the following problem in a markdown code block:"
)
RESPONSE_PREFIX = (
    "Below is a Python script with a self-contained function that solves the problem and passes corresponding tests:"
)


@dataclass
class Completion:
    task_id: str
    prompt: str  # the full model input (chat template applied)
    raw: str  # what evalplus calls the raw solution (before sanitizing)
    solution: str  # sanitized, what is executed
    new_tokens: int
    hit_token_limit: bool


def is_direct_completion(tokenizer) -> bool:
    return tokenizer.chat_template is None


def stop_strings(tokenizer, dataset: str) -> list[str]:
    from evalplus.provider.utility import EOS, extra_eos_for_direct_completion

    if is_direct_completion(tokenizer):
        return EOS + extra_eos_for_direct_completion(dataset)
    return EOS + ["\n```\n"]


def build_prompt(task_prompt: str, tokenizer) -> str:
    """evalplus's model input for one task (codegen strips the task prompt and adds a newline)."""
    from evalplus.provider.utility import make_raw_chat_prompt

    return make_raw_chat_prompt(task_prompt.strip() + "\n", INSTRUCTION_PREFIX, RESPONSE_PREFIX, tokenizer)


def cut_at_stops(text: str, stops: list[str]) -> str:
    """evalplus's post-processing: cut at the earliest stop string, tabs to four spaces."""
    index = min((text.index(s) for s in stops if s in text), default=len(text))
    return text[:index].replace("\t", "    ")


def greedy_generate(
    model,
    tokenizer,
    prompts: list[str],
    *,
    max_new_tokens: int,
    batch_size: int,
    stops: list[str],
    desc: str = "generate",
    adapter_names: list[str | None] | None = None,
    progress: Progress | None = None,
) -> list[tuple[str, int, bool]]:
    """(text cut at the first stop, new tokens, hit the token limit) per prompt, in order.

    `adapter_names` (one per prompt) routes each row through its adapter on a stacked multi-LoRA
    model (`populora.lm.multilora`), so several models' prompts share the batches. Progress counts
    prompts (`populora.core.progress`, as `desc`), on `progress` when the caller passes its own."""
    own = progress is None
    if progress is None:
        progress = Progress(len(prompts), desc, unit="prompts", log=log)
    with progress if own else nullcontext():
        if hasattr(model, "generate_texts"):  # the vllm engine (populora.lm.vllm_engine): it batches itself
            outputs = model.generate_texts(
                prompts, max_new_tokens=max_new_tokens, stops=stops, adapters=adapter_names or [None] * len(prompts)
            )
            progress.update(len(prompts))
            return [
                (
                    cut_at_stops(text, stops),
                    len(ids),
                    len(ids) >= max_new_tokens
                    and tokenizer.eos_token_id not in ids
                    and not any(s in text for s in stops),
                )
                for text, ids in outputs
            ]
        return _generate_batches(
            model,
            tokenizer,
            prompts,
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            stops=stops,
            adapter_names=adapter_names,
            progress=progress,
        )


def _generate_batches(
    model,
    tokenizer,
    prompts: list[str],
    *,
    max_new_tokens: int,
    batch_size: int,
    stops: list[str],
    adapter_names: list[str | None] | None,
    progress: Progress,
) -> list[tuple[str, int, bool]]:
    import torch

    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths share a batch
    results: list[tuple[str, int, bool] | None] = [None] * len(prompts)
    for start in range(0, len(order), batch_size):
        batch = order[start : start + batch_size]
        # The chat template already holds every special token the model expects.
        encoded = tokenizer(
            [prompts[i] for i in batch], return_tensors="pt", padding=True, add_special_tokens=False
        ).to(device)
        routing = {} if adapter_names is None else {"adapter_names": [adapter_names[i] for i in batch]}
        with torch.no_grad():
            output = model.generate(
                **encoded,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                temperature=None,
                top_p=None,
                top_k=None,
                stop_strings=stops,
                tokenizer=tokenizer,
                pad_token_id=tokenizer.pad_token_id,
                **routing,
            )
        for index, token_ids in zip(batch, output[:, encoded["input_ids"].shape[1] :]):
            ids = [t for t in token_ids.tolist() if t != tokenizer.pad_token_id]
            text = tokenizer.decode(ids, skip_special_tokens=True)
            stopped = tokenizer.eos_token_id in ids or any(s in text for s in stops)
            results[index] = (cut_at_stops(text, stops), len(ids), len(ids) >= max_new_tokens and not stopped)
        progress.update(len(batch))
    done = [result for result in results if result is not None]
    assert len(done) == len(results)  # the batches cover every prompt
    return done


def generate_member_solutions(
    model,
    tokenizer,
    problems: dict[str, dict],
    dataset: str,
    models: list[BenchModel],
    *,
    max_new_tokens: int,
    batch_size: int,
    size: int,
    partial: Partial | None = None,
    log=log,
) -> dict[str, list[Completion]]:
    """One greedy, sanitized solution per problem (in the order of `problems`) for each of `models`
    (the base, or adapters of a stacked multi-LoRA model), in one pass (every problem once per model,
    sharing batches), in pieces of `size` problems kept in `partial` as they finish
    (`populora.bench.partial`)."""
    from populora.bench.partial import generate_in_pieces

    stops = stop_strings(tokenizer, dataset)
    task_ids = list(problems)
    prompts = [build_prompt(problems[t]["prompt"], tokenizer) for t in task_ids]
    names = [m.name if m.adapter is not None else None for m in models]

    def generate(indices: list[int], progress) -> dict[str, list]:
        chosen = [prompts[i] for i in indices]
        routing = None if names == [None] else [name for name in names for _ in chosen]
        made = greedy_generate(
            model,
            tokenizer,
            chosen * len(names),
            max_new_tokens=max_new_tokens,
            batch_size=batch_size,
            stops=stops,
            adapter_names=routing,
            progress=progress,
        )
        return {
            m.name: [list(row) for row in made[k * len(indices) : (k + 1) * len(indices)]] for k, m in enumerate(models)
        }

    outputs = generate_in_pieces(
        partial,
        models,
        task_ids,
        generate,
        size=size,
        cost=lambda i: len(models),
        desc=f"codegen {dataset}",
        unit="prompts",
        log=log,
    )
    direct = is_direct_completion(tokenizer)
    return {m.name: _completions(problems, task_ids, prompts, outputs[m.name], direct) for m in models}


def _completions(
    problems: dict[str, dict], task_ids: list[str], prompts: list[str], outputs: list, direct: bool
) -> list[Completion]:
    """One model's generated `(text, new tokens, hit the limit)` per task as sanitized completions;
    `direct`: the tokenizer has no chat template (`is_direct_completion`)."""
    from evalplus.sanitize import sanitize

    completions = []
    for task_id, prompt, (text, n_tokens, hit_limit) in zip(task_ids, prompts, outputs):
        # evalplus.codegen: a chat model's output is the solution; a base model continues the prompt.
        raw = problems[task_id]["prompt"].strip() + "\n" + text if direct else text
        solution = sanitize(raw, entrypoint=problems[task_id]["entry_point"])
        completions.append(Completion(task_id, prompt, raw, solution, n_tokens, hit_limit))
    return completions


# ---------------------------------------------------------------- the runner


def run(
    settings: BenchSettings, models: list[BenchModel], base_model: Path, out: Path, log, partial: Partial | None = None
) -> dict[str, dict]:
    """EvalPlus (HumanEval+ / MBPP+) of every model, generated in one pass with stacked adapters, in
    pieces of problems kept in `partial` as they finish; each model's samples and evalplus's own
    files under `out/<model>/`."""
    bench = settings.benchmark
    dataset = CODE_BENCHMARKS[bench]
    problems = load_problems(bench, settings.data_dir, settings.limit)
    log.info(
        "%s: %d problems from %s, %d model(s) in one pass",
        bench,
        len(problems),
        settings.data_dir or "the official evalplus release",
        len(models),
    )
    expected = expected_outputs(problems, dataset)
    generated, generation_s = _generate_in_one_pass(settings, models, base_model, problems, partial, log)
    results = {}
    for model in models:
        score = _score(settings, model.name, generated[model.name], problems, expected, out / model.name, log)
        results[model.name] = {
            **score,
            "generation_s": round(generation_s, 1),
            "models_in_pass": len(models),
            "data": data_source(settings.data_dir, relative_data_file(bench), "official"),
        }
    return results


def _generate_in_one_pass(
    settings: BenchSettings,
    models: list[BenchModel],
    base_model: Path,
    problems: dict[str, dict],
    partial: Partial | None,
    log,
) -> tuple[dict[str, list[Completion]], float]:
    """Every model's completions, generated in one pass of the base with their adapters stacked, and the
    seconds the generation took. The model is let go on return, so that its memory is freed before the
    sandboxed checks (unless the process keeps it for the next benchmark: `BenchSettings.load_model`)."""
    adapters = {name: path for model in models for name, path in model.adapters.items()}
    tokenizer, lm = settings.load_model(base_model, adapters)
    start = time.perf_counter()
    generated = generate_member_solutions(
        lm,
        tokenizer,
        problems,
        CODE_BENCHMARKS[settings.benchmark],
        models,
        max_new_tokens=settings.max_new_tokens,
        batch_size=settings.batch_size,
        size=piece_size(settings, len(models)),
        partial=partial,
        log=log,
    )
    return generated, time.perf_counter() - start


def _score(
    settings: BenchSettings,
    name: str,
    completions: list[Completion],
    problems: dict[str, dict],
    expected: dict[str, dict],
    samples: Path,
    log,
) -> dict:
    """One model's solutions checked by evalplus, its samples and evalplus's own files written under
    `samples`; its score (n, per problem, pass@1, hit_token_limit, harness)."""
    bench = settings.benchmark
    dataset = CODE_BENCHMARKS[bench]
    solutions = {c.task_id: c.solution for c in completions}
    log.info("%s: scoring %d solutions with evalplus's check_correctness", name, len(solutions))
    verdicts = check_solutions(dataset, problems, expected, solutions, desc=f"{bench} {name} checks", log=log)
    scores = pass_at_1(verdicts)
    rows = _sample_rows(completions, verdicts)
    write_jsonl(samples / "samples.jsonl", rows)
    _write_harness_files(samples / "harness", completions, solutions, verdicts, settings)
    return {
        "n": len(rows),
        "per_problem": {row["task_id"]: int(row["passed"]) for row in rows},
        "metrics": {"pass@1": scores["plus_pass@1"], **scores},
        "hit_token_limit": sum(c.hit_token_limit for c in completions),
        "harness": f"evalplus {version('evalplus')}",
    }


def _sample_rows(completions: list[Completion], verdicts: dict[str, dict]) -> list[dict]:
    """One model's rows of samples.jsonl: each completion with its verdict (without the failing inputs)
    and `passed`, base and plus tests both passed."""
    return [
        {
            **c.__dict__,
            **{k: v for k, v in verdicts[c.task_id].items() if not k.endswith("_fail_tests")},
            "passed": verdicts[c.task_id]["plus_status"] == "pass" and verdicts[c.task_id]["base_status"] == "pass",
        }
        for c in completions
    ]


def _write_harness_files(
    harness: Path,
    completions: list[Completion],
    solutions: dict[str, str],
    verdicts: dict[str, dict],
    settings: BenchSettings,
) -> None:
    """evalplus's own files of one model in `harness`: the samples (sanitized and raw) and their results."""
    write_jsonl(harness / "samples.jsonl", [{"task_id": c.task_id, "solution": c.solution} for c in completions])
    write_jsonl(harness / "samples.raw.jsonl", [{"task_id": c.task_id, "solution": c.raw} for c in completions])
    data_hash = dataset_hash(settings.benchmark, settings.data_dir, settings.limit)
    # evalplus's results file name follows its samples file; written as evalplus writes it (json.dump,
    # inputs may hold inf/nan); `out` is a staging folder
    results_path(harness / "samples.jsonl").write_text(json.dumps(eval_results(verdicts, solutions, data_hash)))
