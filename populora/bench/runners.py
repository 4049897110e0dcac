"""Run one benchmark for a list of models: the bare base, or every final member of an arm.

`run_benchmark(settings, models, ...)` (settings: `populora.bench.settings.settings_for`) returns one
result per model (see stages/bench.py for the fields) and writes each model's per-problem samples
and harness files under `<out>/<model>/`. Each benchmark family is one module with its own `run`
(`RUNNERS`, below): `evalplus` (HumanEval+, MBPP+), `lmeval` (the math suite through lm-eval),
`cruxeval` and `livecodebench`; each takes a `partial` (`populora.bench.partial`, or None) and keeps
there what a rerun after a kill can take back. Every family generates for all of its models in one pass with
stacked adapters (`populora.lm.multilora`: each row of a batch runs through its model's adapter,
the base-model rows through none). This module holds the table and what every result gets: the
Wilson interval and the model's ref fields; the models themselves are `populora.bench.models`.
"""

from __future__ import annotations

from pathlib import Path

from populora.bench import BenchError, cruxeval, evalplus, livecodebench, lmeval
from populora.bench.models import BenchModel
from populora.bench.partial import Partial
from populora.bench.settings import BenchSettings
from populora.core.stats import wilson_interval


def with_uncertainty(result: dict, bench: str) -> dict:
    """Add `correct` (from the per-problem verdicts) and the 95% Wilson interval of the primary score."""
    from populora.bench import primary_metric

    correct = sum(result["per_problem"].values())
    n = result["n"]
    score = result["metrics"][primary_metric(bench)]
    if n and abs(correct / n - score) > 1e-9:
        raise BenchError(
            f"{bench}: {correct}/{n} problems correct but the harness reports {score}. "
            "Fix: report this as a bug (per-problem verdicts and the score disagree)."
        )
    low, high = wilson_interval(correct, n)
    return {**result, "correct": correct, "interval": {"method": "wilson", "level": 0.95, "low": low, "high": high}}


# which family's `run` scores a benchmark (settings.runner, `populora.bench.settings.runner_of`)
RUNNERS = {
    "evalplus": evalplus.run,
    "lm_eval": lmeval.run,
    "cruxeval": cruxeval.run,
    "livecodebench": livecodebench.run,
}


def run_benchmark(
    settings: BenchSettings, models: list[BenchModel], base_model: Path, out: Path, log, partial: Partial | None = None
) -> dict[str, dict]:
    """Every model's result on the benchmark (with `correct`, its Wilson interval and the model's ref
    fields); samples under `out/<model>/`. `partial` (`populora.bench.partial`): where finished work is
    kept for a rerun and taken back from."""
    results = RUNNERS[settings.runner](settings, models, base_model, out, log, partial=partial)
    return {
        model.name: {
            **with_uncertainty(results[model.name], settings.benchmark),
            **model.ref.fields(),
            "member": model.member,
        }
        for model in models
    }
