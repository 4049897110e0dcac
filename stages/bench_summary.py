"""Stage bench_summary: every benchmark result in one flat DVC metrics file.

    python -m stages.bench_summary --params params.yaml \
        --results results/bench/base/gsm8k.json results/bench/population-teacher0/gsm8k.json ... \
        --out results/metrics.json

Keys are stable across runs (`bench.<b>.population.mean`, `bench.<b>.baseline`, `bench.<b>.base`,
`bench.<b>.member.<model>`, `avg.{code,math,overall}.*`; see populora/bench/summary.py), so
`dvc metrics diff A B` shows per-benchmark deltas between two experiments. A run with only one
arm gets only that arm's keys.
"""

from __future__ import annotations

from populora.bench import BenchError
from populora.bench.summary import best_weakest_members, score_table, summarize
from populora.io import read_json, write_json
from stages._common import setup, stage_parser


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], arm=False, gen=False)
    parser.add_argument("--results", nargs="+", required=True, help="per-(model, benchmark) result JSONs")
    parser.add_argument("--out", required=True, help="the metrics JSON")
    args = parser.parse_args(argv)
    params, log = setup(args, "bench_summary")
    try:
        results = [read_json(path) for path in args.results]
        metrics = summarize(results)
        extremes = best_weakest_members(score_table(results)[0])
    except (BenchError, OSError, KeyError, ValueError) as error:
        log.error("could not summarise the benchmark results: %s", error)
        return 1
    write_json(args.out, metrics)
    if extremes:
        log.info("population best member %s, weakest %s (by overall aggregate)", *extremes)
    log.info("%d metrics from %d results written to %s", len(metrics), len(results), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
