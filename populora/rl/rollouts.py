"""One generation's outcome as plain data: rollouts with rewards and advantages, games, statistics.

Pure functions over the rows the stages write (proposals verified in `tasks.jsonl`, answers
graded in `graded.jsonl`); `stages.reward` only reads them, calls these and writes the results.

* A **proposal rollout** (role `propose`) is one teacher completion; its reward is AZR's
  learnability (or zero-sum) from the solve rate of the students that attempted that task.
* A **solve rollout** (role `solve`) is one student answer: 1 correct, -0.5 wrong, -1 malformed.
* A **game** (TrueSkill) is a graded attempt by a student on a task proposed *this generation*
  by a teacher *paired with that student*. Buffer fill-ins (origin `buffer`: older tasks given
  to a student whose teacher proposed nothing valid of that type) train the student but are no
  game and earn their old author nothing.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from populora.core.sections import TASK_TYPES
from populora.rl.advantages import NATIVE_SCALE, answer_advantages, group_key, whiten_advantages
from populora.rl.rewards import REWARD_CORRECT, student_reward, teacher_reward
from populora.tasks.tasks import program_key

ROLLOUT_FIELDS = ("segments", "tokens", "type", "task_id")


def failure_reason(task: dict) -> str | None:
    """Why a proposal is not a task: its parse failure first (e.g. `duplicate`), else the verifier's reason."""
    if task.get("parse_reason"):
        return task["parse_reason"]
    return None if task.get("valid") else (task.get("reason") or "invalid")


def is_well_formed(answer: dict) -> bool:
    return answer.get("parse_reason") is None and answer.get("answer") is not None


def build_rollouts(
    tasks: list[dict], graded: list[dict], mode: str, baseline: str = "trr++", scale: str | None = None
) -> list[dict]:
    """Proposal rollouts (one per proposal of this generation) and solve rollouts (one per answer),
    each with `reward` and `advantage`. Proposals, one sample per prompt, are whitened per adapter, role
    and task type (TRR++). Answers get `answer_advantages`: their reward minus the mean of their
    (adapter, type) group (`baseline="trr++"`) or of the same adapter's other answers to the same task
    (`"per_task"`, RLOO), divided by the std of that group (`scale="group"`), of the adapter's answers
    (`"batch"`) or by nothing (`"none"`); `scale=None` takes the baseline's own (`NATIVE_SCALE`: AZR's
    TRR++ whitens, RLOO does not scale)."""
    attempts: dict[str, list[bool]] = defaultdict(list)
    for answer in graded:
        attempts[answer["task_id"]].append(bool(answer.get("correct")))
    rollouts = []
    for task in tasks:
        outcomes = attempts.get(task["task_id"], [])
        reward = teacher_reward(failure_reason(task) is None, sum(outcomes), len(outcomes), mode=mode)
        rollouts.append(
            {
                **{k: task.get(k) for k in ROLLOUT_FIELDS},
                "adapter": task["teacher"],
                "role": "propose",
                "reward": reward,
                "solve_rate": (sum(outcomes) / len(outcomes)) if outcomes else None,
            }
        )
    for answer in graded:
        rollouts.append(
            {
                **{k: answer.get(k) for k in ROLLOUT_FIELDS},
                "adapter": answer["student"],
                "role": "solve",
                "answer_id": answer["answer_id"],
                "correct": bool(answer.get("correct")),
                "reward": student_reward(bool(answer.get("correct")), is_well_formed(answer)),
            }
        )
    scale = NATIVE_SCALE.get(baseline, "group") if scale is None else scale
    groups = [(r["adapter"], group_key(r["role"], r["type"])) for r in rollouts]
    advantages = whiten_advantages([r["reward"] for r in rollouts], groups)
    solving = [i for i, r in enumerate(rollouts) if r["role"] == "solve"]
    answers = answer_advantages(
        [rollouts[i]["reward"] for i in solving],
        [solve_group(rollouts[i], baseline) for i in solving],
        [rollouts[i]["adapter"] for i in solving],
        baseline,
        scale,
    )
    for i, advantage in zip(solving, answers):
        advantages[i] = advantage
    for rollout, advantage in zip(rollouts, advantages):
        rollout["advantage"] = advantage
    return rollouts


def solve_group(rollout: dict, baseline: str) -> tuple:
    """The group a solve rollout's advantage is measured against: the same adapter's answers to the same
    task (`per_task`), or to every task of its type (TRR++)."""
    if baseline == "per_task":
        return rollout["adapter"], rollout["task_id"]
    return rollout["adapter"], group_key("solve", rollout["type"])


def signal_accounting(rollouts: list[dict], baseline: str = "trr++") -> dict:
    """What the students' learning signal differed in: of the solve rollouts with a nonzero advantage,
    `correctness` counts those whose group (`solve_group`) holds a right answer beside one that is not, and
    `format_only` those whose group holds no right answer, so that their rewards differ only in format
    (-1 malformed against -0.5 wrong). Counted before the update (the null control shuffles afterwards).

    >>> rows = [{"role": "solve", "adapter": "s", "task_id": t, "type": "code_o", "reward": r, "advantage": a}
    ...         for t, r, a in (("a", 1.0, 1.5), ("a", -0.5, -0.75), ("b", -1.0, -0.5), ("b", -0.5, 0.5))]
    >>> signal_accounting(rows, "per_task")
    {'solve_with_signal': 4, 'format_only': 2, 'correctness': 2}
    """
    rewards: dict[tuple, set] = defaultdict(set)
    solving = [r for r in rollouts if r["role"] == "solve" and r.get("reward") is not None]
    for rollout in solving:
        rewards[solve_group(rollout, baseline)].add(rollout["reward"])
    out = {"solve_with_signal": 0, "format_only": 0, "correctness": 0}
    for rollout in solving:
        if rollout.get("advantage"):
            group = rewards[solve_group(rollout, baseline)]
            out["solve_with_signal"] += 1
            out["correctness" if REWARD_CORRECT in group and len(group) > 1 else "format_only"] += 1
    return out


def played_games(graded: list[dict], tasks: list[dict], pairing: dict) -> list[tuple[str, str, bool]]:
    """TrueSkill games `(student, teacher, student_won)`: attempts on tasks of this generation's
    proposals (`tasks`) whose teacher was paired with the student. Self-games (the baseline's one
    adapter in both roles) are kept here and skipped by the rating update."""
    authors = {t["task_id"]: t["teacher"] for t in tasks}
    games = []
    for answer in graded:
        teacher = authors.get(answer["task_id"])
        if teacher is None or answer.get("task_origin") != "proposed":
            continue
        if pairing["counts"].get(teacher, {}).get(answer["student"], 0) <= 0:
            continue
        games.append((answer["student"], teacher, bool(answer.get("correct"))))
    return games


def same_program_examples(graded: list[dict], programs: dict[str, str]) -> tuple[int, int]:
    """(answers, correct answers) whose prompt showed a worked example with the task's own
    normalised program: a leak `populora.tasks.roles.worked_example_pool` rules out, counted to prove it.
    `programs` maps task ids (this generation's tasks and the buffer) to programs."""
    answers = correct = 0
    for answer in graded:
        key = program_key(programs.get(answer["task_id"]))
        if key is not None and any(program_key(programs.get(e)) == key for e in answer.get("examples") or []):
            answers += 1
            correct += bool(answer.get("correct"))
    return answers, correct


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def reward_by_adapter(rollouts: list[dict]) -> dict[str, dict[str, float]]:
    """`"<adapter>/<role>" -> {"sum", "sumsq", "count"}` of the defined rewards (what fitness accumulates)."""
    totals: dict[str, dict[str, float]] = {}
    for r in rollouts:
        if r["reward"] is None:
            continue
        entry = totals.setdefault(f"{r['adapter']}/{r['role']}", {"sum": 0.0, "sumsq": 0.0, "count": 0})
        entry["sum"] += r["reward"]
        entry["sumsq"] += r["reward"] * r["reward"]  # the spread: how sure a ranking by mean reward is
        entry["count"] += 1
    return totals


def generation_stats(
    tasks: list[dict], graded: list[dict], rollouts: list[dict], games: list[tuple], baseline: str = "trr++"
) -> dict:
    """reward_stats.json: validity and solve rates per type, failure reasons, rewards, tokens,
    games per teacher, how many answers came from buffer fill-ins, and the signal accounting
    (`signal_accounting`, with the advantage baseline the rollouts were built with)."""
    by_type: dict[str, dict] = {}
    for task_type in TASK_TYPES:
        props = [t for t in tasks if t["type"] == task_type]
        answers = [a for a in graded if a["type"] == task_type]
        valid = sum(failure_reason(t) is None for t in props)
        solved = sum(bool(a.get("correct")) for a in answers)
        by_type[task_type] = {
            "proposals": len(props),
            "valid": valid,
            "validity_rate": valid / len(props) if props else None,
            "reasons": dict(Counter(failure_reason(t) or "valid" for t in props)),
            "attempts": len(answers),
            "solved": solved,
            "solve_rate": solved / len(answers) if answers else None,
            "answer_reasons": dict(Counter(a.get("reason") or a.get("parse_reason") or "ok" for a in answers)),
            "buffer_attempts": sum(a.get("task_origin") == "buffer" for a in answers),
        }
    tokens: Counter = Counter()
    for r in rollouts:
        tokens[f"{r['adapter']}/{r['role']}"] += r.get("tokens") or 0
    return {
        "by_type": by_type,
        "teacher_reward_mean": _mean(
            [r["reward"] for r in rollouts if r["role"] == "propose" and r["reward"] is not None]
        ),
        "student_reward_mean": _mean(
            [r["reward"] for r in rollouts if r["role"] == "solve" and r["reward"] is not None]
        ),
        "tokens": dict(tokens),
        "rollouts": dict(Counter(f"{r['adapter']}/{r['role']}" for r in rollouts)),
        "rewards": reward_by_adapter(rollouts),
        "games": len(games),
        "games_per_teacher": dict(Counter(teacher for _, teacher, _ in games)),
        "signal": signal_accounting(rollouts, baseline),
    }
