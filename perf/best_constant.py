"""Time the pool's best-constant check (`populora.heldout.ruler.best_constant`) on a ruler's first pick.

    .venv/bin/python perf/best_constant.py --calibration data/pool-v3/calibration.jsonl

The check grades every tried constant (the simple literals and every gold of the type) against every pool task;
`populora.verifier.batched` runs a task's answers as the calls of one sandbox job and keeps verdicts in a cache.
Prints the first check's seconds and a second, cached one's.
"""

from __future__ import annotations

import argparse
import json
import time

from populora.config import VerifySection
from populora.core.io import read_jsonl
from populora.heldout.ruler import best_constant, select
from populora.verifier import sandbox_for


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", required=True, help="a ruler's calibration.jsonl")
    parser.add_argument("--per-type", type=int, default=128)
    parser.add_argument("--per-family", type=int, default=24)
    args = parser.parse_args()
    rows = list(read_jsonl(args.calibration))
    pool = select(
        rows, samples=rows[0]["samples"], low=0.05, high=0.6, per_type=args.per_type, per_family=args.per_family
    )
    config = VerifySection()
    with sandbox_for(config) as box:
        cache: dict = {}
        start = time.perf_counter()
        found = best_constant(pool, config, box, cache)
        first = time.perf_counter() - start
        start = time.perf_counter()
        best_constant(pool, config, box, cache)
        again = time.perf_counter() - start
    print(
        json.dumps(
            {
                "pool_tasks": len(pool),
                "first_s": round(first, 2),
                "cached_s": round(again, 2),
                "best_constant": {k: [v["answer"], v["correct"], v["n"]] for k, v in found.items()},
            }
        )
    )


if __name__ == "__main__":
    main()
