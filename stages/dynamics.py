"""Stage dynamics: one arm's per-generation metrics as a DVC plots table, a summary, and its family tree.

    python -m stages.dynamics --params params.yaml --arm population \
        --metrics results/population/gen000/metrics.json results/population/gen001/metrics.json \
        --heldout results/population/gen000/heldout.json results/population/gen001/heldout.json \
        --heldout-base results/heldout/base.json --state results/population/gen001/checkpoint \
        --dynamics results/dynamics/population/dynamics.json --update-steps results/dynamics/population/update_steps.json \
        --summary results/dynamics/population/summary.json --family-tree results/dynamics/population/family_tree.png \
        --heldout-verdicts results/dynamics/population/heldout_verdicts.json --progress results/progress.json

The two tables are the live history the checkpoint and heldout stages kept while the run went on
(populora/report/live.py), written here whole from every generation's files: the final word, whatever
an interruption left there. summary.json holds the last generation's values plus means over generations under stable keys,
so `dvc metrics diff` compares arms and experiments directly. Each generation's row carries its
held-out accuracies (`heldout.<member|students|teachers|base>.accuracy`, the base's the same in every
row); `--heldout-verdicts` gets the per-task verdicts of every generation and of the base
(`{"base": {...}, "generations": [{slot: {task_id: 0|1}}, ...], "born": [{slot: {member, parents,
verdicts}}, ...], "roles": ...}`: each generation's members as trained, and the children evolution made
after it), which the report pairs across arms.
"""

from __future__ import annotations

from populora.core.io import read_json, write_json
from populora.core.state import load_state
from populora.report.figures import draw_family_tree
from populora.report.live import plot_table, write_progress, write_tables
from populora.report.summary import arm_summary
from stages._common import setup, stage_parser


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], gen=False)
    parser.add_argument("--metrics", nargs="+", required=True, help="per-generation metrics.json, in order")
    parser.add_argument("--heldout", nargs="+", required=True, help="per-generation heldout.json, in order")
    for flag in (
        "--heldout-base",
        "--state",
        "--dynamics",
        "--update-steps",
        "--summary",
        "--family-tree",
        "--heldout-verdicts",
        "--progress",
    ):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "dynamics")
    if len(args.heldout) != len(args.metrics):
        log.error(
            "%d metrics files but %d held-out scores: one of each per generation", len(args.metrics), len(args.heldout)
        )
        return 1
    base = read_json(args.heldout_base)
    scores = [read_json(path) for path in args.heldout]
    rows = plot_table(
        [read_json(path) | score["metrics"] | base["metrics"] for path, score in zip(args.metrics, scores)]
    )
    write_tables(args.dynamics, args.update_steps, rows)  # the live history, whole (populora/report/live.py)
    write_progress(args.progress, args.arm, rows)
    write_json(
        args.heldout_verdicts,
        {
            "base": base["verdicts"].get("base", {}),
            "generations": [score["verdicts"] for score in scores],
            "born": [score.get("born", {}) for score in scores],
            "members": [score.get("members", {}) for score in scores],
            "best_constant": base.get("best_constant", {}),
            "raw_base": base.get("raw_base") or {},
            "base_pass_rates": (base.get("pass_rates") or {}).get("base", {}),
            "pass_rates": [score.get("pass_rates") or {} for score in scores],
            "roles": scores[-1].get("roles", {}) if scores else {},
        },
    )
    state = load_state(args.state)
    write_json(args.summary, arm_summary(rows, {"teachers": list(state.teachers), "students": list(state.students)}))
    draw_family_tree(state.lineage, args.family_tree)
    log.info("%d generations summarised; lineage of %d events drawn", len(rows), len(state.lineage))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
