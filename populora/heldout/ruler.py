"""Pool v2: a held-out pool that measures reasoning, not an input prior, built by one command.

    python -m populora.heldout.ruler --params params.yaml --base-model results/base_model \
        --source study/learning/heldout_pool.jsonl --out study/pool-v2

Steps (each count is kept in `construction.json`):

1. **Candidates** (`populora/heldout/candidates.py`): template families with their constants and
   arguments drawn at random, and the base model's own programs (`--source`) with typed random inputs.
2. **Verified** in the sandbox (gold outputs; invalid, nondeterministic and copyable tasks dropped);
   a `code_o` output longer than `MAX_OUTPUT_CHARS` is dropped (it would not fit the answer budget).
3. **No constant passes**: every task is graded against the answers a model could give without reading
   it (`constant_answers`: simple literals, the candidates' own most frequent gold inputs and outputs,
   the output handed back as the input, the input copied as the output); a task any of them solves is
   dropped.
4. **Calibrated on the base model**: `--samples` answers at temperature 1 per task (the solver's prompt
   with one worked example); a task stays when the base solves it `--low` to `--high` of the time
   (default 5-60%), so a gain and a loss can both show. At most one task per program text and type, at most
   `--per-family` of one source per type, up to `--per-type` per type.

Outputs in `--out`: `pool.jsonl` (the pool, with worked examples and the base's calibration pass rate),
`calibration.jsonl` (every calibrated task's counts), `construction.json` (command, seeds, counts per
step, the best constant answer's and the copy baseline's score on the final pool, the base model's
greedy and pass-rate scores).
"""

from __future__ import annotations

import argparse
import ast
import logging
import random
import sys
from collections import Counter
from pathlib import Path

from populora.core.io import read_jsonl, write_json, write_jsonl
from populora.heldout.candidates import family_candidates, redraw_inputs, split_arguments
from populora.heldout.pool import attach_examples, verified_seeds
from populora.selfplay.tasks import is_copyable
from populora.verifier import grade_rows, verify_rows

MAX_OUTPUT_CHARS = 60  # a code_o answer budget of 48 tokens: 99% of CRUXEval's gold answers fit 40
SIMPLE_VALUES = ("0", "1", "-1", "2", "3", "5", "10", "100", "''", "'a'", "'hello'", "'abc'", "[]", "[0]", "[1]",
                 "[1, 2, 3]", "[0, 2, 4]", "{}", "True", "False", "None", "()", "'HeLLo'", "[1, 2, 3, 4]")
TOP_GOLD = 10  # the candidates' most frequent gold inputs/outputs tried as constants, per type
log = logging.getLogger("ruler")


def arity(program: str) -> int | None:
    """Positional parameters of `f` (None when the program has no plain `def f`)."""
    try:
        for node in ast.parse(program).body:
            if isinstance(node, ast.FunctionDef) and node.name == "f":
                return len(node.args.args)
    except (SyntaxError, ValueError, RecursionError):
        return None
    return None


def constant_answers(task: dict, frequent: dict[str, list[str]]) -> list[str]:
    """Answers to `task` given without reading it, plus the copy answers that read only what it shows.

    code_o: simple literals, the most frequent gold outputs, and the input (each argument, and all of
    them). code_i: simple literals as every argument, the most frequent gold inputs of the same arity,
    and the output handed back as the input (one argument, or repeated for each)."""
    n = arity(task["program"]) or 1
    if task["type"] == "code_o":
        args = split_arguments(task["inputs"][0]) or []
        return list(dict.fromkeys([*SIMPLE_VALUES, *frequent["code_o"], *(repr(a) for a in args), task["inputs"][0]]))
    outputs = task.get("outputs") or []
    handed_back = [", ".join([outputs[0]] * n)] if outputs else []
    same_arity = [a for a in frequent["code_i"] if len(split_arguments(a) or []) == n]
    return list(dict.fromkeys([*(", ".join([v] * n) for v in SIMPLE_VALUES), *same_arity, *handed_back]))


def frequent_golds(tasks: list[dict], top: int = TOP_GOLD) -> dict[str, list[str]]:
    """The most frequent gold outputs of the code_o tasks and gold inputs of the code_i tasks (at most
    `top` of each, every one the gold of at least two tasks)."""
    def common(values):
        return [v for v, n in Counter(values).most_common(top) if n >= 2]

    return {"code_o": common(t["outputs"][0] for t in tasks if t["type"] == "code_o"),
            "code_i": common(t["inputs"][0] for t in tasks if t["type"] == "code_i")}


def constant_verdicts(tasks: list[dict], answers: dict[str, list[str]], config, sandbox) -> dict[str, list[str]]:
    """task_id -> the answers (from `answers[task_id]`) the grader accepts."""
    rows = [{"task_id": t["task_id"], "answer": a, "answer_id": f"{t['task_id']}#{k}"}
            for t in tasks for k, a in enumerate(answers[t["task_id"]])]
    graded = grade_rows([{**t, "valid": True} for t in tasks], rows, config, sandbox=sandbox)
    passed: dict[str, list[str]] = {t["task_id"]: [] for t in tasks}
    for row in graded:
        if row.get("correct"):
            passed[row["task_id"]].append(row["answer"])
    return passed


def best_constant(pool: list[dict], config, sandbox) -> dict[str, dict]:
    """Per type, the single answer that solves the most pool tasks (tried: the simple literals and every
    gold output/input of the pool used for every task of its type), with its count; and the copy
    baseline (each task answered with what it shows: the input as output, the output as input)."""
    out = {}
    for task_type in ("code_o", "code_i"):
        tasks = [t for t in pool if t["type"] == task_type]
        if not tasks:
            continue
        golds = {t["outputs"][0] if task_type == "code_o" else t["inputs"][0] for t in tasks}
        tried = list(dict.fromkeys([*SIMPLE_VALUES, *sorted(golds)]))
        per_task = {}
        for t in tasks:
            n = 1 if task_type == "code_o" else (arity(t["program"]) or 1)
            per_task[t["task_id"]] = [", ".join([v] * n) if n > 1 and len(split_arguments(v) or [0]) == 1 else v
                                      for v in tried]
        passed = constant_verdicts(tasks, per_task, config, sandbox)
        counts = Counter(tried[per_task[tid].index(a)] for tid, answers in passed.items() for a in dict.fromkeys(answers))
        # ties go to the answer tried first: the result may not depend on hashing order
        answer = min(tried, key=lambda v: (-counts[v], tried.index(v)))
        correct = counts[answer]
        copy = {t["task_id"]: [t["inputs"][0] if task_type == "code_o" else t["outputs"][0]] for t in tasks}
        copied = sum(bool(v) for v in constant_verdicts(tasks, copy, config, sandbox).values())
        out[task_type] = {"answer": answer, "correct": correct, "n": len(tasks), "accuracy": correct / len(tasks),
                          "copy_correct": copied, "copy_accuracy": copied / len(tasks)}
    return out


def source_group(task: dict) -> str:
    """`family:<name>` for a template family's task, `model` for one of the base model's programs."""
    return task["source"] if task["source"].startswith("family:") else "model"


def select(calibrated: list[dict], *, samples: int, low: float, high: float, per_type: int, per_family: int,
           seed: int) -> list[dict]:
    """Tasks the base solved `low`..`high` of the time; one per program and type; a cap per source and type;
    in a seeded order that takes sources round-robin (no family fills the pool)."""
    rng = random.Random(seed)
    keep = [t for t in calibrated if low <= t["base_correct"] / samples <= high]
    rng.shuffle(keep)
    out, programs, per_source = [], set(), Counter()
    for task_type in ("code_o", "code_i"):
        by_source: dict[str, list[dict]] = {}
        for t in keep:
            if t["type"] == task_type:
                by_source.setdefault(source_group(t), []).append(t)
        taken = 0
        while taken < per_type and any(by_source.values()):
            for source in sorted(by_source):
                if not by_source[source] or taken >= per_type:
                    continue
                t = by_source[source].pop()
                key = (t["program"], task_type)  # exact text: a family's tasks differ in their constants
                limit = per_family if source != "model" else per_type
                if key in programs or per_source[(source, task_type)] >= limit:
                    continue
                programs.add(key)
                per_source[(source, task_type)] += 1
                out.append(t)
                taken += 1
    return out


def calibration_order(tasks: list[dict], seed: int) -> list[dict]:
    """Tasks in the order they are calibrated: seeded, sources taken in turn within each type and the types
    alternated, so that however early calibration stops, what it measured is spread over every family."""
    rng = random.Random(seed)
    queues: dict[tuple[str, str], list[dict]] = {}
    for task in tasks:
        queues.setdefault((task["type"], source_group(task)), []).append(task)
    for queue in queues.values():
        rng.shuffle(queue)
    order, keys = [], sorted(queues, key=lambda key: (key[1], key[0]))  # (source, type): the types alternate
    while any(queues.values()):
        for key in keys:
            if queues[key]:
                order.append(queues[key].pop())
    return order


def calibrate(tasks: list[dict], done: dict[str, int], measure, *, chunk: int, enough) -> dict[str, int]:
    """`done` (task_id -> base correct) extended chunk by chunk (`measure(chunk_tasks)` -> {task_id: correct})
    over `tasks` in order, skipping what `done` holds and types `enough(done)` says are full. Returns `done`."""
    pending = [t for t in tasks if t["task_id"] not in done]
    while pending:
        full = enough(done)
        pending = [t for t in pending if t["type"] not in full]
        if not pending:
            break
        batch, pending = pending[:chunk], pending[chunk:]
        done.update(measure(batch))
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--overlay", nargs="*", default=[], help="params overlays applied in order (the study's answer budget)")
    parser.add_argument("--base-model", default="results/base_model")
    parser.add_argument("--source", default="study/learning/heldout_pool.jsonl", help="a pool the base model proposed")
    parser.add_argument("--out", required=True)
    parser.add_argument("--candidates-per-family", type=int, default=24)
    parser.add_argument("--draws-per-program", type=int, default=2)
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--low", type=float, default=0.05)
    parser.add_argument("--high", type=float, default=0.60)
    parser.add_argument("--per-type", type=int, default=128)
    parser.add_argument("--per-family", type=int, default=12, help="at most this many tasks of one family per type")
    parser.add_argument("--chunk", type=int, default=32, help="tasks calibrated between two checkpoints of calibration.jsonl")
    parser.add_argument("--max-calibrated", type=int, default=None, help="stop after this many tasks (the cost bound)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import yaml

    from populora.config import merge, parse_params
    from populora.heldout.scoring import pass_rates, score_members
    from populora.lm.dtype import runtime_record
    from populora.lm.engines import load_sampler
    from populora.verifier import sandbox_for

    raw = yaml.safe_load(Path(args.params).read_text())
    for overlay in args.overlay:
        raw = merge(raw, yaml.safe_load(Path(overlay).read_text()))
    params = parse_params(raw, args.params)
    out = Path(args.out)
    counts: dict[str, Counter] = {}
    source = read_jsonl(args.source)
    candidates = family_candidates(args.candidates_per_family, args.seed) + redraw_inputs(
        source, random.Random(args.seed), per_program=args.draws_per_program)
    counts["candidates"] = Counter(t["type"] for t in candidates)
    with sandbox_for(params.verify) as sandbox:
        verified = verify_rows(candidates, params.verify, sandbox=sandbox)
        fields = ("task_id", "type", "program", "inputs", "outputs", "message", "source")
        tasks = [{k: t.get(k) for k in fields} for t in verified if t["valid"] and not is_copyable(t)
                 and not (t["type"] == "code_o" and len(t["outputs"][0]) > MAX_OUTPUT_CHARS)]
        counts["verified"] = Counter(t["type"] for t in tasks)
        frequent = frequent_golds(tasks)
        passed = constant_verdicts(tasks, {t["task_id"]: constant_answers(t, frequent) for t in tasks}, params.verify, sandbox)
        tasks = [t for t in tasks if not passed[t["task_id"]]]
        counts["no_constant_passes"] = Counter(t["type"] for t in tasks)
        seeds = verified_seeds(params, sandbox)
        tasks = calibration_order(attach_examples(tasks, seeds, params.solve.worked_examples, args.seed), args.seed)
        if args.max_calibrated is not None:
            tasks = tasks[: args.max_calibrated]
        by_id = {t["task_id"]: t for t in tasks}
        checkpoint = out / "calibration.jsonl"
        # a killed calibration resumes: what it measured is kept, task by task
        done = {row["task_id"]: row["base_correct"] for row in (read_jsonl(checkpoint) if checkpoint.is_file() else [])
                if row["task_id"] in by_id and row.get("samples") == args.samples}
        tokenizer, model = load_sampler(args.base_model, {}, params)

        def measure(batch: list[dict]) -> dict[str, int]:
            rates = pass_rates(params, model, tokenizer, batch, [None], sandbox, samples=args.samples, seed=args.seed)["base"]
            new = {tid: round(rate * args.samples) for tid, rate in rates.items()}
            rows = [{**by_id[tid], "base_correct": done_count, "samples": args.samples}
                    for tid, done_count in {**done, **new}.items()]
            write_jsonl(checkpoint, rows)
            log.info("calibrated %d tasks; in the window: %s", len(rows), dict(Counter(
                r["type"] for r in rows if args.low <= r["base_correct"] / args.samples <= args.high)))
            return new

        def enough(measured: dict[str, int]) -> set[str]:
            rows = [{**by_id[tid], "base_correct": c} for tid, c in measured.items()]
            chosen = Counter(t["type"] for t in select(rows, samples=args.samples, low=args.low, high=args.high,
                                                       per_type=args.per_type, per_family=args.per_family, seed=args.seed))
            return {tt for tt in ("code_o", "code_i") if chosen[tt] >= args.per_type}

        done = calibrate(tasks, done, measure, chunk=args.chunk, enough=enough)
        calibrated = [{**by_id[tid], "base_correct": c, "samples": args.samples} for tid, c in done.items()]
        counts["calibrated"] = Counter(t["type"] for t in calibrated)
        pool = select(calibrated, samples=args.samples, low=args.low, high=args.high, per_type=args.per_type,
                      per_family=args.per_family, seed=args.seed)
        pool = [{**t, "task_id": f"heldout-{t['type']}-{i:03d}", "source_task": t["task_id"]}
                for task_type in ("code_o", "code_i")
                for i, t in enumerate(sorted((p for p in pool if p["type"] == task_type), key=lambda p: p["task_id"]))]
        counts["calibrated_in_range"] = Counter(t["type"] for t in calibrated
                                                if args.low <= t["base_correct"] / args.samples <= args.high)
        counts["pool"] = Counter(t["type"] for t in pool)
        constant = best_constant(pool, params.verify, sandbox)
        base_metrics, _ = score_members(params, model, tokenizer, pool, [None], {}, sandbox)
    write_jsonl(out / "pool.jsonl", pool)
    write_json(out / "construction.json", {
        "command": "python -m populora.heldout.ruler " + " ".join(argv if argv is not None else sys.argv[1:]),
        "counts": {step: dict(sorted(c.items())) for step, c in counts.items()},
        "best_constant": constant, "base_greedy": base_metrics,
        "base_calibration_pass_rate": {tt: sum(t["base_correct"] for t in pool if t["type"] == tt)
                                       / max(1, args.samples * sum(t["type"] == tt for t in pool)) for tt in ("code_o", "code_i")},
        "calibration_by_source": calibration_table(calibrated, args.samples, args.low, args.high),
        "sources": dict(sorted(Counter(f"{t['type']} {source_group(t)}" for t in pool).items())),
        "answer_budget": {"max_new_tokens": params.solve.max_new_tokens, "mode": params.solve.mode,
                          "worked_examples": params.solve.worked_examples},
        "settings": {k: v for k, v in vars(args).items() if k not in ("params",)},
        "runtime": runtime_record(params.model.dtype, params.model.device)})
    log.info("pool v2: %s; best constant %s", dict(counts["pool"]), constant)
    return 0


def calibration_table(calibrated: list[dict], samples: int, low: float, high: float) -> dict[str, dict]:
    """Per type and source: tasks calibrated, how many the base never solved, solved in the window, above it."""
    table: dict[str, dict] = {}
    for t in calibrated:
        row = table.setdefault(f"{t['type']} {source_group(t)}", {"calibrated": 0, "never": 0, "window": 0, "above": 0})
        rate = t["base_correct"] / samples
        key = "never" if rate == 0 else "below" if rate < low else "window" if rate <= high else "above"
        row["calibrated"] += 1
        row[key] = row.get(key, 0) + 1
    return dict(sorted(table.items()))


if __name__ == "__main__":
    raise SystemExit(main())
