"""What one decode step costs at each batch size: why the sampler drops stopped rows (`compact`).

Loads the base model, prefills `--context` random tokens in batches of each size in `--rows`, then times
`--steps` greedy decode steps (one token a row, HF's dynamic cache) and prints the median per step:

    python perf/decode_rows.py --base-model results/base_model --dtype bfloat16 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> None:
    import torch
    from transformers import DynamicCache

    from populora.lm.model import load_base

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base-model", required=True)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--context", type=int, default=300)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rows", type=int, nargs="+", default=[32, 16, 8, 4, 2])
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    _, model = load_base(args.base_model, dtype=args.dtype, device="cpu")
    model.eval()
    for rows in args.rows:
        ids = torch.randint(100, 20000, (rows, args.context), generator=torch.Generator().manual_seed(0))
        times = []
        with torch.no_grad():
            cache = DynamicCache(config=model.config)
            token = (
                model(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1).logits[:, -1].argmax(-1)
            )
            attention = torch.ones(rows, args.context, dtype=torch.long)
            for step in range(args.steps):
                attention = torch.cat([attention, torch.ones(rows, 1, dtype=torch.long)], 1)
                started = time.perf_counter()
                logits = model(
                    input_ids=token[:, None],
                    attention_mask=attention,
                    position_ids=torch.full((rows, 1), args.context + step),
                    past_key_values=cache,
                    use_cache=True,
                ).logits
                token = logits[:, -1].argmax(-1)
                times.append(time.perf_counter() - started)
        print(f"{rows} rows: median decode step {1000 * statistics.median(times):.1f} ms", flush=True)


if __name__ == "__main__":
    main()
