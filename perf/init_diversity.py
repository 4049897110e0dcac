"""Should members start apart? Two fresh students per `lora.init_std`, scored on the held-out pool.

With PEFT's init (B = 0, `lora.init_std: 0`) every member starts as the base model: the two students
are clones until their updates differ enough to change a greedy answer (in the second study they were
clones at generation 0 in two runs of six). A small Gaussian B (`init_std > 0`) starts them apart. For
each value this prints the two members' weight distance (populora/population/diversity.py), their
held-out verdict agreement and each one's accuracy against the base model's: what starting apart costs.

    .venv/bin/python perf/init_diversity.py --base-model results/base_model --pool study/learning/heldout_pool.jsonl \
        --init-std 0 0.003 0.01 0.03 --json perf/measured/init_diversity.json
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from populora.config import load_params
from populora.core.io import read_jsonl, write_json
from populora.heldout.scoring import score_members
from populora.lm.adapters import create_adapters, read_state_dict
from populora.lm.engines import load_sampler
from populora.lm.model import load_base, lora_config
from populora.population.agreement import verdict_agreement
from populora.population.diversity import weight_distance
from populora.verifier import sandbox_for


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--base-model", default="results/base_model")
    parser.add_argument("--pool", default="study/learning/heldout_pool.jsonl")
    parser.add_argument("--init-std", type=float, nargs="+", default=[0.0, 0.003, 0.01, 0.03])
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    params = load_params(args.params)
    pool = read_jsonl(args.pool)
    ids = [t["task_id"] for t in pool]
    cfg = params.lora
    rows = []
    with tempfile.TemporaryDirectory() as tmp, sandbox_for(params.verify) as sandbox:
        _, base = load_base(args.base_model)
        folders = {}
        for std in args.init_std:
            out = Path(tmp) / f"std{std}"
            out.mkdir()
            create_adapters(
                base,
                ["student0", "student1"],
                out,
                seeds={"student0": 11, "student1": 12},
                init_std=std,
                lora_cfg=lora_config(cfg.rank, cfg.alpha, cfg.dropout, list(cfg.target_modules)),
            )
            folders |= {f"{std}/student0": out / "student0", f"{std}/student1": out / "student1"}
        tokenizer, model = load_sampler(args.base_model, folders, params)
        start = time.perf_counter()
        _, table = score_members(params, model, tokenizer, pool, [None, *folders], {}, sandbox)
        base_accuracy = sum(table["base"].get(t, 0) for t in ids) / len(ids)
        for std in args.init_std:
            a, b = f"{std}/student0", f"{std}/student1"
            rows.append(
                {
                    "init_std": std,
                    "weight_distance": weight_distance(read_state_dict(folders[a]), read_state_dict(folders[b])),
                    "verdict_agreement": verdict_agreement(table[a], table[b], ids),
                    "agreement_with_base": [verdict_agreement(table[m], table["base"], ids) for m in (a, b)],
                    "accuracy": [sum(table[m].get(t, 0) for t in ids) / len(ids) for m in (a, b)],
                    "base_accuracy": base_accuracy,
                }
            )
            print(rows[-1])
    result = {
        "rows": rows,
        "pool": args.pool,
        "tasks": len(ids),
        "seconds": round(time.perf_counter() - start, 1),
        "command": "python perf/init_diversity.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
