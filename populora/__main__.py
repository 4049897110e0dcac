"""One door to the tools outside the DAG: `python -m populora <command> [its arguments]`.

    python -m populora --help                 # the commands, one line each
    python -m populora ruler --help           # a command's own arguments

Each command is a module's `main(argv)`; the module stays runnable on its own (`python -m <module>`). The stages
are not here: the DAG runs them (`bash scripts/run_pipeline.sh`, or `dvc repro`).
"""

from __future__ import annotations

import importlib
import sys

# command -> (module, what it is for); the module's own --help says how
COMMANDS: dict[str, tuple[str, str]] = {
    "check-params": ("populora.config", "validate params.yaml (and overlays) before any work"),
    "check-device": ("populora.lm.device", "whether model.device and sampler.engine can run on this machine"),
    "warm-start-study": ("populora.warmstart.study", "what the warm start buys: raw against warm base, per family"),
    "ruler": ("populora.heldout.ruler", "build a held-out pool on the warm base (calibrated, constants checked)"),
    "control": ("populora.control.positive", "the positive control: can the update teach one held-out family?"),
    "control-split": (
        "populora.control.split",
        "a control run's held-out gain split into the tasks its best constant solves and the others",
    ),
    "study": ("populora.analysis.__main__", "analyse a study's runs: tables, intervals across seeds, figure"),
    "study-plan": ("populora.analysis.plan", "check a study's plan.yaml (overlays, seeds, budget) before its runs"),
    "study-baselines": (
        "populora.analysis.baselines",
        "what a held-out pool gives away: the best constant answer, copy and echo",
    ),
    "study-calibration": (
        "populora.analysis.calibration",
        "whether a study's 95% intervals keep their coverage (simulated)",
    ),
    "study-design-coverage": (
        "populora.analysis.design_coverage",
        "whether the intervals keep their coverage at a design's seeds per control (simulated)",
    ),
    "study-crossplay": ("populora.analysis.crossplay", "the cross-play matrix of a population's members"),
    "study-growth": (
        "populora.analysis.growth",
        "how far members moved per step; whether evolved children keep moving",
    ),
    "study-passk": ("populora.analysis.passk", "pass@k on a pool for the base and each run's final students"),
    "heldout-curve": ("populora.report.heldout_curve", "a run's held-out learning curve"),
    "stage-host": (
        "populora.core.stagehost.host",
        "run the stages in forks of one process that imported torch, transformers and PEFT once",
    ),
    "bench-diagnostics": (
        "populora.bench.diagnostics",
        "what a model's CRUXEval answers are beyond right or wrong (format, copying)",
    ),
    "render-dvc": ("workflow.render_dvc", "write (or --check) dvc.yaml from the one DAG declaration"),
    "render-params": ("workflow.render_params", "write each key's help into params.yaml"),
    "adopt": ("workflow.adopt", "one run, both engines: DVC takes what Snakemake made as its own"),
    "exp-plan": ("workflow.exp_plan", "what `dvc exp run -S ...` would run, on a finished run (a dry run that works)"),
    "run-cache": (
        "workflow.run_cache",
        "carry DVC's run cache of some stages to another checkout (a study's shared stages on a new machine)",
    ),
    "time-model": ("workflow.time_model", "how long each job of a GPU run takes, from params (SLURM runtimes)"),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    rows = "\n".join(f"  {name:<{width}}  {about}" for name, (_, about) in COMMANDS.items())
    return (
        f"usage: python -m populora <command> [arguments]\n\ncommands:\n{rows}\n\n"
        "python -m populora <command> --help shows a command's arguments."
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[command][0])
    sys.argv = [f"python -m populora {command}", *rest]  # argparse names the command in its usage and errors
    return module.main(rest)


if __name__ == "__main__":
    raise SystemExit(main())
