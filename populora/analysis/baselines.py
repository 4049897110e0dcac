"""What a held-out pool gives away without reasoning: the best constant answer and the copy baseline,
per task type, graded by the project's own grader (`populora.heldout.scoring.pool_verdicts`).

    python -m populora.analysis.baselines study/learning/heldout_pool.jsonl --out study/learning/pool_baselines.json
    python -m populora.analysis.baselines data/pool-v3/pool.jsonl --ks 1 2 4 8 16 32 64 \
        --out data/pool-v3/pool_baselines_at_k.json

* **best constant**: one answer given to every task of a type. Candidates: every gold input and output
  in the pool and small literals (`populora.verifier.baselines.constant_candidates`, the ruler's); each is
  graded on every task of the type and the one right most often is the type's best constant (with the
  next few, for the reader).
* **copy**: each task answered with what it shows: a `code_o` task with its input, a `code_i` task with
  its output (the answer a student that learnt to echo would give).
* **best k constants** (`best_at_k`, with `ks`): what pass@k earns without reading the task, k answers a task
  being k different constants, the same k for every task of the type: the share of the type's tasks that the k
  constants chosen greedily (each the one that adds most right tasks) get right. Greedy is exact where no two
  constants are right on one task (most code_o tasks have a single output) and otherwise a lower bound. The
  pass@k curves stand beside it, not beside the best single constant (k tries of one constant are one try).

Written as JSON ({type: {n_tasks, best: {answer, correct, share}, runners_up: [...], copy: {correct,
share}}}); the study analyser prints it beside the pool scores where the plan names the file
(`pool_baselines`). Grading runs every candidate in the sandbox: about a minute for a 128-task pool.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from populora.core.io import write_json
from populora.heldout.scoring import pool_verdicts
from populora.verifier.baselines import constant_answer, constant_candidates


def candidates(pool: list[dict]) -> list[str]:
    """The constants tried: `populora.verifier.baselines.constant_candidates` (the pool ruler's, the same)."""
    return constant_candidates(pool)


def best_k_constants(right: dict[str, set[str]], ks: Sequence[int]) -> dict[str, int]:
    """{k: tasks right} for the k constants picked greedily from `right` (constant -> the task ids it gets right),
    each pick the one adding most tasks not yet right (ties: the smaller answer), so every k's set extends the
    previous one's.

    >>> best_k_constants({"0": {"a", "b"}, "1": {"b", "c"}, "2": {"d"}}, [1, 2, 3, 4])
    {'1': 2, '2': 3, '3': 4, '4': 4}
    """
    covered: set[str] = set()
    left = dict(right)
    counts, picked = {}, 0
    for k in sorted(ks):
        while picked < k and left:
            answer = min(left, key=lambda a: (-len(left[a] - covered), a))
            covered |= left.pop(answer)
            picked += 1
        counts[str(k)] = len(covered)
    return counts


def pool_baselines(pool: list[dict], config=None, *, top: int = 5, ks: Sequence[int] = ()) -> dict:
    """{type: {n_tasks, best, runners_up, copy}} (see the module docstring), with `ks` also `best_at_k`
    ({k: {correct, share}}); `config` a VerifySection (None: the defaults)."""
    answers = candidates(pool)
    rows = [
        {"task_id": t["task_id"], "member": f"const:{k}", "answer": constant_answer(t, a)}
        for k, a in enumerate(answers)
        for t in pool
    ]
    rows += [
        {
            "task_id": t["task_id"],
            "member": "copy",
            "answer": (t["outputs"] if t["type"] == "code_i" else t["inputs"])[0],
        }
        for t in pool
    ]
    table = pool_verdicts(pool, rows, config)
    out = {}
    for task_type in sorted({t["type"] for t in pool}):
        ids = [t["task_id"] for t in pool if t["type"] == task_type]
        scores = sorted(
            ((sum(table[f"const:{k}"].get(i, 0) for i in ids), answer) for k, answer in enumerate(answers)),
            key=lambda pair: (-pair[0], pair[1]),
        )
        ranked = [{"answer": answer, "correct": n, "share": round(n / len(ids), 6)} for n, answer in scores[: top + 1]]
        copied = sum(table["copy"].get(i, 0) for i in ids)
        out[task_type] = {
            "n_tasks": len(ids),
            "best": ranked[0],
            "runners_up": ranked[1:],
            "copy": {"correct": copied, "share": round(copied / len(ids), 6)},
            "candidates": len(answers),
        }
        if ks:
            right = {a: {i for i in ids if table[f"const:{k}"].get(i, 0)} for k, a in enumerate(answers)}
            out[task_type]["best_at_k"] = {
                k: {"correct": n, "share": round(n / len(ids), 6)} for k, n in best_k_constants(right, ks).items()
            }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pool", help="a held-out pool (jsonl, as the heldout_pool stage writes it)")
    parser.add_argument("--out", help="write the JSON here (default: print it)")
    parser.add_argument("--params", default="params.yaml", help="verify.* (sandbox limits) from these params")
    parser.add_argument("--ks", type=int, nargs="*", default=[], help="also the best k constants' share (best_at_k)")
    args = parser.parse_args(argv)
    from populora.config import load_params

    pool = [json.loads(line) for line in Path(args.pool).read_text().splitlines() if line.strip()]
    result = {"pool": args.pool, "by_type": pool_baselines(pool, load_params(args.params).verify, ks=args.ks)}
    if args.out:
        write_json(args.out, result)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
