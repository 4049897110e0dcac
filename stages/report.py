"""Stage report: the Markdown report with figures (benchmarks next to the training dynamics).

    python -m stages.report --params params.yaml --results results/bench --metrics results/metrics.json \
        --dynamics results/dynamics --timings results/timings --report results/report

Writes `report.md` (and the same as one page with its figures inlined, `report.html`),
`benchmarks.png`, and (with dynamics) `dynamics.png`, `complexity.png`, `ratings.png` into
`--report` (see populora/report/): the benchmark results of `dag.arms`' members and the base model
on `bench.benchmarks` (`--results`, as bench_summary reads them; the figure and the score table), the statistics bench_summary computed from them (`--metrics`, never computed
again here) and each arm's `<dynamics>/<arm>/dynamics.json` and `heldout_verdicts.json` (the held-out
pool's per-generation table, populora/report/heldout.py), and a table of the per-job timings Snakemake
recorded under `--timings` (populora/report/timings.py; no dependency of the stage, and under DVC
there are none: the report says so), and the warm start's record (`--warm-start`: what it trained on, its loss
curve and cost, populora/report/warm_start.py). The folder is built aside and moved into place at the end.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from populora.bench import BenchError
from populora.core.io import read_json, replace_dir, staging_dir
from populora.core.topology import benchmarked_models, together_benchmarks
from populora.report import DYNAMICS_TABLE, HELDOUT_VERDICTS
from populora.report.markdown import write_report
from populora.report.metrics import read_results
from populora.report.timings import read_timings, stage_timings
from stages._common import setup, stage_parser


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], arm=False, gen=False)
    parser.add_argument("--results", required=True, help="the bench stages' folder (results/bench)")
    parser.add_argument("--metrics", required=True, help="bench_summary's metrics JSON (results/metrics.json)")
    parser.add_argument("--dynamics", help="the dynamics stages' folder (results/dynamics); left out: no dynamics")
    parser.add_argument(
        "--timings", help="Snakemake's per-job benchmark files (results/timings); absent or left out: no timings table"
    )
    parser.add_argument("--warm-start", help="the warm start's record (results/warm_start.json); left out: no section")
    parser.add_argument("--report", required=True, help="report folder")
    args = parser.parse_args(argv)
    params, log = setup(args, "report")
    try:
        results = read_results(
            args.results, benchmarked_models(params), params.bench.benchmarks, together_benchmarks(params)
        )
        metrics = read_json(args.metrics)
        dynamics = (
            {arm: read_json(Path(args.dynamics) / arm / DYNAMICS_TABLE) for arm in params.dag.arms}
            if args.dynamics
            else {}
        )
        heldout = {
            arm: read_json(path)
            for arm in params.dag.arms
            if args.dynamics and (path := Path(args.dynamics) / arm / HELDOUT_VERDICTS).is_file()
        }
        warm_start = read_json(args.warm_start) if args.warm_start else None
    except (BenchError, OSError, ValueError) as error:
        log.error("could not read the report inputs: %s", error)
        return 1
    timings = stage_timings(read_timings(args.timings))
    tmp = staging_dir(args.report)
    try:
        path = write_report(results, metrics, dynamics, tmp, heldout, timings, warm_start)
    except BaseException as error:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(error, BenchError):
            log.error("could not build the report: %s", error)
            return 1
        raise
    replace_dir(tmp, args.report)
    log.info(
        "report of %d results, %d arms' dynamics and %d timed jobs written to %s/%s",
        len(results),
        len(dynamics),
        timings[-1]["jobs"] if timings else 0,
        args.report,
        path.name,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
