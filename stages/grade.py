"""Stage grade: check the students' extracted answers against the verified tasks, in the sandbox.

    python -m stages.grade --tasks results/population/gen000/solve_tasks.jsonl \
        --answers results/population/gen000/answers.jsonl --out results/population/gen000/graded.jsonl \
        [--params params.yaml]

Answer rows: {"task_id", "answer", ...} (answer: an output repr for code_o, an argument list for
code_i, a program for code_f; null when the student's output was malformed). Output rows: the
answer row plus "correct", "reason" (null when correct, else populora.verifier.GRADE_REASONS) and
"reason_detail". Task rows are verify output rows; invalid ones are ignored. The sandbox settings
(CPU-time limit and wall-clock backstop), the isolation requirement (verify.required_layers; exit
code 3 when refused) and the log of its layers are as for stages.verify (both through stages/_sandbox.py).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from populora.core.io import write_jsonl
from populora.verifier import grade_rows
from stages._sandbox import REFUSED, add_common_args, progress_bar, read_rows, setup, start_sandbox


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", required=True, help="verified task rows (JSONL)")
    parser.add_argument("--answers", required=True, help="extracted answers (JSONL)")
    add_common_args(parser)
    args = parser.parse_args(argv)
    config, log = setup(args, "grade")
    tasks, answers = read_rows(args.tasks), read_rows(args.answers)
    box = start_sandbox(config, log)
    if box is None:
        return REFUSED
    with box:
        start = time.perf_counter()
        bar, update = progress_bar(len(answers), "grade", "answers")
        with bar:
            out = grade_rows(tasks, answers, config, sandbox=box, progress=update)
        elapsed = time.perf_counter() - start
    write_jsonl(args.out, out)
    correct = sum(row["correct"] for row in out)
    reasons = Counter(row["reason"] for row in out if not row["correct"])
    log.info(
        "%d answers, %d correct in %.1f s; not correct: %s", len(out), correct, elapsed, dict(reasons.most_common())
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
