"""The physical limit the update is measured against: matmul GFLOP/s at SmolLM2-135M's shapes on this CPU.

One decoder layer's linear maps (q, k, v, o; gate, up, down: 576 -> 576 / 192 / 1536 and back) on `--rows`
token rows, each timed as forward (x W^T) and as the backward's input gradient (dY W), in float32 and in
bfloat16, on 1 and on every thread; the median of `--repeats` rounds. The layer mix's GFLOP/s is its FLOPs
(2 x rows x in x out per product) over the summed time: what a forward+backward over frozen weights could reach.

    python perf/matmul_peak.py --json perf/measured/matmul_peak.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

SHAPES = {
    "q_proj": (576, 576),
    "k_proj": (576, 192),
    "v_proj": (576, 192),
    "o_proj": (576, 576),
    "gate_proj": (576, 1536),
    "up_proj": (576, 1536),
    "down_proj": (1536, 576),
}  # (in, out)


def layer_rate(dtype, rows: int, repeats: int) -> dict:
    import torch

    weights = {name: torch.randn(out, inp, dtype=dtype) * 0.02 for name, (inp, out) in SHAPES.items()}
    inputs = {name: torch.randn(rows, inp, dtype=dtype) for name, (inp, out) in SHAPES.items()}
    grads = {name: torch.randn(rows, out, dtype=dtype) for name, (inp, out) in SHAPES.items()}
    flops = sum(2 * 2 * rows * inp * out for inp, out in SHAPES.values())  # forward + input gradient
    rounds = []
    for _ in range(repeats + 1):  # the first round warms up
        start = time.perf_counter()
        for name in SHAPES:
            torch.nn.functional.linear(inputs[name], weights[name])
            grads[name] @ weights[name]
        rounds.append(time.perf_counter() - start)
    seconds = statistics.median(rounds[1:])
    return {"gflops_per_s": round(flops / seconds / 1e9, 1), "seconds_per_layer": round(seconds, 5)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=512, help="token rows of each product (a micro-batch's tokens)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--json", type=Path, required=True)
    args = parser.parse_args(argv)
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from populora.lm.dtype import runtime_record

    report = {
        "rows": args.rows,
        "repeats": args.repeats,
        "shapes": SHAPES,
        "runtime": runtime_record("bfloat16"),
        "cpus": os.cpu_count(),
        "rates": {},
    }
    for threads in sorted({1, os.cpu_count() or 1}):
        torch.set_num_threads(threads)
        for dtype in (torch.float32, torch.bfloat16):
            key = f"{str(dtype).removeprefix('torch.')}_{threads}_threads"
            report["rates"][key] = layer_rate(dtype, args.rows, args.repeats)
            print(key, report["rates"][key], flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
