"""Where relative paths in params.yaml are taken from: the project, also inside a DVC queue.

Stages run from the project root, so `bench.data_dir: ../shared/benchmarks` normally means
"beside the project". `dvc exp run --queue` + `dvc queue start` (and `dvc exp run --temp`) run
an experiment in a temporary copy, `<project>/.dvc/tmp/exps/<tmpdir>/`, where that relative path
would point into `.dvc/tmp/exps/`; a path that does not exist from there is taken from the
project that queued the experiment instead.

Also the names of the files a model folder holds besides the model itself, spelled once here for
their writers and readers (here, not in populora.lm.model: this module is light, so the export stage
names them without depending on the model code):

    <base_model>/populora_source.json   BASE_SOURCE: where the base came from (`populora.lm.model.describe_source`)
    <models>/<slot>/model.json          MODEL_DESCRIPTION: an exported member (`stages.export`), read by the
                                        bench stage (`populora.bench.runners`)
    <adapter>/adapter_model.safetensors ADAPTER_WEIGHTS, <adapter>/adapter_config.json ADAPTER_CONFIG: a PEFT
                                        adapter folder (`populora.lm.adapters`), checked by `stages.update_gather`

and which of a run's two base folders its adapters were trained on (`model_base`, `check_adapter_base`):
`<results>/base_model` is the raw base, `<results>/warm_base` the base every model stage loads (the warm
start's merge, its adapter kept in `warm_start_adapter/`; the raw base's hard links when the warm start is off).
"""

from __future__ import annotations

import os
from pathlib import Path

_DVC_TEMP_WORKSPACE = (".dvc", "tmp", "exps")
BASE_SOURCE = "populora_source.json"
MODEL_DESCRIPTION = "model.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # PEFT's names
ADAPTER_CONFIG = "adapter_config.json"
RAW_BASE, WARM_BASE = "base_model", "warm_base"  # a run's base folders under results/
WARM_START_ADAPTER = "warm_start_adapter"  # in <results>/warm_base where the warm start trained one


def model_base(results: str | Path) -> Path:
    """The base a run's adapters were trained on: `<results>/warm_base` where the run made one, else
    `<results>/base_model` (runs older than the warm start)."""
    warm = Path(results) / WARM_BASE
    return warm if warm.is_dir() else Path(results) / RAW_BASE


def check_adapter_base(base: str | Path) -> None:
    """ValueError when `base` is a run's raw base while the run trained its adapters on a warm start beside it:
    its students would answer on a model they were never trained on, silently."""
    base = Path(base)
    warm = base.parent / WARM_BASE
    if base.name == RAW_BASE and (warm / WARM_START_ADAPTER).is_dir():
        raise ValueError(
            f"{base} is the raw base, but this run's adapters were trained on its warm start: "
            f"pass --base-model {warm} (or leave --base-model out)"
        )


def queued_from(cwd: str | Path) -> Path | None:
    """The project a DVC temporary experiment workspace belongs to, or None for a normal folder."""
    parts = Path(cwd).resolve().parts
    for start in range(len(parts) - len(_DVC_TEMP_WORKSPACE)):
        if parts[start : start + len(_DVC_TEMP_WORKSPACE)] == _DVC_TEMP_WORKSPACE:
            return Path(*parts[:start])
    return None


def project_path(value: str | os.PathLike) -> Path:
    """`value` as an absolute path: relative to the working directory (the project root), or,
    when it does not exist there and this runs in a DVC temporary workspace, to the project
    the experiment was queued from. A leading `~` is the home folder."""
    path = Path(value).expanduser()
    if path.is_absolute() or path.exists():
        return path.resolve()
    origin = queued_from(Path.cwd())
    if origin is not None and (origin / path).exists():
        return (origin / path).resolve()
    return path.resolve()
