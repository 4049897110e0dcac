"""Pool v3: a held-out pool built on the warm base from programs the warm start never saw, by one command.

    python -m populora.heldout.ruler --params params.yaml --warm-base results/warm_base \
        --raw-base results/base_model --out data/pool-v3

Steps (each count is kept in `construction.json`):

1. **Candidates**: tasks of the task families' `pool` split (`populora.tasks.families`: whole held-out
   families and unseen compositions of trained primitives, never a program text of the warm start's training or
   of its validation), verified in the sandbox (`populora.verifier.families`: gold outputs computed there;
   invalid, copyable, copy- and echo-solved tasks and long outputs dropped).
2. **Calibrated on the warm base**: `--samples` answers at temperature 1 per task (the solver's prompt with the
   task's worked examples); a task stays when the warm base solves it `--low` to `--high` of the time (default
   5-60%), so a gain and a loss can both show.
3. **Selected** (`select`): one task per program text, held-out families first and unseen compositions after,
   at most `--per-family` of a family per type, up to `--per-type` per type.
4. **Checked as a whole**: the best single constant answer, the copy baseline (`code_o`) and the echo baseline
   (`code_i`) at most `--max-baseline` of each type (`best_constant`, `populora.verifier.baselines`). Tasks that
   more than that share of the tried constants solve (`guessable`: a `code_i` output that many inputs give) are
   left out first; then a task the best constant solves beyond its share is swapped for the next candidate in the
   window, round after round, until no constant passes more.

Outputs in `--out`: `pool.jsonl` (the pool, with worked examples, family, why it is held out, the warm base's
calibration count), `calibration.jsonl` (every calibrated task's counts; a killed calibration resumes from it),
`construction.json` (command, seeds, counts per step, the baselines on the final pool, the warm base's and the raw
base's greedy scores and pass rates on it).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
from collections import Counter
from collections.abc import Callable, Collection
from pathlib import Path

from populora.core.io import read_jsonl, write_json, write_jsonl, write_text
from populora.heldout.pool import attach_examples, worked_example_seeds
from populora.verifier.baselines import baseline_verdicts, constant_answer, constant_candidates
from populora.verifier.batched import accepted_answers

log = logging.getLogger("ruler")


def constant_answers(
    tasks: list[dict], task_type: str, among: list[dict] | None = None
) -> tuple[list[str], dict[str, list[str]]]:
    """The constants tried on `tasks` of one type (`constant_candidates` of `among`, default `tasks`: the simple
    literals, then every gold input and output) and, per task, each constant as that task's answer (repeated for
    each parameter where `f` takes several)."""
    tried = constant_candidates(among if among is not None else tasks)
    return tried, {t["task_id"]: [constant_answer(t, v) for v in tried] for t in tasks if t["type"] == task_type}


def guessable(tasks: list[dict], max_share: float, config, sandbox, cache: dict | None = None) -> set[str]:
    """Tasks that more than `max_share` of the constants tried on their type (`constant_answers` over `tasks`)
    solve: a `code_i` task whose output many inputs give (a count, a flag, a small remainder). A pool of those
    always has some constant above its allowance, and swapping one constant's tasks brings in the next one's;
    the share is the pool's own limit (`--max-baseline`): a guesser drawing from these values hits such a task
    more often than the pool lets a constant score."""
    out = set()
    for _, tried, _, passed in constants_graded(tasks, config, sandbox, cache):
        out |= {tid for tid, answers in passed.items() if len(set(answers)) > max_share * len(tried)}
    return out


def constants_graded(tasks: list[dict], config, sandbox, cache: dict | None):
    """Per type present in `tasks`: (type, the constants tried, each task's answers, each task's accepted
    answers), `constant_answers` graded by `accepted_answers`."""
    for task_type in ("code_o", "code_i"):
        of_type = [t for t in tasks if t["type"] == task_type]
        if of_type:
            tried, per_task = constant_answers(of_type, task_type, among=tasks)
            yield task_type, tried, per_task, accepted_answers(of_type, per_task, config, sandbox, cache)


def best_constant(pool: list[dict], config, sandbox, cache: dict | None = None) -> dict[str, dict]:
    """Per type, the single answer that solves the most pool tasks (tried: the simple literals and every gold
    output/input of the pool, for every task of its type, repeated for each parameter where `f` takes several),
    with the tasks it solves; the copy baseline (`code_o`: an argument of the input as the output) and the echo
    baseline (`code_i`: the output handed back as the input), graded. `cache`: verdicts kept across calls
    (`populora.verifier.batched.accepted_answers`)."""
    out = {}
    handed_back = baseline_verdicts(pool, config, sandbox=sandbox)
    for task_type, tried, per_task, passed in constants_graded(pool, config, sandbox, cache):
        tasks = [t for t in pool if t["type"] == task_type]
        solved: dict[str, list[str]] = {v: [] for v in tried}
        for tid, answers in passed.items():
            for answer in dict.fromkeys(answers):
                solved[tried[per_task[tid].index(answer)]].append(tid)
        # ties go to the answer tried first: the result may not depend on hashing order
        answer = min(tried, key=lambda v: (-len(solved[v]), tried.index(v)))
        kind = "copy" if task_type == "code_o" else "echo"
        baseline = sum(handed_back[t["task_id"]][kind] for t in tasks)
        out[task_type] = {
            "answer": answer,
            "correct": len(solved[answer]),
            "n": len(tasks),
            "accuracy": len(solved[answer]) / len(tasks),
            "solves": sorted(solved[answer]),
            f"{kind}_correct": baseline,
            f"{kind}_accuracy": baseline / len(tasks),
        }
    return out


def spread_order(tasks: list[dict], seed: int) -> list[dict]:
    """`tasks` in an order whose every prefix spans the families: families in a seeded order, one task of each in
    turn (held-out families' tasks and unseen compositions alike), each family's tasks in their own order. A run
    that takes the first `heldout.per_type` of a type (8 by default) then gets 8 families, not 8 tasks of one.

    >>> [t["id"] for t in spread_order([{"id": i, "family": f} for i, f in enumerate("aaabbc")], seed=0)]
    [0, 5, 3, 1, 4, 2]
    """
    families: dict[str, list[dict]] = {}
    for task in tasks:
        families.setdefault(task["family"], []).append(task)
    names = sorted(families)
    random.Random(f"spread:{seed}").shuffle(names)
    out = []
    for turn in range(max((len(v) for v in families.values()), default=0)):
        out += [families[name][turn] for name in names if turn < len(families[name])]
    return out


def calibration_order(tasks: list[dict], seed: int) -> list[dict]:
    """Tasks in the order they are calibrated: seeded, held-out families before unseen compositions, and within
    each the (type, family) queues taken in turn, so that however early calibration stops, what it measured is
    spread over every family and both types."""
    rng = random.Random(seed)
    out = []
    for kind in ("family", "composition"):
        queues: dict[tuple[str, str], list[dict]] = {}
        for task in tasks:
            if task.get("held_out") == kind:
                queues.setdefault((task["family"], task["type"]), []).append(task)
        for queue in queues.values():
            rng.shuffle(queue)
        keys = sorted(queues)
        while any(queues.values()):
            for key in keys:
                if queues[key]:
                    out.append(queues[key].pop())
    return out


def calibrate(tasks: list[dict], done: dict[str, int], measure, *, chunk: int, enough, wanted=None) -> dict[str, int]:
    """`done` (task_id -> correct) extended chunk by chunk (`measure(chunk_tasks)` -> {task_id: correct}) over
    `tasks` in order, skipping what `done` holds, types `enough(done)` says are full and tasks `wanted(done)`
    (a predicate, when given) says could no longer enter the pool. Returns `done`."""
    pending = [t for t in tasks if t["task_id"] not in done]
    while pending:
        full = enough(done)
        keep = wanted(done) if wanted else (lambda task: True)
        pending = [t for t in pending if t["type"] not in full and keep(t)]
        if not pending:
            break
        batch, pending = pending[:chunk], pending[chunk:]
        done.update(measure(batch))
    return done


def in_window(task: dict, *, samples: int, low: float, high: float) -> bool:
    return low <= task["calibration_correct"] / samples <= high


def still_useful(inside: list[dict], *, per_family: int, per_value: int):
    """A predicate: whether a candidate could still enter the pool, given the tasks already `inside` the window.
    Not when its family already has `per_family` of its type in the window, nor (`code_o`) when its output
    already has `per_value`: the best constant would swap any more of them out. Measuring such a task costs
    16 answers for nothing (on the first pool v3 calibration the outputs 1 and 0 held 45 and 35 of 233
    in-window `code_o` tasks, where a pool of 128 may keep 6 of each). Give margins: swaps and the
    one-program rule take some of these out again."""
    groups = Counter((t["family"], t["type"]) for t in inside)
    values = Counter(json.dumps(t.get("outputs")) for t in inside if t["type"] == "code_o")

    def useful(task: dict) -> bool:
        if groups[(task["family"], task["type"])] >= per_family:
            return False
        return task["type"] != "code_o" or values[json.dumps(task.get("outputs"))] < per_value

    return useful


def select(
    calibrated: list[dict],
    *,
    samples: int,
    low: float,
    high: float,
    per_type: int,
    per_family: int,
    exclude: Collection[str] = frozenset(),
) -> list[dict]:
    """Tasks the warm base solved `low`..`high` of the time, in calibration order: held-out families first,
    then unseen compositions; one task per program text (whatever its type); at most `per_family` of one
    family per type; up to `per_type` per type; none of `exclude` (task ids)."""
    out: list[dict] = []
    programs: set[str] = set()
    per_group: Counter[tuple[str, str]] = Counter()
    for kind in ("family", "composition"):
        for task in calibrated:
            if task.get("held_out") != kind or task["task_id"] in exclude:
                continue
            group = (task["family"], task["type"])
            if (
                not in_window(task, samples=samples, low=low, high=high)
                or task["program"] in programs
                or per_group[group] >= per_family
                or sum(t["type"] == task["type"] for t in out) >= per_type
            ):
                continue
            programs.add(task["program"])
            per_group[group] += 1
            out.append(task)
    return out


def swap_constant_solved(pool: list[dict], constant: dict[str, dict], max_share: float) -> set[str]:
    """The pool tasks to take out so that no type's best constant passes more than `max_share` of it: those
    its best constant solves, beyond the allowance."""
    out: set[str] = set()
    for row in constant.values():
        allowed = int(max_share * row["n"])
        out |= set(row["solves"][allowed:])
    return out


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--overlay", nargs="*", default=[], help="params overlays applied in order")
    parser.add_argument("--warm-base", default="results/warm_base", help="the model the pool is calibrated on")
    parser.add_argument("--raw-base", default="results/base_model", help="scored on the final pool, beside the warm")
    parser.add_argument("--out", required=True)
    parser.add_argument("--candidates", type=int, default=1600, help="verified candidate tasks (both types)")
    parser.add_argument("--samples", type=int, default=16)
    parser.add_argument("--low", type=float, default=0.05)
    parser.add_argument("--high", type=float, default=0.60)
    parser.add_argument("--per-type", type=int, default=128)
    parser.add_argument("--per-family", type=int, default=24, help="at most this many tasks of one family per type")
    parser.add_argument(
        "--max-baseline",
        type=float,
        default=0.05,
        help="the best constant, copy and echo baselines' largest share of a type",
    )
    parser.add_argument("--chunk", type=int, default=64, help="tasks calibrated between two checkpoints")
    parser.add_argument("--seed", type=int, default=0)
    return parser.parse_args(argv)


def pick_pool(
    calibrated: list[dict], args, config, sandbox, cache: dict | None = None
) -> tuple[list[dict], set[str], set[str]]:
    """(pool, guessed, swapped): the selected pool (`select`) and the tasks left out of it so that no type's best
    constant answer passes more than `args.max_baseline` of it: the `guessable` tasks in the window first, then
    rounds that each drop what the type's best constant solves beyond its allowance and take the next tasks in the
    window instead, until a round drops nothing (each round leaves out more tasks: it ends). `cache`: the
    constants' verdicts, kept across rounds and calls."""
    cache = {} if cache is None else cache
    inside = [t for t in calibrated if in_window(t, samples=args.samples, low=args.low, high=args.high)]
    guessed = guessable(inside, args.max_baseline, config, sandbox, cache)
    swapped: set[str] = set()
    while True:
        pool = select(
            calibrated,
            samples=args.samples,
            low=args.low,
            high=args.high,
            per_type=args.per_type,
            per_family=args.per_family,
            exclude=guessed | swapped,
        )
        swap = swap_constant_solved(pool, best_constant(pool, config, sandbox, cache), args.max_baseline)
        if not swap:
            return pool, guessed, swapped
        swapped |= swap


def pool_ids(pool: list[dict], seed: int) -> list[dict]:
    """The pool in its file order (per type, `spread_order`), renamed `heldout-<type>-<nnn>` (the calibrated
    task's id kept as `source_task`)."""
    return [
        {**t, "task_id": f"heldout-{t['type']}-{i:03d}", "source_task": t.get("source_task", t["task_id"])}
        for task_type in ("code_o", "code_i")
        for i, t in enumerate(spread_order([p for p in pool if p["type"] == task_type], seed))
    ]


def calibrate_until_full(
    tasks: list[dict], done: dict[str, int], measure, args, config, sandbox, cache: dict | None = None
) -> dict[str, int]:
    """Calibrate (`calibrate`) until the picked pool (`pick_pool`: after the best constant's swaps) holds
    `args.per_type` of each type, or no candidate of a short type is left. A type counts as full in a round when the
    selection holds its target; a round that ends short raises the target by what the swaps took."""
    target = {tt: int(args.per_type * 1.1) for tt in ("code_o", "code_i")}
    by_id = {t["task_id"]: t for t in tasks}

    def enough(measured: dict[str, int]) -> set[str]:
        chosen = select(
            [{**by_id[t], "calibration_correct": c} for t, c in measured.items()],
            samples=args.samples,
            low=args.low,
            high=args.high,
            per_type=max(target.values()),
            per_family=args.per_family,
        )
        have = Counter(t["type"] for t in chosen)
        return {tt for tt in target if have[tt] >= target[tt]}

    def wanted(measured: dict[str, int]):
        inside = [
            t
            for t in (by_id[i] for i in measured)
            if in_window(
                {"calibration_correct": measured[t["task_id"]]}, samples=args.samples, low=args.low, high=args.high
            )
        ]
        # margins of half again: the swaps and the one-program rule take some of these out
        per_value = max(1, int(1.5 * args.max_baseline * args.per_type))
        return still_useful(inside, per_family=int(1.5 * args.per_family), per_value=per_value)

    before = -1
    while True:
        done = calibrate(tasks, done, measure, chunk=args.chunk, enough=enough, wanted=wanted)
        pool = pick_pool(calibrated_rows(tasks, done, args.samples), args, config, sandbox, cache)[0]
        have = Counter(t["type"] for t in pool)
        short = {tt: args.per_type - have[tt] for tt in target if have[tt] < args.per_type}
        if not short or len(done) == before:  # full, or a round that calibrated nothing new: no candidate is left
            return done
        before = len(done)
        log.info("the pool after the best constant's swaps is short by %s: calibrating on", short)
        for task_type, missing in short.items():
            target[task_type] += missing + args.chunk // 4


def resumed(checkpoint: Path, by_id: dict[str, dict], samples: int) -> dict[str, int]:
    """task_id -> count of the checkpoint's rows that are still this run's tasks: the same id, type, program and
    input, calibrated with as many samples (a changed generator must not lend a task another's count)."""
    if not checkpoint.is_file():
        return {}
    out = {}
    for row in read_jsonl(checkpoint):
        task = by_id.get(row["task_id"])
        same = task is not None and all(task[k] == row.get(k) for k in ("type", "program", "inputs"))
        if same and row.get("samples") == samples:
            out[row["task_id"]] = row["calibration_correct"]
    return out


def calibrated_rows(tasks: list[dict], done: dict[str, int], samples: int) -> list[dict]:
    """The calibrated tasks, in calibration order, with their counts."""
    return [{**t, "calibration_correct": done[t["task_id"]], "samples": samples} for t in tasks if t["task_id"] in done]


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    from populora.lm.engines import load_sampler
    from populora.verifier import sandbox_for

    params = load_params(args)
    out = Path(args.out)
    counts: dict[str, Counter] = {}
    dropped: Counter = Counter()
    with sandbox_for(params.verify) as sandbox:
        tasks = _candidates(params, args, sandbox, counts, dropped)
        checkpoint = out / "calibration.jsonl"
        # a killed calibration resumes from what it measured
        done = resumed(checkpoint, {t["task_id"]: t for t in tasks}, args.samples)
        tokenizer, model = load_sampler(args.warm_base, {}, params)
        measure = _calibration_measure(params, args, model, tokenizer, sandbox, tasks, done, checkpoint)
        verdicts: dict = {}  # the constants' verdicts, kept across pick rounds
        done = calibrate_until_full(tasks, done, measure, args, params.verify, sandbox, verdicts)
        calibrated = calibrated_rows(tasks, done, args.samples)
        pool = _final_pool(calibrated, args, params.verify, sandbox, verdicts, counts)
        scores = score_record(params, args, pool, model, tokenizer, sandbox)
    write_jsonl(out / "pool.jsonl", pool)
    record = _construction_record(argv, args, counts, dropped, scores, calibrated)
    write_json(out / "construction.json", record)
    write_text(out / "README.md", pool_readme(record))
    log.info(
        "pool v3: %s; best constant %s",
        dict(counts["pool"]),
        {tt: (row["answer"], row["correct"]) for tt, row in record["best_constant"].items()},
    )
    return 0


def _candidates(params, args: argparse.Namespace, sandbox, counts: dict[str, Counter], dropped: Counter) -> list[dict]:
    """The verified candidate tasks with their worked examples, in calibration order (counted into `counts`)."""
    from populora.verifier.families import verified_tasks

    candidates = verified_tasks(
        "pool", args.candidates, seed=args.seed, config=params.verify, sandbox=sandbox, counts=dropped
    )
    counts["verified"] = Counter(t["type"] for t in candidates)
    seeds = worked_example_seeds(params, sandbox)
    return calibration_order(attach_examples(candidates, seeds, params.solve.worked_examples, args.seed), args.seed)


def _calibration_measure(
    params,
    args: argparse.Namespace,
    model,
    tokenizer,
    sandbox,
    tasks: list[dict],
    done: dict[str, int],
    checkpoint: Path,
) -> Callable[[list[dict]], dict[str, int]]:
    """The calibration's measure: a batch's pass counts on the warm base, every count so far checkpointed."""
    from populora.heldout.scoring import pass_counts

    def measure(batch: list[dict]) -> dict[str, int]:
        new = pass_counts(params, model, tokenizer, batch, [None], sandbox, samples=args.samples, seed=args.seed)[
            "base"
        ]
        rows = calibrated_rows(tasks, {**done, **new}, args.samples)
        write_jsonl(checkpoint, rows)
        log.info(
            "calibrated %d tasks; in the window: %s",
            len(rows),
            dict(Counter(r["type"] for r in rows if in_window(r, samples=args.samples, low=args.low, high=args.high))),
        )
        return new

    return measure


def _final_pool(
    calibrated: list[dict],
    args: argparse.Namespace,
    config,
    sandbox,
    verdicts: dict,
    counts: dict[str, Counter],
) -> list[dict]:
    """The pool picked from the calibrated tasks in its file order and ids (each step's tasks counted into `counts`)."""
    type_of = {t["task_id"]: t["type"] for t in calibrated}
    counts["calibrated"] = Counter(t["type"] for t in calibrated)
    counts["in_window"] = Counter(
        t["type"] for t in calibrated if in_window(t, samples=args.samples, low=args.low, high=args.high)
    )
    pool, guessed, swapped = pick_pool(calibrated, args, config, sandbox, verdicts)
    counts["guessable"] = Counter(type_of[t] for t in guessed)
    counts["swapped_for_the_constant"] = Counter(type_of[t] for t in swapped)
    pool = pool_ids(pool, args.seed)
    counts["pool"] = Counter(t["type"] for t in pool)
    return pool


def _construction_record(
    argv: list[str] | None,
    args: argparse.Namespace,
    counts: dict[str, Counter],
    dropped: Counter,
    scores: dict,
    calibrated: list[dict],
) -> dict:
    """construction.json's record: the command, each step's counts, the drops, `scores`, the calibration per family."""
    return {
        "command": "python -m populora.heldout.ruler " + " ".join(argv if argv is not None else sys.argv[1:]),
        "counts": {step: dict(sorted(c.items())) for step, c in counts.items()},
        "candidates_dropped": dict(sorted(dropped.items())),
        **scores,
        "calibration_by_family": calibration_table(calibrated, args.samples, args.low, args.high),
    }


def load_params(args: argparse.Namespace):
    from populora.config import load_overlaid

    return load_overlaid(args.params, args.overlay)


def score_record(params, args, pool: list[dict], model, tokenizer, sandbox) -> dict:
    """What a score on the final pool stands beside: its best constant, copy and echo baselines, the warm base's
    greedy score and calibration pass rate, the raw base's greedy score and pass rate; and how it was made."""
    from populora.heldout.scoring import pass_counts, score_members
    from populora.lm.dtype import runtime_record
    from populora.lm.engines import load_sampler

    constant = best_constant(pool, params.verify, sandbox)
    warm_greedy, _ = score_members(params, model, tokenizer, pool, [None], {}, sandbox)
    raw_tokenizer, raw_model = load_sampler(args.raw_base, {}, params)
    raw_greedy, _ = score_members(params, raw_model, raw_tokenizer, pool, [None], {}, sandbox)
    raw_counts = pass_counts(
        params, raw_model, raw_tokenizer, pool, [None], sandbox, samples=args.samples, seed=args.seed
    )["base"]
    return {
        "best_constant": {tt: {k: v for k, v in row.items() if k != "solves"} for tt, row in constant.items()},
        "held_out": dict(sorted(Counter(f"{t['type']} {t['held_out']}" for t in pool).items())),
        "families": dict(sorted(Counter(f"{t['type']} {t['family']}" for t in pool).items())),
        "warm_base": {
            "greedy": warm_greedy,
            "calibration_pass_rate": _pass_rate(pool, lambda t: t["calibration_correct"], args.samples),
        },
        "raw_base": {
            "greedy": raw_greedy,
            "pass_rate": _pass_rate(pool, lambda t: raw_counts[t["task_id"]], args.samples),
        },
        "answer_budget": {
            "max_new_tokens": params.solve.max_new_tokens,
            "mode": params.solve.mode,
            "worked_examples": params.solve.worked_examples,
        },
        "settings": {k: v for k, v in vars(args).items() if k != "params"},
        "runtime": runtime_record(params.model.dtype, params.model.device),
    }


def pool_readme(record: dict) -> str:
    """The pool folder's README.md, from its construction record: what it is, how it was built, what scores on
    it stand beside."""
    counts, settings = record["counts"], record["settings"]
    window = f"{100 * settings['low']:.0f}-{100 * settings['high']:.0f}%"

    def per_type(step: str) -> str:
        return ", ".join(f"{n} {t}" for t, n in sorted(counts.get(step, {}).items())) or "none"

    lines = [
        "# Held-out pool v3",
        "",
        "Verified `code_o`/`code_i` tasks from programs the warm start never saw (the task families' `pool` split,"
        " populora/tasks/families.py: whole held-out families and unseen compositions of trained primitives), "
        f"calibrated on the warm base: each solved by it {window} of the time at temperature 1 "
        f"({settings['samples']} answers a task), so a gain and a loss can both show. Built by",
        "",
        f"    {record['command']}",
        "",
        "## Construction",
        "",
        f"* verified candidates: {per_type('verified')} (dropped before: "
        + ", ".join(f"{k} {v}" for k, v in record["candidates_dropped"].items() if k not in ("candidates", "kept"))
        + ")",
        f"* calibrated on the warm base: {per_type('calibrated')}; in the window: {per_type('in_window')}",
        f"* left out as guessable (more than {100 * settings['max_baseline']:.0f}% of the constants tried on its type "
        f"solve it): {per_type('guessable')}",
        f"* swapped out for the best constant (past {100 * settings['max_baseline']:.0f}% of a type): "
        f"{per_type('swapped_for_the_constant')}",
        f"* the pool: {per_type('pool')}, one task per program text, at most {settings['per_family']} of a family "
        "per type, held-out families first: " + ", ".join(f"{k} {v}" for k, v in record["held_out"].items()),
        "",
        "Families: " + ", ".join(f"{k} {v}" for k, v in record["families"].items()),
        "",
        "## What a score on it stands beside",
        "",
        "| type | best constant | copy / echo baseline | raw base greedy | raw base pass rate | warm base greedy | "
        "warm base calibration pass rate |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for task_type, row in record["best_constant"].items():
        kind = "echo" if "echo_correct" in row else "copy"
        greedy = f"heldout.base.{task_type}.accuracy"
        lines.append(
            f"| {task_type} | `{row['answer']}` {row['correct']}/{row['n']} ({100 * row['accuracy']:.1f}%) | {kind} "
            f"{row[f'{kind}_correct']}/{row['n']} | {_pct(record['raw_base']['greedy'].get(greedy))} "
            f"| {_pct(record['raw_base']['pass_rate'][task_type])} "
            f"| {_pct(record['warm_base']['greedy'].get(greedy))} "
            f"| {_pct(record['warm_base']['calibration_pass_rate'][task_type])} |"
        )
    lines += [
        "",
        "Files: `pool.jsonl` (the pool: each task with its worked examples, family, why it is held out and "
        "the warm base's calibration count), `calibration.jsonl` (every calibrated task), `construction.json` "
        "(this record, with the calibration table per family).",
        "",
    ]
    return "\n".join(lines)


def _pct(value) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _pass_rate(pool: list[dict], correct, samples: int) -> dict[str, float]:
    return {
        tt: round(
            sum(correct(t) for t in pool if t["type"] == tt) / max(1, samples * sum(t["type"] == tt for t in pool)), 4
        )
        for tt in ("code_o", "code_i")
    }


def calibration_table(calibrated: list[dict], samples: int, low: float, high: float) -> dict[str, dict]:
    """Per type and family: tasks calibrated, how many the warm base never solved, below, in and above the window."""
    table: dict[str, dict] = {}
    for t in calibrated:
        row = table.setdefault(
            f"{t['type']} {t['family']}", {"calibrated": 0, "never": 0, "below": 0, "window": 0, "above": 0}
        )
        rate = t["calibration_correct"] / samples
        key = "never" if rate == 0 else "below" if rate < low else "window" if rate <= high else "above"
        row["calibrated"] += 1
        row[key] += 1
    return dict(sorted(table.items()))


if __name__ == "__main__":
    raise SystemExit(main())
