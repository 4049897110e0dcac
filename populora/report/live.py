"""The live history of a run: curves that exist while it runs, one row per finished generation.

Three files, written while the run goes on (the paths are passed to the stages; workflow/dag.py spells them):

    results/dynamics/<arm>/dynamics.json     one row per generation: the generation's metrics (training,
                                             update diagnostics per optimizer step) and its held-out
                                             accuracies; what `dvc plots show` draws
    results/dynamics/<arm>/update_steps.json one row per optimizer step (`step` counts over the whole run):
                                             loss, gradient norm, entropy, ... per adapter slot
    results/progress.json                    per arm the last finished generation's figures (a top-level
                                             DVC metric: `dvc exp show` of a run in progress)

Writers, each under a file lock (the arms and the held-out scoring run side by side): the
`checkpoint` stage puts generation g's training row (and drops rows after g: they belong to an
earlier run of the same folder), the `heldout` stage merges the held-out accuracies into row g, and
the `dynamics` stage, the declared owner of both tables, writes them whole from every generation's
files at the end. Rows are keyed by generation, so a stage that runs again after an interruption
replaces its row: the history has one row per generation, without gaps or repeats.

Optional trackers (`tracking.report_to`: TensorBoard, W&B offline) get every row the history gets
(`populora.report.trackers`); each arm's tracker run is named in `results/tracking/<arm>/run.json`,
so a resumed run continues the same tracker run.
"""

from __future__ import annotations

import fcntl
import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from populora.core.io import write_json
from populora.core.stats import is_finite_number
from populora.report.panels import PANELS

UPDATE_STEP = re.compile(r"^update\.(?P<slot>[^.]+)\.step(?P<step>\d+)\.(?P<figure>[a-z_]+)$")
# per arm in progress.json: (key in a history row, name in progress.json)
PROGRESS_KEYS = (
    ("generation", "generation"),
    ("solve_rate", "solve_rate"),
    ("student_reward_mean", "student_reward"),
    ("validity_rate", "validity_rate"),
    ("heldout.students.accuracy", "heldout"),
    ("heldout.base.accuracy", "heldout_base"),
)


# keys a DVC plot names that a run may never write (no held-out pool; teachers not scored; a sub-population
# of one member has no pairs to tell apart): null, not absent, since DVC fails a plot whose field is in no row
# ("Could not find provided field")
ALWAYS = tuple(field for panel in PANELS if panel.id in ("heldout", "diversity") for field in panel.fields)


def plot_table(rows: list[dict], always: tuple[str, ...] = ALWAYS) -> list[dict]:
    """Every row with every key: DVC's plot renderer fails ("argument of type 'NoneType' is not
    iterable") when rows have different keys. A reason never seen in a generation counted 0 there;
    any other missing value is null; the keys of `always` (the history's plots: ALWAYS) are in every row."""
    keys = sorted({key for row in rows for key in row} | (set(always) if rows else set()))
    return [{key: row.get(key, 0 if ".reason." in key else None) for key in keys} for row in rows]


def put_row(rows: list[dict], row: dict, *, drop_later: bool = False) -> list[dict]:
    """`rows` (one per generation) with `row` merged into the row of its generation (added when
    new), sorted by generation; `drop_later` drops the rows of later generations (a new run's
    generation g makes an older run's g+1, g+2, ... stale)."""
    gen = int(row["generation"])
    by_gen = {int(r["generation"]): r for r in rows if r.get("generation") is not None}
    if drop_later:
        by_gen = {g: r for g, r in by_gen.items() if g <= gen}
    kept = {k: v for k, v in by_gen.get(gen, {}).items() if v is not None}  # plot_table's fillers are not values
    by_gen[gen] = {**kept, **row}
    return [by_gen[g] for g in sorted(by_gen)]


def step_rows(rows: list[dict]) -> list[dict]:
    """One row per optimizer step of the run, from the generation rows' `update.<slot>.step<k>.<figure>`
    keys: `step` (0, 1, ... over the whole run), `generation`, `step_in_generation` and
    `<slot>.<figure>`. Slots train side by side, so step k of a generation is one row for all of them."""
    out: list[dict] = []
    # every slot's loss and gradient norm in every row (null where it took no step): DVC's plots need each field
    slots = sorted({key.split(".", 1)[1] for row in rows for key in row if key.startswith("optimizer_steps.")})
    always = {f"{slot}.{figure}": None for slot in slots for figure in ("loss", "grad_norm")}
    for row in sorted(rows, key=lambda r: r["generation"]):
        steps: dict[int, dict] = {}
        for key, value in row.items():
            match = UPDATE_STEP.match(key)
            if match and is_finite_number(value):
                steps.setdefault(int(match["step"]), {})[f"{match['slot']}.{match['figure']}"] = value
        for k in sorted(steps):
            out.append(
                {"step": len(out), "generation": row["generation"], "step_in_generation": k, **always, **steps[k]}
            )
    return plot_table(out, always=())  # the step plots name no held-out figure (a step is not a generation)


def progress(rows: list[dict]) -> dict:
    """The last generation's figures of one arm (PROGRESS_KEYS), for progress.json."""
    last = max(rows, key=lambda r: r["generation"]) if rows else {}
    return {name: last[key] for key, name in PROGRESS_KEYS if is_finite_number(last.get(key))}


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """An exclusive lock on `<path>.lock` (the arms' stages write the live files side by side)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _read_rows(path: Path) -> list[dict]:
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError):  # absent, or torn by a writer killed mid-way (writes are atomic, but be safe)
        return []
    return rows if isinstance(rows, list) else []


def write_tables(history: str | Path, steps: str | Path, rows: list[dict]) -> list[dict]:
    """Both tables of one arm from its generation rows (atomic writes); returns the step rows."""
    write_json(history, plot_table(rows))
    step_table = step_rows(rows)
    write_json(steps, step_table)
    return step_table


def write_progress(path: str | Path, arm: str, rows: list[dict]) -> None:
    """Put one arm's figures into progress.json (`<arm>.<figure>`), keeping the other arms'."""
    path = Path(path)
    with locked(path):
        try:
            current = json.loads(path.read_text())
        except (OSError, ValueError):
            current = {}
        current = {k: v for k, v in current.items() if not k.startswith(f"{arm}.")}
        current |= {f"{arm}.{name}": value for name, value in progress(rows).items()}
        write_json(path, current)


def record_generation(
    row: dict,
    *,
    arm: str,
    history: str | Path,
    steps: str | Path,
    progress_file: str | Path,
    drop_later: bool = False,
    trackers=None,
) -> list[dict]:
    """Merge one generation's `row` into the arm's live history (see the module docstring) and
    return the history's rows. `trackers` (populora.report.trackers.Trackers) get the merged row."""
    history = Path(history)
    with locked(history):
        rows = put_row(_read_rows(history), row, drop_later=drop_later)
        step_table = write_tables(history, steps, rows)
    write_progress(progress_file, arm, rows)
    if trackers is not None:
        merged = next(r for r in rows if r["generation"] == row["generation"])
        trackers.log_generation(merged, [s for s in step_table if s["generation"] == row["generation"]])
    return rows
