"""One code stamp a stage module: the hashes of the source files it runs, so a DVC stage has one code dependency.

    python -m workflow.render_dvc --check --shape-only --code-stamps results/.code   # the guard writes them

A stage reruns when the code it runs changes: its module and every local module it imports, transitively
(`workflow.dag.code_deps`). DVC used to list those ~40 files in each stage's deps, and it reads and rewrites the
whole dvc.lock around every stage it runs: with ~150 stages and ~6,500 deps that lock cost 12-27 s between any
two stages of a study run, over a third of a generation's wall (docs/measurements.md, 2026-11-29). Now the
`dag_shape` guard (which reruns whenever any code or params.yaml changes) writes `results/.code/<module>.json`:
each file's sha256, for every stage module. A stage depends on its module's stamp, the guard's output, so DVC
reruns it exactly when one of its files changed, as before, with one dep where there were forty.

A stamp is rewritten only when its content changes (DVC deletes a stage's outputs before it runs the stage, so
under DVC the guard writes them all anew, the same bytes: DVC goes by content). The adoption of a Snakemake run
(workflow/adopt.py), which goes by times, reads a stamp's source files' times, never the stamp's.

A project whose dvc.lock was written before the stamps sees every stage's deps changed once (forty files became
one): `dvc repro` reruns them; where the code is known to be the one that made the results, `dvc repro dag_shape`
then `dvc commit -f` records them as they are.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from populora.core.io import write_json
from workflow.dag import REPO, RESULTS, STAGES, code_deps

CODE_STAMPS = f"{RESULTS}/.code"


def stamp_path(module: str, directory: str = CODE_STAMPS) -> str:
    """Where the stamp of a stage module lives (relative to the project), e.g. results/.code/stages.pair.json."""
    return f"{directory}/{module}.json"


def stage_modules() -> list[str]:
    """The modules the pipeline's stages run, each once, in a stable order."""
    return sorted({stage.module for stage in STAGES})


def stamp_content(module: str, root: Path = REPO) -> dict:
    """What a module's stamp holds: each source file it runs (`code_deps`) with its sha256."""
    files = {path: hashlib.sha256((root / path).read_bytes()).hexdigest() for path in code_deps(module, root)}
    return {"module": module, "files": files}


def _current(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # missing or unreadable: written anew


def stale_stamps(directory: str = CODE_STAMPS, root: Path = REPO) -> dict[str, dict]:
    """Stamp path -> the content it should hold, for every stage module's stamp that is missing or differs."""
    wanted = {stamp_path(module, directory): stamp_content(module, root) for module in stage_modules()}
    return {path: content for path, content in wanted.items() if _current(root / path) != content}


def write_code_stamps(directory: str = CODE_STAMPS, root: Path = REPO) -> list[str]:
    """Write the stamps that are missing or differ (atomically); the unchanged ones are left as they are.
    Returns the paths written."""
    stale = stale_stamps(directory, root)
    for path, content in stale.items():
        write_json(root / path, content)
    return sorted(stale)


def module_of_stamp(path: str, directory: str = CODE_STAMPS) -> str | None:
    """The stage module a dependency path is the stamp of, or None when it is not a code stamp."""
    prefix = f"{directory}/"
    if not (path.startswith(prefix) and path.endswith(".json")):
        return None
    module = path[len(prefix) : -len(".json")]
    return module if module in stage_modules() else None
