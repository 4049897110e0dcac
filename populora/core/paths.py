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
"""

from __future__ import annotations

import os
from pathlib import Path

_DVC_TEMP_WORKSPACE = (".dvc", "tmp", "exps")
BASE_SOURCE = "populora_source.json"
MODEL_DESCRIPTION = "model.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"  # PEFT's names
ADAPTER_CONFIG = "adapter_config.json"


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
