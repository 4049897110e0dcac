"""Run one benchmark for a list of models: the bare base, or every final member of an arm.

`run_benchmark(settings, models, ...)` (settings: `populora.bench.settings.settings_for`) returns one
result per model (see stages/bench.py for the fields) and writes each model's per-problem samples
and harness files under `<out>/<model>/`. Each benchmark family is one module with its own `run`
(`RUNNERS`, below): `evalplus` (HumanEval+, MBPP+), `lmeval` (the math suite through lm-eval),
`cruxeval` and `livecodebench`. Every family generates for all of its models in one pass with
stacked adapters (`populora.lm.multilora`: each row of a batch runs through its model's adapter,
the base-model rows through none). This module holds what they share: the benchmarked models,
the Wilson interval of every result, and the table.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from populora.bench import BenchError, cruxeval, evalplus, livecodebench, lmeval
from populora.bench.settings import BenchSettings
from populora.bench.stats import wilson_interval
from populora.core.io import read_json
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


# which family's `run` scores a benchmark (settings.runner, `populora.bench.settings.runner_of`)
RUNNERS = {"evalplus": evalplus.run, "lm_eval": lmeval.run, "cruxeval": cruxeval.run, "livecodebench": livecodebench.run}


def run_benchmark(settings: BenchSettings, models: list[BenchModel], base_model: Path, out: Path, log) -> dict[str, dict]:
    """Every model's result on the benchmark (with `correct`, its Wilson interval and the model's ref
    fields); samples under `out/<model>/`."""
    results = RUNNERS[settings.runner](settings, models, base_model, out, log)
    return {model.name: {**with_uncertainty(results[model.name], settings.benchmark), **model.ref.fields(),
                         "member": model.member}
            for model in models}
