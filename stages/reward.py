"""Stage reward: rewards, TRR++ advantages and TrueSkill updates from the graded attempts.

    python -m stages.reward --params params.yaml --arm population --gen 0 --state results/population/init \
        --tasks results/population/gen000/tasks.jsonl --graded results/population/gen000/graded.jsonl \
        --pairing results/population/gen000/pairing.json --rollouts results/population/gen000/rollouts.jsonl \
        --ratings results/population/gen000/ratings.json --stats results/population/gen000/reward_stats.json

Definitions (rewards, games, advantages) are in `populora.rl.rollouts`. Only attempts on this
generation's proposals by a paired student are games; buffer fill-ins train the student only.
"""

from __future__ import annotations

from populora.core.io import read_json, write_json
from populora.core.rows import GradedAnswer, Rollout, Task, read_rows, write_rows
from populora.core.state import load_buffer, load_state
from populora.population.ratings import update_from_games
from populora.rl.rollouts import build_rollouts, generation_stats, played_games, same_program_examples
from stages._common import setup, stage_parser


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0])
    for flag in ("--state", "--tasks", "--graded", "--pairing", "--rollouts", "--ratings", "--stats"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "reward")
    state = load_state(args.state)
    tasks, graded, pairing = read_rows(args.tasks, Task), read_rows(args.graded, GradedAnswer), read_json(args.pairing)
    rollouts = build_rollouts(
        tasks, graded, params.reward.teacher_mode, params.reward.advantage_baseline, params.reward.scale_rewards
    )
    games = played_games(graded, tasks, pairing)
    ratings = update_from_games(state.ratings, games, params.ratings.model_dump())
    stats = generation_stats(tasks, graded, rollouts, games, params.reward.advantage_baseline)
    stats["pairing_counts"] = pairing["counts"]
    programs = {t["task_id"]: t.get("program") for t in [*load_buffer(args.state), *tasks]}
    stats["same_program_example_answers"], stats["same_program_example_correct"] = same_program_examples(
        graded, programs
    )
    write_rows(args.rollouts, rollouts, Rollout)
    write_json(args.ratings, ratings)
    write_json(args.stats, stats)
    log.info(
        "validity %s; solve %s; teacher reward %s; student reward %s; games per teacher %s",
        {t: v["validity_rate"] for t, v in stats["by_type"].items()},
        {t: v["solve_rate"] for t, v in stats["by_type"].items()},
        stats["teacher_reward_mean"],
        stats["student_reward_mean"],
        stats["games_per_teacher"],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
