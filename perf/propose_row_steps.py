"""Run the propose stage and count its decode work: the draws made (steps) and the rows they were made for
(row-steps), which a batch's stopped rows inflate until they leave it (`compact`, docs/engines.md).

    PYTHONPATH=<checkout whose code runs> python perf/propose_row_steps.py --params params.yaml --arm population \
        --gen 000 --base-model results/warm_base --state results/population/init \
        --pairing results/population/gen000/pairing.json --proposals /tmp/p.jsonl --log /tmp/p.log

Arguments are the stage's own (`python -m stages.propose --help`); run it in a run's folder (relative paths).
Prints one line `PROPOSE_ROW_STEPS {"wall_s", "steps", "row_steps"}`. Two checkouts on one run's inputs (the
same params, pairing and adapters) compare old and new code: perf/measured/propose_row_steps.json.
"""

from __future__ import annotations

import json
import runpy
import sys
import time

import populora.lm.sampling as sampling

rows_per_draw: list[int] = []
_draw = sampling._draw


def _counting_draw(logits, *args, **kwargs):
    rows_per_draw.append(int(logits.shape[0]))
    return _draw(logits, *args, **kwargs)


if __name__ == "__main__":
    sampling._draw = _counting_draw
    start = time.perf_counter()
    sys.argv = ["stages.propose", *sys.argv[1:]]
    try:
        runpy.run_module("stages.propose", run_name="__main__")
    except SystemExit as stop:
        if stop.code:
            raise
    wall = round(time.perf_counter() - start, 2)
    print(
        "PROPOSE_ROW_STEPS", json.dumps({"wall_s": wall, "steps": len(rows_per_draw), "row_steps": sum(rows_per_draw)})
    )
