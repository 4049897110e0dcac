"""Stage bench_summary: every benchmark result in one flat DVC metrics file.

    python -m stages.bench_summary --params params.yaml --results results/bench --metrics results/metrics.json

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

from populora.bench import BenchError
from populora.config import benchmarked_models
from populora.core.io import write_json
from populora.report.metrics import benchmark_metrics, best_weakest_members, read_results, refs_of, score_table
from stages._common import setup, stage_parser


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], arm=False, gen=False)
    parser.add_argument("--results", required=True, help="the bench stages' folder (results/bench)")
    parser.add_argument("--metrics", required=True, help="the metrics JSON")
    args = parser.parse_args(argv)
    params, log = setup(args, "bench_summary")
    try:
        results = read_results(args.results, benchmarked_models(params), params.bench.benchmarks)
        metrics = benchmark_metrics(results)
        table = score_table(results)[0]
        chosen = {role: best_weakest_members(table, refs_of(results), role) for role in ("students", "teachers")}
    except (BenchError, OSError, KeyError, ValueError) as error:
        log.error("could not summarise the benchmark results: %s", error)
        return 1
    write_json(args.metrics, metrics)
    for role, extremes in chosen.items():
        if extremes:
            log.info("population best %s %s, weakest %s (by overall aggregate)", role[:-1], *extremes)
    log.info("%d metrics from %d results written to %s", len(metrics), len(results), args.metrics)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
