"""What a model's CRUXEval answers are, beyond right or wrong: format failures and copying.

A score can rise for reasons that are not reasoning: fewer truncated or unparseable answers, or
answers that copy what the prompt shows. In CRUXEval-O rows 0-199, 35 gold outputs equal the
call's first argument, so echoing the input scores 17.5%, more than any 135M model does. These
counts, per model and benchmark (`answer_diagnostics`), let a reader see what moved:

* `correct`, `wrong` (a parsed answer graded wrong), `truncated` (the answer hit the token cap),
  `no_answer` (no answer block could be parsed; truncated ones included);
* `copies_input`: the answer is what the prompt shows, verbatim up to whitespace (CRUXEval-O:
  the call's argument list; CRUXEval-I: the output);
* `copies_argument`: the answer's value equals one value shown (CRUXEval-O: one argument of the
  call; CRUXEval-I: one of the answer's arguments equals the output);
* `mean_answer_tokens`: generated tokens per answer;
* `copy_ceiling` (per benchmark, not per model): the share of problems a pure copier would
  solve, counted by value without running anything (CRUXEval-O: the gold output equals an
  argument; CRUXEval-I, a lower bound: the gold input is the output itself, so passing the
  output back is right).

    python -m populora.bench.diagnostics results/bench/population/cruxeval_o/population-student0/samples.jsonl
    python -m populora.bench.diagnostics --flags SAMPLES.jsonl   # which problems, not how many
    python -m populora.bench.diagnostics --training results/population   # the arm's training answers

The same counts over a training run's answers (`training_diagnostics`: per generation and task
type, from each generation's solve_tasks.jsonl and graded.jsonl, plus `copies` and
`copies_correct`) show whether copying grew while the students trained, and whether the reward
paid for it, not only in the benchmark.

`answer_flags` keeps the problems behind each count (task ids), so a study can score a model
with its copied answers left out (`populora.analysis.runs.without_copies`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from statistics import mean

from populora.core.literals import argument_values, literal_value, output_is_an_argument, same_value


def _squash(text: str | None) -> str | None:
    return None if text is None else "".join(text.split())


def copies(sample: dict) -> tuple[bool, bool]:
    """(copies_input, copies_argument) of one answer (see the module docstring)."""
    answer = sample.get("answer")
    if answer is None:
        return False, False
    if sample["type"] == "code_o":
        shown = sample["input"]
        value = literal_value(answer)
        return _squash(answer) == _squash(shown), any(same_value(value, arg) for arg in argument_values(shown))
    shown = sample["gold_output"]
    output = literal_value(shown)
    return _squash(answer) == _squash(shown), any(same_value(arg, output) for arg in argument_values(answer))


def copy_solves(sample: dict) -> bool:
    """Whether copying what the prompt shows would be correct on this problem."""
    if sample["type"] == "code_o":
        return output_is_an_argument(sample["input"], sample["gold_output"])
    output = literal_value(sample["gold_output"])
    given = argument_values(sample["input"])
    return len(given) == 1 and same_value(given[0], output)


FLAGS = ("correct", "truncated", "no_answer", "copies_input", "copies_argument")


def answer_flags(samples: list[dict]) -> dict[str, list[str]]:
    """Per flag of `answer_diagnostics`, the sorted task ids it holds for (the counts' problems)."""
    held: dict[str, list[str]] = {flag: [] for flag in FLAGS}
    for row, sample in enumerate(samples):
        copies_input, copies_argument = copies(sample)
        values = {
            "correct": bool(sample["correct"]),
            "truncated": bool(sample.get("truncated")),
            "no_answer": sample.get("answer") is None,
            "copies_input": copies_input,
            "copies_argument": copies_argument,
        }
        for flag, value in values.items():
            if value:
                held[flag].append(str(sample.get("task_id", row)))  # hand-made samples may have no id
    return {flag: sorted(ids) for flag, ids in held.items()}


def copied_ids(flags: dict[str, list[str]]) -> set[str]:
    """The ids of `answer_flags` whose answer copies the input or one argument (each once): the
    one rule for "a copy" that the training counts and the study's copies-wrong scores share."""
    return set(flags.get("copies_input", ())) | set(flags.get("copies_argument", ()))


def answer_diagnostics(samples: list[dict]) -> dict[str, float]:
    """The counts of the module docstring over one model's graded CRUXEval samples."""
    flags = answer_flags(samples)
    n = len(samples)
    return {
        "n": n,
        **{flag: len(ids) for flag, ids in flags.items()},
        "wrong": sum(s.get("answer") is not None and not s["correct"] for s in samples),
        "mean_answer_tokens": round(mean(s.get("tokens") or 0 for s in samples), 3) if samples else 0.0,
        "copy_ceiling": sum(copy_solves(s) for s in samples),
    }


TRAINING_TYPES = ("code_o", "code_i")  # code_f answers are programs: nothing shown to copy


def training_samples(tasks: list[dict], graded: list[dict]) -> list[dict]:
    """One generation's graded answers to code_o / code_i tasks in the benchmark's sample shape
    (`input`: the input the task showed, `gold_output`: its output), so the counts above apply
    to them unchanged. `tasks` are the tasks the students saw (solve_tasks.jsonl)."""
    by_id = {t["task_id"]: t for t in tasks}
    samples = []
    for answer in graded:
        task = by_id.get(answer["task_id"])
        if answer["type"] not in TRAINING_TYPES or task is None or not task["inputs"] or not task["outputs"]:
            continue
        samples.append(
            {
                "task_id": answer.get("answer_id", answer["task_id"]),
                "type": answer["type"],
                "answer": answer.get("answer"),
                "correct": bool(answer.get("correct")),
                "truncated": answer.get("parse_reason") == "truncated",
                "tokens": answer.get("tokens"),
                "input": task["inputs"][0],
                "gold_output": task["outputs"][0],
            }
        )
    return samples


def training_diagnostics(arm_dir: str | Path) -> dict[str, dict[str, dict]]:
    """`{genNNN: {code_o|code_i: answer_diagnostics}}` over an arm's results folder (every
    genNNN/ holding solve_tasks.jsonl and graded.jsonl), in generation order."""
    out = {}
    for gen in sorted(Path(arm_dir).glob("gen[0-9][0-9][0-9]")):
        if not (gen / "solve_tasks.jsonl").is_file() or not (gen / "graded.jsonl").is_file():
            continue
        samples = training_samples(_read(gen / "solve_tasks.jsonl"), _read(gen / "graded.jsonl"))
        out[gen.name] = {t: _with_copy_totals([s for s in samples if s["type"] == t]) for t in TRAINING_TYPES}
    return out


def _with_copy_totals(samples: list[dict]) -> dict:
    """`answer_diagnostics` plus `copies` (answers that copy the input or an argument, each once)
    and `copies_correct` (those of them graded right: copying the reward paid for)."""
    flags = answer_flags(samples)
    copied = copied_ids(flags)
    return {**answer_diagnostics(samples), "copies": len(copied), "copies_correct": len(copied & set(flags["correct"]))}


def _read(path: str | Path) -> list[dict]:
    with open(path) as handle:
        return [json.loads(line) for line in handle if line.strip()]


def main(argv: list[str] | None = None) -> int:
    args = list(argv if argv is not None else sys.argv[1:])
    if args[:1] == ["--flags"]:
        for path in args[1:]:
            print(json.dumps(answer_flags(_read(path)), sort_keys=True))
        return 0
    if args[:1] == ["--training"]:
        for path in args[1:]:
            print(json.dumps(training_diagnostics(path), sort_keys=True))
        return 0
    for path in args:
        print(path, json.dumps(answer_diagnostics(_read(path)), sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
