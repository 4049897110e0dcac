"""Stage bench_summary: every benchmark result in one flat DVC metrics file.

    python -m stages.bench_summary --params params.yaml --results results/bench --dynamics results/dynamics \
        --metrics results/metrics.json --headline results/headline.json --progress results/progress.json

`--headline` gets the run's few dozen headline figures (populora/report/headline.py: per group the
students' mean, best and weakest, the baseline, the base and their differences; the held-out pool and
the last solve rate from `--dynamics`), the one DVC metrics file: what `dvc exp show` and
`dvc metrics diff` read. `--metrics` gets every figure below, as a plain output. `--progress` (the
last generation of each arm, which the generation stages kept up to date during the run) is written
whole from the arms' dynamics tables, so an experiment keeps it.

`--results` is the bench stages' folder; the results of `dag.arms`' members and the base model on
`bench.benchmarks` are read from it (`<base|arm>/<benchmark>/<model>.json`).

Keys are stable across runs (see populora/report/metrics.py): a run of one arm describes it under
arm-independent keys (`bench.<b>.mean|best|weakest`, `.students.*`, `.teachers.*`, `.base`), so
`dvc metrics diff baseline population` shows per-benchmark deltas between two one-arm experiments;
a run of both arms has the side-by-side keys (`bench.<b>.population.*`, `bench.<b>.baseline`) and
paired-bootstrap differences (`bench.<b>.diff.*`). Every result adds its `correct` count and 95%
Wilson interval (`bench.<b>.correct.<model>`, `bench.<b>.ci.<model>.low|high`).
"""

from __future__ import annotations

from pathlib import Path

from populora.bench import BenchError
from populora.core.io import read_json, write_json
from populora.core.topology import benchmarked_models, together_benchmarks
from populora.report import DYNAMICS_SUMMARY, DYNAMICS_TABLE
from populora.report.headline import headline_metrics
from populora.report.live import write_progress
from populora.report.metrics import benchmark_metrics, best_weakest_members, read_results, refs_of, score_table
from stages._common import setup, stage_parser


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], arm=False, gen=False)
    parser.add_argument("--results", required=True, help="the bench stages' folder (results/bench)")
    parser.add_argument(
        "--dynamics", required=True, help="the dynamics stages' folder (results/dynamics): <arm>/summary.json"
    )
    parser.add_argument("--metrics", required=True, help="the full metrics JSON")
    parser.add_argument("--headline", required=True, help="the headline metrics JSON (the DVC metrics)")
    parser.add_argument(
        "--progress", required=True, help="progress.json: the last generation of each arm, written whole"
    )
    args = parser.parse_args(argv)
    params, log = setup(args, "bench_summary")
    try:
        results = read_results(
            args.results, benchmarked_models(params), params.bench.benchmarks, together_benchmarks(params)
        )
        metrics = benchmark_metrics(results)
        table = score_table(results)[0]
        chosen = {role: best_weakest_members(table, refs_of(results), role) for role in ("students", "teachers")}
    except (BenchError, OSError, KeyError, ValueError) as error:
        log.error("could not summarise the benchmark results: %s", error)
        return 1
    # the arms' training summaries (the held-out pool, the last solve rate); bench results alone still summarise
    found = {arm: Path(args.dynamics) / arm / DYNAMICS_SUMMARY for arm in params.dag.arms}
    summaries = {arm: read_json(path) for arm, path in found.items() if path.is_file()}
    if len(summaries) < len(found):
        log.warning(
            "no training summary for %s: the headline has no held-out or solve-rate figures for it",
            ", ".join(sorted(set(found) - set(summaries))),
        )
    headline = headline_metrics(metrics, summaries)
    write_json(args.metrics, metrics)
    write_json(args.headline, headline)
    write_json(args.progress, {})  # whole: an earlier run's arms must not stay in it
    for arm in params.dag.arms:
        rows = Path(args.dynamics) / arm / DYNAMICS_TABLE
        if rows.is_file():
            write_progress(args.progress, arm, read_json(rows))
    for role, extremes in chosen.items():
        if extremes:
            log.info("population best %s %s, weakest %s (by overall aggregate)", role[:-1], *extremes)
    log.info(
        "%d metrics from %d results written to %s; %d headline figures to %s",
        len(metrics),
        len(results),
        args.metrics,
        len(headline),
        args.headline,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
