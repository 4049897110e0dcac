"""Tokens the update feeds the decoder for real rollouts: a task's equal prompts shared (before 69cb568) against
that plus the prefix distinct prompts begin with (`populora.rl.micro_batches`), per adapter.

Planning only (no model, deterministic): each adapter's rollouts with signal (advantage not 0), as the update takes
them, planned into micro-batches of `--micro-batch` sequences and `--max-tokens` tokens; fed tokens as
`populora.rl.micro_batches.fed_tokens` counts them (what the decoder embeds, padding included). The old side plans as
the update did before: each prompt group in pieces of `--micro-batch`, the other sequences longest first, unshared.

    python perf/update_fed_tokens.py ../pw-23/results/population/gen00{0,5,9}/rollouts.jsonl \
        --json perf/measured/update_fed_tokens.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from populora.core.io import write_json
from populora.rl.micro_batches import fed_tokens, plan_micro_batches, plan_shared_micro_batches, shared_prompt_groups
from populora.rl.sequences import Sequence, rollout_sequences


def prompts_only(sequences: list[Sequence], max_rows: int, max_tokens: int) -> int:
    """Tokens fed when only equal prompts are shared (the update before the prefix sharing)."""
    fed = 0
    groups, alone = shared_prompt_groups(sequences)
    for members in groups.values():
        longest_first = sorted(members, key=lambda k: (-len(sequences[k].ids), k))
        for start in range(0, len(longest_first), max_rows):
            fed += fed_tokens(sequences, longest_first[start : start + max_rows], True)
    for batch in plan_micro_batches([len(sequences[k].ids) for k in alone], max_rows, max_tokens):
        fed += fed_tokens(sequences, [alone[i] for i in batch], False)
    return fed


def measure(path: Path, max_rows: int, max_tokens: int) -> list[dict]:
    by_adapter: dict[str, list[dict]] = defaultdict(list)
    for line in path.read_text().splitlines():
        rollout = json.loads(line)
        if rollout["advantage"] != 0:
            by_adapter[rollout["adapter"]].append(rollout)
    rows = []
    for adapter, rollouts in sorted(by_adapter.items()):
        sequences = [s for i, r in enumerate(rollouts) for s in rollout_sequences(r["segments"], i, 4096)[0]]
        old = prompts_only(sequences, max_rows, max_tokens)
        plan = plan_shared_micro_batches(sequences, max_rows, max_tokens)
        new = sum(fed_tokens(sequences, batch, True) for batch in plan)
        rows.append(
            {
                "rollouts": str(path),
                "adapter": adapter,
                "with_signal": len(rollouts),
                "tokens": sum(len(s.ids) for s in sequences),
                "fed_prompts_shared": old,
                "fed_prefixes_shared": new,
                "ratio": round(old / new, 3),
                "micro_batches": len(plan),
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rollouts", nargs="+", type=Path, help="rollouts.jsonl files of a run's generations")
    parser.add_argument("--micro-batch", type=int, default=8, help="update.micro_batch")
    parser.add_argument("--max-tokens", type=int, default=4096, help="update.max_tokens_per_micro_batch")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    rows = [row for path in args.rollouts for row in measure(path, args.micro_batch, args.max_tokens)]
    for row in rows:
        print(
            f"{row['rollouts']} {row['adapter']}: {row['with_signal']} rollouts, {row['tokens']} tokens; fed "
            f"{row['fed_prompts_shared']} -> {row['fed_prefixes_shared']} ({row['ratio']}x)"
        )
    roles = {"teacher": [r["ratio"] for r in rows if "teacher" in r["adapter"]]}
    roles["student"] = [r["ratio"] for r in rows if "student" in r["adapter"]]
    summary = {role: round(statistics.median(ratios), 3) for role, ratios in roles.items() if ratios}
    print("median ratio by role:", summary)
    if args.json:
        write_json(args.json, {"rows": rows, "median_ratio": summary, "command": " ".join(sys.argv)})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
