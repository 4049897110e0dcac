"""Time one child per evolution operator on an adapter shaped like Qwen2.5-7B with LoRA on all linears.

28 layers x (q, k, v, o, gate, up, down) = 196 modules, rank 16 by default (~40 M adapter
parameters). Factors are random and B is non-zero, like a trained adapter.

    .venv/bin/python perf/operators.py --repeats 5 --json results/perf_operators.json
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from populora.core.io import write_json
from populora.population.operators import CROSSOVERS, MUTATIONS, make_child

# (submodule, d_in, d_out) of Qwen2.5-7B: hidden 3584, 4 KV heads x 128, intermediate 18944
QWEN25_7B_LINEARS = [
    ("self_attn.q_proj", 3584, 3584),
    ("self_attn.k_proj", 3584, 512),
    ("self_attn.v_proj", 3584, 512),
    ("self_attn.o_proj", 3584, 3584),
    ("mlp.gate_proj", 3584, 18944),
    ("mlp.up_proj", 3584, 18944),
    ("mlp.down_proj", 18944, 3584),
]


def qwen_like_adapter(seed: int, rank: int = 16, layers: int = 28, dtype=torch.float32) -> dict[str, torch.Tensor]:
    """Random PEFT-style state dict with trained-looking (non-zero) B factors."""
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for layer in range(layers):
        for name, d_in, d_out in QWEN25_7B_LINEARS:
            prefix = f"base_model.model.model.layers.{layer}.{name}"
            bound = 1.0 / d_in**0.5  # PEFT's kaiming-uniform range for A
            sd[f"{prefix}.lora_A.weight"] = ((torch.rand(rank, d_in, generator=g) * 2 - 1) * bound).to(dtype)
            sd[f"{prefix}.lora_B.weight"] = (1e-3 * torch.randn(d_out, rank, generator=g)).to(dtype)
    return sd


def time_operator(op: str, parents, repeats: int) -> list[float]:
    args = parents if op in CROSSOVERS else parents[:1]
    make_child(args, op, seed=0)  # warm-up (allocator, LAPACK workspaces)
    times = []
    for seed in range(1, repeats + 1):
        start = time.perf_counter()
        make_child(args, op, seed=seed)
        times.append(time.perf_counter() - start)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--layers", type=int, default=28)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="float32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    parser.add_argument("--operators", nargs="*", default=sorted(MUTATIONS) + sorted(CROSSOVERS))
    parser.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = getattr(torch, args.dtype)
    parents = [
        {k: v.to(args.device) for k, v in qwen_like_adapter(s, args.rank, args.layers, dtype).items()} for s in (0, 1)
    ]
    n_params = sum(t.numel() for t in parents[0].values())
    print(
        f"adapter: {len(parents[0]) // 2} modules, rank {args.rank}, {n_params / 1e6:.1f} M params, "
        f"{args.dtype}, device {args.device}, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print(f"{'operator':<18} {'kind':<9} {'median s':>9} {'min s':>7} {'max s':>7}")
    rows = {}
    for op in args.operators:
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        times = time_operator(op, parents, args.repeats)
        kind = "crossover" if op in CROSSOVERS else "mutation"
        rows[op] = {
            "kind": kind,
            "median_s": statistics.median(times),
            "min_s": min(times),
            "max_s": max(times),
            "times_s": times,
        }
        print(f"{op:<18} {kind:<9} {rows[op]['median_s']:>9.3f} {min(times):>7.3f} {max(times):>7.3f}")
    if args.json:
        write_json(
            args.json,
            {
                "adapter": {
                    "modules": len(parents[0]) // 2,
                    "rank": args.rank,
                    "layers": args.layers,
                    "params": n_params,
                    "dtype": args.dtype,
                },
                "device": args.device,
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "machine": platform.processor() or platform.machine(),
                "repeats": args.repeats,
                "operators": rows,
            },
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
