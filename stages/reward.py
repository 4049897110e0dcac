"""Stage reward: rewards, TRR++ advantages and TrueSkill updates from the graded attempts.

    python -m stages.reward --params params.yaml --arm population --gen 0 --state results/population/init \
        --tasks results/population/gen000/tasks.jsonl --graded results/population/gen000/graded.jsonl \
        --pairing results/population/gen000/pairing.json --out results/population/gen000/rollouts.jsonl \
        --ratings results/population/gen000/ratings.json --stats results/population/gen000/reward_stats.json

Student: 1 correct, -0.5 wrong but well formed, -1 malformed. Teacher: learnability from the
solve rate of its matched students (or zero-sum), -1 for a malformed or invalid proposal.
Every graded attempt on a teacher's task is a TrueSkill game (student wins when correct).
Rollouts carry reward and advantage, whitened per (adapter, role, task type) group.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from populora.advantages import group_key, whiten_advantages
from populora.io import read_json, read_jsonl, write_json, write_jsonl
from populora.ratings import update_from_games
from populora.rewards import student_reward, teacher_reward
from populora.state import load_state
from stages._common import setup, stage_parser

ROLLOUT_FIELDS = ("segments", "tokens", "type", "task_id")


def failure_reason(task: dict) -> str | None:
    """Why a proposal is not a task: its parse failure first, else the verifier's reason."""
    if task.get("parse_reason"):
        return task["parse_reason"]
    return None if task.get("valid") else (task.get("reason") or "invalid")


def build_rollouts(tasks: list[dict], graded: list[dict], mode: str) -> tuple[list[dict], dict]:
    attempts: dict[str, list[bool]] = defaultdict(list)
    for answer in graded:
        attempts[answer["task_id"]].append(bool(answer.get("correct")))
    rollouts = []
    for task in tasks:
        valid = failure_reason(task) is None
        outcomes = attempts.get(task["task_id"], [])
        reward = teacher_reward(valid, sum(outcomes), len(outcomes), mode=mode)
        rollouts.append({**{k: task.get(k) for k in ROLLOUT_FIELDS}, "adapter": task["teacher"], "role": "propose",
                         "reward": reward, "solve_rate": (sum(outcomes) / len(outcomes)) if outcomes else None})
    for answer in graded:
        well_formed = answer.get("parse_reason") is None and answer.get("answer") is not None
        rollouts.append({**{k: answer.get(k) for k in ROLLOUT_FIELDS}, "adapter": answer["student"], "role": "solve",
                         "answer_id": answer["answer_id"], "correct": bool(answer.get("correct")),
                         "reward": student_reward(bool(answer.get("correct")), well_formed)})
    groups = [(r["adapter"], group_key(r["role"], r["type"])) for r in rollouts]
    for rollout, advantage in zip(rollouts, whiten_advantages([r["reward"] for r in rollouts], groups)):
        rollout["advantage"] = advantage
    return rollouts, attempts


def summarize(tasks: list[dict], graded: list[dict], rollouts: list[dict]) -> dict:
    by_type: dict[str, dict] = {}
    for task_type in ("code_o", "code_i", "code_f"):
        props = [t for t in tasks if t["type"] == task_type]
        answers = [a for a in graded if a["type"] == task_type]
        by_type[task_type] = {
            "proposals": len(props),
            "valid": sum(failure_reason(t) is None for t in props),
            "validity_rate": (sum(failure_reason(t) is None for t in props) / len(props)) if props else None,
            "reasons": dict(Counter(failure_reason(t) or "valid" for t in props)),
            "attempts": len(answers),
            "solved": sum(bool(a.get("correct")) for a in answers),
            "solve_rate": (sum(bool(a.get("correct")) for a in answers) / len(answers)) if answers else None,
            "answer_reasons": dict(Counter(a.get("reason") or a.get("parse_reason") or "ok" for a in answers)),
        }
    def mean_reward(role):
        values = [r["reward"] for r in rollouts if r["role"] == role and r["reward"] is not None]
        return sum(values) / len(values) if values else None
    tokens = Counter()
    for r in rollouts:
        tokens[f"{r['adapter']}/{r['role']}"] += r.get("tokens") or 0
    return {"by_type": by_type, "teacher_reward_mean": mean_reward("propose"),
            "student_reward_mean": mean_reward("solve"), "tokens": dict(tokens),
            "rollouts": dict(Counter(f"{r['adapter']}/{r['role']}" for r in rollouts))}


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0])
    for flag in ("--state", "--tasks", "--graded", "--pairing", "--out", "--ratings", "--stats"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "reward")
    state = load_state(args.state)
    tasks, graded = read_jsonl(args.tasks), read_jsonl(args.graded)
    rollouts, _ = build_rollouts(tasks, graded, params.reward.teacher_mode)
    # Buffer top-ups have no teacher this generation: they train the student but are no game.
    games = [(a["student"], a["teacher"], bool(a.get("correct"))) for a in graded
             if a.get("teacher") in state["ratings"] and a.get("task_origin") == "proposed"]
    ratings = update_from_games(state["ratings"], games, params.ratings.model_dump())
    stats = summarize(tasks, graded, rollouts)
    stats["games"] = len(games)
    stats["pairing_counts"] = read_json(args.pairing)["counts"]
    write_jsonl(args.out, rollouts)
    write_json(args.ratings, ratings)
    write_json(args.stats, stats)
    log.info("validity %s; solve %s; teacher reward %s; student reward %s; %d games",
             {t: v["validity_rate"] for t, v in stats["by_type"].items()},
             {t: v["solve_rate"] for t, v in stats["by_type"].items()},
             stats["teacher_reward_mean"], stats["student_reward_mean"], len(games))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
