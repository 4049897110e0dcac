"""Replay a child's first update step from a finished run, its factors as the run made them and as
`operators.align` makes them now: does the child's step grow its `dW`, or only move it sideways?

The child is rebuilt from the run's trained parents (`genG/trained/adapters`, the event in
`genG/evolved/evolution.json`), once with the operators' rotation into the first parent's
coordinates switched off (it must equal the run's checkpoint bit for bit: the control that the
rebuild is the run's child) and once as the operators make it now. Each variant replaces the child in
a copy of `genG/checkpoint` (the carried AdamW moments stay as the run wrote them), and `stages.update`
replays generation G+1's update job for that slot on the run's own rollouts; the unaligned replay must
reproduce the run's trained adapter. Per variant: the step's size `sum ||B'A' - BA||_F`, the growth of
`sum ||B A||_F`, and the cosine between the step and the child's `dW`.

    python perf/child_restep.py --clone STUDY_CLONE --gen 1 --slot student0 --json perf/measured/child_restep.json

STUDY_CLONE is a `scripts/study.sh` clone after its run (results/, params.yaml, results/base_model).
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from populora.config import load_params
from populora.core.io import write_json
from populora.core.topology import update_part_slots
from populora.lm.adapters import delta_norm, read_state_dict, write_adapter
from populora.population import operators as ops

sys.path.insert(0, str(Path(__file__).resolve().parent))
from child_step import step_size  # perf/ is no package: the sibling script's helper


def step_stats(before: dict, after: dict) -> dict:
    """Size of the step on dW (`perf/child_step.step_size`), growth of sum ||dW|| (`adapters.delta_norm`),
    and the cosine between the step and dW before, over all modules together."""
    dot = step_sq = dw_sq = 0.0
    for m in ops.lora_modules(before):
        old = before[m.b_key].double() @ before[m.a_key].double()
        step = after[m.b_key].double() @ after[m.a_key].double() - old
        dot, step_sq, dw_sq = (
            dot + float((step * old).sum()),
            step_sq + float((step * step).sum()),
            dw_sq + float((old * old).sum()),
        )
    return {
        "step": round(step_size(before, after), 4),
        "growth": round(delta_norm(after) - delta_norm(before), 4),
        "cosine": round(dot / (step_sq * dw_sq) ** 0.5, 4),
    }


def identical(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k].float(), b[k].float()) for k in a)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clone", type=Path, required=True)
    parser.add_argument("--arm", default="population")
    parser.add_argument("--gen", type=int, required=True, help="the generation after which the child was born")
    parser.add_argument("--slot", required=True)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    clone = args.clone.resolve()
    params = load_params(clone / "params.yaml")
    arm_dir = clone / "results" / args.arm
    born, trained = arm_dir / f"gen{args.gen:03d}", arm_dir / f"gen{args.gen + 1:03d}"
    event = next(
        e for e in json.loads((born / "evolved" / "evolution.json").read_text())["events"] if e["slot"] == args.slot
    )
    parents = [read_state_dict(born / "trained" / "adapters" / slot) for slot in event["parent_slots"]]
    recorded_child = read_state_dict(born / "checkpoint" / "adapters" / args.slot)
    recorded_step = read_state_dict(trained / "trained" / "adapters" / args.slot)
    part = next(k for k in range(params.dag.update_jobs) if args.slot in update_part_slots(params, args.arm, k))

    def child(aligned: bool) -> dict:
        saved = ops.align
        if not aligned:
            ops.align = lambda made, reference: made
        try:
            return ops.make_child(parents, event["operator"], event["seed"], fitness=event["fitness"])
        finally:
            ops.align = saved

    out = {
        "event": {k: event[k] for k in ("operator", "parent_slots", "slot", "moments", "generation")},
        "recorded": step_stats(recorded_child, recorded_step),
        "variants": {},
    }
    start = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        for name, aligned in (("as_run", False), ("aligned", True)):
            made = child(aligned)
            if not aligned and not identical(made, recorded_child):
                raise SystemExit("the rebuilt child differs from the run's checkpoint: not the run's code or event")
            state = Path(tmp) / name / "state"
            shutil.copytree(born / "checkpoint", state)
            write_adapter(
                state / "adapters" / args.slot, made, config_from=born / "checkpoint" / "adapters" / args.slot
            )
            result = Path(tmp) / name / "trained"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "stages.update",
                    "--params",
                    str(clone / "params.yaml"),
                    "--arm",
                    args.arm,
                    "--gen",
                    f"{args.gen + 1:03d}",
                    "--part",
                    str(part),
                    "--base-model",
                    str(clone / "results" / "base_model"),
                    "--state",
                    str(state),
                    "--rollouts",
                    str(trained / "rollouts.jsonl"),
                    "--trained",
                    str(result),
                ],
                check=True,
                cwd=clone,
                capture_output=True,
            )
            after = read_state_dict(result / "adapters" / args.slot)
            row = step_stats(made, after)
            if not aligned:
                row["reproduces_run"] = identical(after, recorded_step)
            out["variants"][name] = row
            print(name, row, flush=True)
    command = " ".join(argv if argv is not None else sys.argv[1:]).replace(str(args.clone), "STUDY_CLONE")
    # the clone's path is this machine's: the record names it as the docstring does
    out.update(
        seconds=round(time.perf_counter() - start, 1),
        command=f"python perf/child_restep.py {command}",
        clone_commit=subprocess.run(
            ["git", "-C", str(clone), "rev-parse", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
    )
    if args.json:
        write_json(args.json, out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
