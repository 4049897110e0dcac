"""One benchmark job, as the bench stages run it: which models, the run in a staging folder, finished
work kept for a rerun (`stages.bench` runs one benchmark, `stages.bench_together` a group of them in one
process; both call this).

    code = run_one(settings_for(params, "gsm8k"), selected_models(params, "population", "results/models/population"),
                   Path("results/base_model"), Path("results/bench/population/gsm8k"), log)
"""

from __future__ import annotations

import logging
import logging.handlers
import multiprocessing
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from populora.bench import BenchError
from populora.bench.models import base_model_entry, exported_models
from populora.bench.partial import Partial
from populora.core.io import read_json, replace_dir, staging_dir, write_json
from populora.core.topology import benchmarked_refs

TOGETHER_NOTE = "_together.json"  # an underscore: never a model's name (base, <arm>-<slot>)


def selected_models(params, arm: str | None, models_dir: str | None) -> list:
    """The bare base model (no `models_dir`), or the arm's exported members of the roles in bench.roles."""
    if not models_dir:
        return [base_model_entry()]
    if arm is None:  # the refs would name no arm: no exported model would match
        raise ValueError(f"the members of {models_dir} need their arm (--arm population or baseline)")
    wanted = set(benchmarked_refs(params, arm))
    return [model for model in exported_models(Path(models_dir)) if model.ref in wanted]


def run_one(settings, models: list, base_model: Path, results: Path, log) -> int:
    """One benchmark for `models`: `<results>/<model>.json` and `<model>/`, in place only when every model
    succeeded; finished work kept in `<results>.partial/` for a rerun. 0, or 1 after a BenchError."""
    start = time.perf_counter()
    tmp = staging_dir(results)
    log.info(
        "benchmarking %s on %s (limit %s, max_new_tokens %d)",
        ", ".join(m.name for m in models),
        settings.benchmark,
        settings.limit,
        settings.max_new_tokens,
    )
    try:
        if settings.sampler.name == "vllm" and settings.runner == "lm_eval":
            # lm-eval's vllm model runs each model in a process of its own anyway: keep each finished one.
            # Our engine serves every model at once: one engine started and freed per model leaked host
            # memory in vLLM's CPU build (the vLLM lane's bench jobs ran out of KV-cache memory, 2026-11-25)
            results_of = run_resumable(settings, models, base_model, tmp, results, log)
        else:  # hf: every member in one stacked pass; finished problems kept in <results>.partial/
            partial = Partial(Path(f"{results}{PARTIAL}"), settings, base_model)
            results_of = run_benchmark(settings, models, base_model, tmp, log, partial=partial)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(error, BenchError):
            log.error("%s on %s failed: %s", ", ".join(m.name for m in models), settings.benchmark, error)
            return 1
        raise
    wall_s = round(time.perf_counter() - start, 1)
    for name, result in results_of.items():
        result.update(
            benchmark=settings.benchmark, limit=settings.limit, max_new_tokens=settings.max_new_tokens, wall_s=wall_s
        )
        write_json(tmp / f"{name}.json", result)
        log.info(
            "%s on %s: %s, %d/%d correct (95%% Wilson %.3f-%.3f)",
            name,
            settings.benchmark,
            result["metrics"],
            result["correct"],
            result["n"],
            result["interval"]["low"],
            result["interval"]["high"],
        )
    replace_dir(tmp, results)
    shutil.rmtree(f"{results}{PARTIAL}", ignore_errors=True)
    log.info("%d model(s) on %s in %.1f s", len(results_of), settings.benchmark, wall_s)
    return 0


def run_one_apart(settings, models: list, base_model: Path, results: Path, log) -> int:
    """`run_one` in a spawned process of its own, its log records sent back through this process's handlers:
    a vLLM engine gives its host memory back only when its process ends, so a second base model in the same
    job (the raw base beside the warm one) found the first one's KV cache still held and could not start
    (the vLLM lane's bench_base, CI of 2026-11-28)."""
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    listener = logging.handlers.QueueListener(queue, *logging.getLogger().handlers, respect_handler_level=True)
    listener.start()
    try:
        with ProcessPoolExecutor(1, mp_context=context, initializer=_log_into, initargs=(queue,)) as pool:
            return pool.submit(_run_one_logged, settings, models, base_model, results, log.name).result()
    finally:
        listener.stop()


def _log_into(queue) -> None:
    root = logging.getLogger()
    root.handlers[:] = [logging.handlers.QueueHandler(queue)]
    root.setLevel(logging.INFO)


def _run_one_logged(settings, models: list, base_model: Path, results: Path, log_name: str) -> int:
    return run_one(settings, models, base_model, results, logging.getLogger(log_name))


PARTIAL = ".partial"  # beside --results: what an earlier attempt finished (populora.bench.partial)


def run_benchmark(*args, **kwargs) -> dict[str, dict]:
    """`populora.bench.runners.run_benchmark`, imported on first use: the note of a grouped benchmark's own job
    (DVC runs every one) needs neither torch nor the harnesses."""
    from populora.bench.runners import run_benchmark as run

    return run(*args, **kwargs)


def run_resumable(settings, models, base_model: Path, out: Path, results: Path, log) -> dict[str, dict]:
    """`run_benchmark` one model at a time, each finished model kept in `<results>.partial/` (its result
    and folder) under a key; a model whose key matches is taken back instead of run again, and the
    one that was running takes back its finished requests (lm-eval's request cache)."""
    keep = Path(f"{results}{PARTIAL}")
    keep.mkdir(parents=True, exist_ok=True)
    partial = Partial(keep, settings, base_model)
    done = {}
    for model in models:
        key, saved = partial.key(model), keep / f"{model.name}.json"
        record = read_json(saved) if saved.is_file() else {}
        if record.get("key") == key and (keep / model.name).is_dir():
            log.info("%s on %s: kept from an earlier attempt (%s)", model.name, settings.benchmark, keep)
            done[model.name] = record["result"]
        else:
            shutil.rmtree(keep / model.name, ignore_errors=True)
            done.update(run_benchmark(settings, [model], base_model, keep, log, partial=partial))
            write_json(saved, {"key": key, "result": done[model.name]})
        shutil.copytree(keep / model.name, out / model.name)
    return done
