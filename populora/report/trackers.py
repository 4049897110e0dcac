"""Optional experiment trackers fed from the live history (`tracking.report_to` in params.yaml).

    tracking:
      report_to: [tensorboard]      # [] (default), tensorboard, wandb (offline: nothing leaves the machine)

Each arm is one tracker run. Every generation row the live history records (populora/report/live.py)
is logged at step = generation; the update's per-optimizer-step figures at their run-wide step under
`update/...`. The run's identity (the W&B run id; TensorBoard needs none, its log folder is the run)
is kept in `<tracking folder>/<arm>/run.json`, beside the history, and read back by every later stage,
so a resumed run, in a new process, continues the same tracker run rather than starting another.
A stage that runs again after an interruption logs its generation again at the same step: TensorBoard
shows the last value written, W&B (resume="allow") the same.

TensorBoard: tensorboardX writes event files to `<tracking folder>/<arm>/tensorboard`
(`tensorboard --logdir results/tracking`). W&B: `wandb` must be installed (`pip install wandb`;
params validation refuses `wandb` otherwise); it runs offline (`WANDB_MODE=offline`) and writes
`<tracking folder>/<arm>/wandb/`, which `wandb sync` uploads later.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

from populora.core.io import write_json
from populora.core.stats import is_finite_number
from populora.report.live import UPDATE_STEP

RUN_FILE = "run.json"


def scalars(row: dict, *, skip=("generation", "step", "step_in_generation")) -> dict[str, float]:
    """The numeric figures of a history row, named with `/` between groups (trackers' convention):
    `code_o.solve_rate` -> `code_o/solve_rate`."""
    return {
        key.replace(".", "/"): float(value) for key, value in row.items() if key not in skip and is_finite_number(value)
    }


def generation_scalars(row: dict) -> dict[str, float]:
    """`scalars` of a generation row without its per-optimizer-step keys (they go on the step axis)."""
    return scalars({k: v for k, v in row.items() if not UPDATE_STEP.match(k)})


def run_identity(folder: Path, arm: str, project: str) -> dict:
    """The arm's tracker run, made on first use and kept in `<folder>/run.json`: a resumed run reads it."""
    path = folder / RUN_FILE
    if path.is_file():
        return json.loads(path.read_text())
    identity = {"arm": arm, "project": project, "wandb_id": uuid.uuid4().hex[:12]}
    write_json(path, identity)
    return identity


class Trackers:
    """The trackers of one arm; `log_generation` sends one history row and its optimizer steps."""

    def __init__(self, report_to, folder: str | Path, arm: str, *, project: str = "populora"):
        self.folder = Path(folder) / arm
        self.report_to = tuple(report_to)
        self.identity = run_identity(self.folder, arm, project) if self.report_to else {}
        self.arm, self.project = arm, project

    def log_generation(self, row: dict, steps: list[dict]) -> None:
        gen = int(row["generation"])
        if "tensorboard" in self.report_to:
            self._tensorboard(gen, row, steps)
        if "wandb" in self.report_to:
            self._wandb(gen, row, steps)

    def _tensorboard(self, gen: int, row: dict, steps: list[dict]) -> None:
        from tensorboardX import SummaryWriter

        # one event file per stage and generation: tensorboardX names files by the second, and two stages
        # within one second would otherwise write the same file
        suffix = f".gen{gen:03d}.{os.getpid()}"
        with SummaryWriter(logdir=str(self.folder / "tensorboard"), filename_suffix=suffix) as writer:
            for name, value in generation_scalars(row).items():
                writer.add_scalar(name, value, global_step=gen)
            for step in steps:
                for name, value in scalars(step).items():
                    writer.add_scalar(f"update/{name}", value, global_step=int(step["step"]))

    def _wandb(self, gen: int, row: dict, steps: list[dict]) -> None:
        import wandb

        run = wandb.init(
            project=self.project,
            id=self.identity["wandb_id"],
            name=self.arm,
            resume="allow",
            dir=str(self.folder),
            mode="offline",
            reinit="finish_previous",
        )
        try:
            # one step axis per kind: generations and optimizer steps
            run.define_metric("generation")
            run.define_metric("train/*", step_metric="generation")
            run.define_metric("update_step")
            run.define_metric("update/*", step_metric="update_step")
            for step in steps:
                run.log({"update_step": int(step["step"]), **{f"update/{k}": v for k, v in scalars(step).items()}})
            run.log({"generation": gen, **{f"train/{k}": v for k, v in generation_scalars(row).items()}})
        finally:
            run.finish()
