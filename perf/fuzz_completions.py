"""Fuzz the stages' text handling: garbage completions (perf/fuzz_corpus.py) through propose's parser
and the verifier, solve's answer extraction and the grader, and the reward, as the stages call them.

    .venv/bin/python perf/fuzz_completions.py [--n 10000] [--seed 0] [--hogs 2] [--json perf/measured/fuzz_completions.json]

One pass, per completion: `proposal_rows` + `mark_duplicates` (stages/propose.py), `verify_rows` +
`mark_copyable` (stages/verify.py), `parse_answer` on the same garbage as an answer to a valid task of
its type (stages/solve.py), `grade_rows` (stages/grade.py), `build_rollouts` under both teacher modes
and both baselines, `played_games`, `update_from_games`, `generation_stats` (stages/reward.py), the
complexity and coverage metrics (stages/checkpoint.py), the next generation's prompts; every row
file is written and read back through populora.core.rows. Checks: nothing raises (the library's
guards turn an exception into `sandbox_error` with "verifier error": counted as a crash too); every
row that failed carries a known reason (PARSE_REASONS, VERIFY_REASONS, GRADE_REASONS); rewards and
advantages are finite; nothing escapes the sandbox (no canary file, no process left, the secret in
this process's environment never in a verdict). The pass runs twice, on the machine as it is and
beside `--hogs` busy-loop processes: the verdicts must be identical. Exit 1 on any failure.
The sandbox runs with a 0.5 s CPU limit (the default is 2 s) and 256 MB to keep the run short.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from fuzz_corpus import CANARY, SECRET_ENV, Sample, generate  # noqa: E402

from populora.config import VerifySection  # noqa: E402
from populora.core.rows import Answer, GradedAnswer, Proposal, Rollout, Task, read_rows, write_rows  # noqa: E402
from populora.population.ratings import new_rating, update_from_games  # noqa: E402
from populora.rl import generation_metrics as gm  # noqa: E402
from populora.rl.rollouts import build_rollouts, failure_reason, generation_stats, played_games  # noqa: E402
from populora.tasks import prompts  # noqa: E402
from populora.tasks.parsing import PARSE_REASONS, parse_answer  # noqa: E402
from populora.tasks.roles import proposal_rows  # noqa: E402
from populora.tasks.tasks import mark_copyable, mark_duplicates, seed_proposals  # noqa: E402
from populora.verifier import GRADE_REASONS, VERIFY_REASONS, grade_rows, open_sandbox, verify_rows  # noqa: E402

CONFIG = VerifySection(timeout_s=0.5, memory_mb=256, workers=2)
TEACHERS, STUDENTS = ("teacher0", "teacher1"), ("student0", "student1")
SECRET = "s3cret-populora-fuzz-7f1c"
SANDBOX_UIDS = 1_000_000  # populora.sandbox.pool._UID_BASE: as root, checks run under _UID_BASE + pid * 256 + n


@dataclass
class FakeResult:  # the fields of populora.lm.sampling.GenResult that the stages read (no torch import)
    segments: list
    truncated: bool
    tokens_generated: int

    @property
    def completion(self) -> str:
        return "".join(s["text"] for s in self.segments[1:])


def _result(text: str, truncated: bool) -> FakeResult:
    ids = list(range(min(len(text), 64)))
    return FakeResult(
        [
            {"text": "<prompt>", "train": False, "ids": [1, 2]},
            {"text": text, "train": True, "ids": ids, "logprobs": [-1.0] * len(ids)},
        ],
        truncated,
        len(ids),
    )


@dataclass
class Pass:
    verdicts: dict = field(default_factory=dict)  # row id -> verdict tuple (sandbox-decided)
    failures: list = field(default_factory=list)
    reasons: dict = field(default_factory=lambda: {k: Counter() for k in ("propose", "verify", "answer", "grade")})
    timings: dict = field(default_factory=dict)


def _call(run: Pass, what: str, fn, *args, **kwargs):
    try:
        return fn(*args, **kwargs)
    except BaseException as error:  # noqa: BLE001  (a crash is the finding)
        run.failures.append(
            f"{what} raised {type(error).__name__}: {str(error)[:300]}\n{traceback.format_exc()[-1500:]}"
        )
        return None


def _roundtrip(run: Pass, folder: Path, name: str, rows: list[dict], model) -> None:
    path, failures = folder / f"{name}.jsonl", len(run.failures)
    _call(run, f"write_rows {name}", write_rows, path, rows, model)
    back = _call(run, f"read_rows {name}", read_rows, path, model) if len(run.failures) == failures else None
    # what JSON carries: a str holding surrogate code points is written as \u escapes (populora.core.io),
    # and a reader joins two that form a pair into one character
    if back is not None and back != json.loads(json.dumps(rows)):
        run.failures.append(f"{name}: rows read back differ from the rows written")


def _buffer(box) -> list[dict]:
    return [t for t in verify_rows(seed_proposals("builtin"), CONFIG, sandbox=box) if t["valid"]]


def run_pass(samples: list[Sample], box, folder: Path) -> Pass:
    run, t0 = Pass(), time.perf_counter()
    buffer = _buffer(box)
    rows = []
    for mode in ("scaffolded", "free_form"):
        jobs, results = [], []
        for i, s in enumerate(samples):
            if s.mode != mode:
                continue
            teacher = TEACHERS[i % 2]
            meta = {
                "task_id": f"fuzz-{i}",
                "type": s.type,
                "teacher": teacher,
                "arm": "population",
                "gen": 0,
                "origin": "proposed",
                "references": [],
            }
            if s.type == "code_f":
                source = buffer[i % len(buffer)]
                meta = {**meta, "program": source["program"], "source_task": source["task_id"]}
                del meta["references"]
            jobs.append((meta, None))
            results.append(_result(s.text, s.truncated))
        rows += _call(run, f"proposal_rows ({mode})", proposal_rows, jobs, results, mode=mode, n_inputs=10) or []
    rows = _call(run, "mark_duplicates", mark_duplicates, rows, buffer) or rows
    run.reasons["propose"].update(r["parse_reason"] or "parsed" for r in rows)
    _roundtrip(run, folder, "proposals", rows, Proposal)
    run.timings["parse_proposals_s"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    tasks = _call(run, "verify_rows", verify_rows, rows, CONFIG, sandbox=box) or []
    tasks = _call(run, "mark_copyable", mark_copyable, tasks) or tasks
    run.timings["verify_s"] = time.perf_counter() - t1
    for task in tasks:
        reason = failure_reason(task)
        run.reasons["verify"][task["reason"] or "valid"] += 1
        run.verdicts[task["task_id"]] = (task["valid"], task["reason"], tuple(task["outputs"]))
        if task["valid"] != (task["reason"] is None) or (reason and reason not in PARSE_REASONS | VERIFY_REASONS):
            run.failures.append(f"{task['task_id']}: valid {task['valid']} with reason {task['reason']!r} / {reason!r}")
        if "verifier error" in (task.get("reason_detail") or ""):
            run.failures.append(f"{task['task_id']}: the verifier's guard caught {task['reason_detail']}")
    _roundtrip(run, folder, "tasks", tasks, Task)
    t2 = time.perf_counter()
    valid = [t for t in tasks if t["valid"] and not t["parse_reason"]]
    targets = {tt: [t for t in buffer + valid if t["type"] == tt] for tt in ("code_o", "code_i", "code_f")}
    answers = []
    for i, s in enumerate(samples):
        parsed = _call(
            run, f"parse_answer fuzz-{i}", parse_answer, s.answer_text, s.type, mode=s.mode, truncated=s.truncated
        )
        answer, reason = parsed if parsed else (None, "crashed")
        if (answer is None) == (reason is None) or (reason and reason not in PARSE_REASONS):
            run.failures.append(f"fuzz-{i}: parse_answer gave ({str(answer)[:80]!r}, {reason!r})")
        run.reasons["answer"][reason or "parsed"] += 1
        task = targets[s.type][i % len(targets[s.type])]
        answers.append(
            {
                "answer_id": f"{task['task_id']}:{STUDENTS[i % 2]}:{i}",
                "task_id": task["task_id"],
                "type": s.type,
                "student": STUDENTS[i % 2],
                "sample": i,
                "teacher": task.get("teacher"),
                "task_origin": task.get("origin"),
                "task_gen": task.get("gen"),
                "examples": [],
                "answer": answer,
                "parse_reason": reason,
                "segments": _result(s.answer_text, False).segments,
                "tokens": 1,
            }
        )
    _roundtrip(run, folder, "answers", answers, Answer)
    run.timings["parse_answers_s"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    graded = _call(run, "grade_rows", grade_rows, buffer + valid, answers, CONFIG, sandbox=box) or []
    run.timings["grade_s"] = time.perf_counter() - t3
    for row in graded:
        run.reasons["grade"][row["reason"] or "correct"] += 1
        run.verdicts[row["answer_id"]] = (row["correct"], row["reason"])
        if row["correct"] != (row["reason"] is None) or (row["reason"] and row["reason"] not in GRADE_REASONS):
            run.failures.append(f"{row['answer_id']}: correct {row['correct']} with reason {row['reason']!r}")
        if "verifier error" in (row.get("reason_detail") or ""):
            run.failures.append(f"{row['answer_id']}: the grader's guard caught {row['reason_detail']}")
        if SECRET in json.dumps(row, ensure_ascii=False) or SECRET in (row.get("reason_detail") or ""):
            run.failures.append(f"{row['answer_id']}: the environment's secret reached a verdict")
    _roundtrip(run, folder, "graded", graded, GradedAnswer)
    t4 = time.perf_counter()
    _reward(run, folder, tasks, graded, buffer)
    run.timings["reward_metrics_s"] = time.perf_counter() - t4
    run.timings["pass_s"] = time.perf_counter() - t0
    return run


def _reward(run: Pass, folder: Path, tasks: list[dict], graded: list[dict], buffer: list[dict]) -> None:
    pairing = {
        "teachers": list(TEACHERS),
        "students": list(STUDENTS),
        "counts": {t: dict.fromkeys(STUDENTS, 1) for t in TEACHERS},
    }
    for mode in ("learnability", "zero_sum"):
        for baseline in ("trr++", "per_task"):
            rollouts = _call(run, f"build_rollouts {mode} {baseline}", build_rollouts, tasks, graded, mode, baseline)
            for r in rollouts or []:
                if any(v is not None and not math.isfinite(v) for v in (r["reward"], r["advantage"])):
                    run.failures.append(f"{r['task_id']}: reward {r['reward']} advantage {r['advantage']}")
            if rollouts is not None and (mode, baseline) == ("learnability", "trr++"):
                _roundtrip(run, folder, "rollouts", rollouts, Rollout)
                games = _call(run, "played_games", played_games, graded, tasks, pairing) or []
                ratings = {m: new_rating() for m in TEACHERS + STUDENTS}
                new = _call(run, "update_from_games", update_from_games, ratings, games) or {}
                if not all(math.isfinite(v) for r in new.values() for v in r.values()):
                    run.failures.append(f"ratings not finite: {new}")
                stats = _call(run, "generation_stats", generation_stats, tasks, graded, rollouts, games)
                _call(run, "stats as JSON", json.dumps, stats, allow_nan=False)
    _call(run, "complexity_metrics", gm.complexity_metrics, tasks)
    _call(run, "coverage_update", gm.coverage_update, tasks, [], [], per_adapter=4, seed=0)
    for task in (t for t in tasks if t["valid"]):  # the next generation shows valid tasks in its prompts
        if task["type"] == "code_f":
            _call(run, "proposer_f_prompt", prompts.proposer_f_prompt, task["program"], 10, task["inputs"])
        else:
            _call(run, "proposer_io_prompt", prompts.proposer_io_prompt, task["type"], [task], ["os"])
        _call(run, "solver_prompt", prompts.solver_prompt, task, [task])


def _hogs(n: int) -> list[subprocess.Popen]:
    # each in a session of its own (autogroup scheduling would make busy loops of one session share a slice)
    return [subprocess.Popen([sys.executable, "-c", "while True:\n    pass"], start_new_session=True) for _ in range(n)]


def escapes() -> list[str]:
    """Traces an escaped program would leave: canary files, children of this process, processes under
    the private uids of this process's sandboxes (as root every check runs under one)."""
    found = [p for p in (CANARY, f"{CANARY}-dir", f"{CANARY}2") if os.path.lexists(p)]
    own_uids = SANDBOX_UIDS + (os.getpid() % 4_194_304) * 256  # this process's pools (other runs' are theirs)
    children = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children")
    if children.exists() and children.read_text().split():
        found.append(f"processes left: {children.read_text().split()}")
    for status in Path("/proc").glob("[0-9]*/status"):
        try:
            uid = int(next(line for line in status.read_text().splitlines() if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration, ValueError, IndexError):
            continue  # gone meanwhile
        if own_uids <= uid < own_uids + 256:
            found.append(f"process {status.parent.name} runs under one of this run's sandbox uids ({uid})")
    return found


def fuzz(samples: list[Sample], hogs: int = 2) -> dict:
    """Both passes (idle, then beside `hogs` busy loops); the report the CLI writes."""
    os.environ[SECRET_ENV] = SECRET
    before = escapes()
    passes = {}
    with tempfile.TemporaryDirectory(prefix="populora-fuzz-") as tmp:
        for name, n_hogs in (("idle", 0), ("hogs", hogs)):
            load = _hogs(n_hogs)
            try:
                with open_sandbox(CONFIG) as box:
                    (Path(tmp) / name).mkdir()
                    passes[name] = run_pass(samples, box, Path(tmp) / name)
            finally:
                for hog in load:
                    hog.kill()
                    hog.wait()
    idle, loaded = passes["idle"], passes["hogs"]
    differ = sorted(
        k for k in idle.verdicts.keys() | loaded.verdicts.keys() if idle.verdicts.get(k) != loaded.verdicts.get(k)
    )
    escaped = [e for e in escapes() if e not in before]
    return {
        "completions": len(samples),
        "kinds": dict(Counter(s.kind for s in samples)),
        "types": dict(Counter(s.type for s in samples)),
        "modes": dict(Counter(s.mode for s in samples)),
        "megabytes_of_text": round(sum(len(s.text) + len(s.answer_text) for s in samples) / 1e6, 1),
        "hogs": hogs,
        "sandbox": {"timeout_s": CONFIG.timeout_s, "memory_mb": CONFIG.memory_mb, "workers": CONFIG.workers},
        "passes": {
            name: {
                "timings_s": {k: round(v, 2) for k, v in p.timings.items()},
                "completions_per_s": round(len(samples) / p.timings["pass_s"], 1),
                "failures": len(p.failures),
            }
            for name, p in passes.items()
        },
        "reasons": {stage: dict(counter.most_common()) for stage, counter in idle.reasons.items()},
        "verdicts_compared": len(idle.verdicts),
        "verdicts_differ": len(differ),
        "verdict_differences": [(k, idle.verdicts.get(k), loaded.verdicts.get(k)) for k in differ[:20]],
        "failures": (idle.failures + loaded.failures)[:50],
        "escapes": escaped,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="completions (each used as a proposal and an answer)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--hogs", type=int, default=2, help="busy-loop processes beside the second pass")
    parser.add_argument("--json", default=None, help="write the report here")
    args = parser.parse_args(argv)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=Path(__file__).parent
    ).stdout.strip()  # the code this process imported
    start, load_start = time.perf_counter(), os.getloadavg()[0]
    report = fuzz(generate(args.n, args.seed), args.hogs)
    report |= {
        "loadavg_1min": [round(load_start, 2), round(os.getloadavg()[0], 2)]
    }  # at start and end: what ran beside
    report |= {
        "seed": args.seed,
        "wall_s": round(time.perf_counter() - start, 1),
        "commit": commit,
        "date": time.strftime("%Y-%m-%d"),
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "command": " ".join(["perf/fuzz_completions.py", *(argv or sys.argv[1:])]),
    }
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.json:
        Path(args.json).write_text(text + "\n")
    print(text)
    ok = not report["failures"] and not report["escapes"] and not report["verdicts_differ"]
    print("OK" if ok else "FAILED", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
