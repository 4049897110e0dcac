"""One generation's metrics (`genNNN/metrics.json`): flat, numeric, sorted, what `dvc plots` draws.

Each function returns a flat dict for one concern; `stages.checkpoint` merges them. Definitions:

* **validity / solve rates** per task type and overall, from `reward_stats.json`.
* **signal accounting** (`signal.*`): the students' rollouts with a nonzero advantage, and how many (and
  what share) of them differ from their group only in format (-1 malformed against -0.5 wrong, no answer
  right) or in correctness (`populora.rl.rollouts.signal_accounting`).
* **complexity** (AST depth, cyclomatic complexity, lines, distinct variables) of the valid
  code_o / code_i programs the teachers wrote this generation. code_f is left out: a code_f
  proposal brings inputs and a message for a program drawn from the buffer, which its teacher
  did not write.
* **coverage**: normalised-AST hashes of valid code_o / code_i programs. The seed programs are
  preloaded (`init`), so they never count as new. Because the population has more teachers than
  the baseline has adapters, cumulative coverage grows faster by construction; two compute-matched
  views are therefore recorded: `coverage.new_per_proposal` (new programs / proposals) and
  `coverage.matched.*`, counted on a seeded subsample of exactly one adapter's proposals per
  generation (`propose.per_type` x 2 types, what the baseline makes), so both arms draw the same
  number of proposals.
* **isolation**: the sandbox layers verification ran under (`verify.required_layers`: `isolation.required` is 1 when any layer is required, `isolation.required_layers` how many).
* **games** per teacher, **ratings**, **compute** (samples, tokens, optimizer steps, trained tokens and
  rollouts with signal per slot), **distance** moved (`delta_norm.<slot>`, sum of ||B A||_F),
  **pairing** counts, **evolution** events and the fitness of every ranked member.
"""

from __future__ import annotations

import random
from statistics import mean

from populora.population.ratings import conservative
from populora.tasks.program_metrics import program_metrics
from populora.tasks.tasks import is_valid_task, program_key

IO_TYPES = ("code_o", "code_i")
COMPLEXITY = ("ast_depth", "cyclomatic_complexity", "loc", "distinct_variables")


def rate_metrics(stats: dict) -> dict:
    by_type = stats["by_type"]
    proposals = sum(r["proposals"] for r in by_type.values())
    attempts = sum(r["attempts"] for r in by_type.values())
    metrics = {
        "validity_rate": sum(r["valid"] for r in by_type.values()) / proposals if proposals else None,
        "solve_rate": sum(r["solved"] for r in by_type.values()) / attempts if attempts else None,
        "teacher_reward_mean": stats["teacher_reward_mean"],
        "student_reward_mean": stats["student_reward_mean"],
        "rating_games": stats["games"],
        "leaks.same_program_example_answers": stats.get("same_program_example_answers", 0),
        "leaks.same_program_example_correct": stats.get("same_program_example_correct", 0),
    }
    for task_type, row in by_type.items():
        for key in ("proposals", "valid", "validity_rate", "attempts", "solved", "solve_rate", "buffer_attempts"):
            metrics[f"{task_type}.{key}"] = row.get(key)
        for reason, count in row["reasons"].items():
            metrics[f"{task_type}.reason.{reason}"] = count
    for teacher, games in stats.get("games_per_teacher", {}).items():
        metrics[f"games.{teacher}"] = games
    return metrics | signal_metrics(stats.get("signal"))


def signal_metrics(signal: dict | None) -> dict:
    """`signal.solve_with_signal|format_only|correctness` and the two shares of the rollouts with signal
    (None when none had any); nothing for reward_stats.json written before the accounting."""
    if not signal:
        return {}
    n = signal["solve_with_signal"]
    return {
        "signal.solve_with_signal": n,
        "signal.format_only": signal["format_only"],
        "signal.correctness": signal["correctness"],
        "signal.format_only_share": round(signal["format_only"] / n, 6) if n else None,
        "signal.correctness_share": round(signal["correctness"] / n, 6) if n else None,
    }


def complexity_metrics(tasks: list[dict]) -> dict:
    """Mean complexity of the valid code_o / code_i programs proposed this generation."""
    metrics: dict[str, float | None] = {}
    for task_type in IO_TYPES:
        programs = [program_metrics(t["program"]) for t in tasks if t["type"] == task_type and is_valid_task(t)]
        metrics[f"{task_type}.program.n"] = len(programs)
        for name in COMPLEXITY:
            metrics[f"{task_type}.program.{name}"] = mean(p[name] for p in programs) if programs else None
    return metrics


def matched_subsample(tasks: list[dict], size: int, seed: int) -> list[dict]:
    """A seeded subsample of `size` code_o / code_i proposals (valid or not), in task order."""
    proposals = [t for t in tasks if t["type"] in IO_TYPES]
    if len(proposals) <= size:
        return proposals
    keep = set(random.Random(seed).sample(range(len(proposals)), size))
    return [t for i, t in enumerate(proposals) if i in keep]


def new_program_keys(tasks: list[dict], seen: set[str]) -> set[str]:
    """Hashes of valid code_o / code_i programs in `tasks` that are not in `seen`."""
    keys = {program_key(t["program"]) for t in tasks if t["type"] in IO_TYPES and is_valid_task(t)}
    return {k for k in keys if k is not None} - seen


def coverage_update(
    tasks: list[dict], seen: list[str], matched_seen: list[str], *, per_adapter: int, seed: int
) -> tuple[list[str], list[str], dict]:
    """(all hashes so far, matched hashes so far, coverage metrics) after this generation's proposals."""
    new = new_program_keys(tasks, set(seen))
    matched_new = new_program_keys(matched_subsample(tasks, per_adapter, seed), set(matched_seen))
    io_proposals = sum(t["type"] in IO_TYPES for t in tasks)
    all_hashes, matched_hashes = sorted(set(seen) | new), sorted(set(matched_seen) | matched_new)
    metrics = {
        "coverage.distinct_programs": len(all_hashes),
        "coverage.new_programs": len(new),
        "coverage.proposals": io_proposals,
        "coverage.new_per_proposal": len(new) / io_proposals if io_proposals else None,
        "coverage.matched.distinct_programs": len(matched_hashes),
        "coverage.matched.new_programs": len(matched_new),
        "coverage.matched.proposals": min(per_adapter, io_proposals),
    }
    return all_hashes, matched_hashes, metrics


def rating_metrics(ratings: dict) -> dict:
    metrics = {}
    for slot, value in ratings.items():
        metrics[f"rating.{slot}.mu"] = value["mu"]
        metrics[f"rating.{slot}.sigma"] = value["sigma"]
        metrics[f"rating.{slot}.conservative"] = conservative(value)
    return metrics


def compute_metrics(stats: dict, update_stats: dict) -> dict:
    """What each adapter consumed: samples and tokens per role, optimizer steps, trained tokens."""
    metrics = {f"tokens.{key}": tokens for key, tokens in stats["tokens"].items()}
    metrics |= {f"samples.{key}": count for key, count in stats["rollouts"].items()}
    for slot, row in update_stats.items():
        metrics[f"optimizer_steps.{slot}"] = row["optimizer_steps"]
        metrics[f"trained_tokens.{slot}"] = row["trained_tokens"]
        metrics[f"rollouts_with_signal.{slot}"] = row["rollouts_with_signal"]
        metrics |= update_diagnostics(slot, row)
    return metrics


# the per-step figures of `populora.rl.update.AdapterUpdate` kept in a generation's metrics
STEP_DIAGNOSTICS = (
    "loss",
    "grad_norm",
    "entropy",
    "sampler_gap_mean",
    "logprob_change_positive",
    "logprob_change_negative",
)


def update_diagnostics(slot: str, row: dict) -> dict:
    """`update.<slot>.step<k>.<figure>` per optimizer step (loss, gradient norm before clipping, entropy
    of the trained tokens, sampler gap, log-prob change of A > 0 and A < 0 answers), and the share of
    rollouts without signal and of tasks whose samples all earned the same reward."""
    metrics = {}
    if row.get("zero_advantage_share") is not None:
        metrics[f"update.{slot}.zero_advantage_share"] = row["zero_advantage_share"]
    if row.get("tasks_sampled_more_than_once"):
        metrics[f"update.{slot}.tasks_without_spread_share"] = round(
            row["tasks_without_spread"] / row["tasks_sampled_more_than_once"], 6
        )
    for k, step in enumerate(row.get("steps") or []):
        for name in STEP_DIAGNOSTICS:
            if step.get(name) is not None:
                metrics[f"update.{slot}.step{k}.{name}"] = round(step[name], 8)
    return metrics


def distance_metrics(norms: dict[str, float]) -> dict:
    """`delta_norm.<slot>`: sum over modules of ||B A||_F of the adapter each slot holds at the
    checkpoint (after evolution), see `populora.lm.adapters.delta_norm`."""
    return {f"delta_norm.{slot}": round(norm, 8) for slot, norm in norms.items()}


def pairing_metrics(pairing: dict) -> dict:
    """PFSP's matchups: task slots each teacher filled for each student."""
    return {f"pairing.{t}.{s}": n for t, row in pairing["counts"].items() for s, n in row.items()}


def evolution_metrics(evolution: dict) -> dict:
    metrics = {"evolution_events": len(evolution["events"])}
    for ranking in evolution.get("rankings", {}).values():
        for row in ranking:
            metrics[f"fitness.{row['slot']}"] = row["fitness"]
    return metrics


def isolation_metrics(report: dict) -> dict:
    """The sandbox layers the verifier ran this generation's programs under (1 on, 0 off)."""
    metrics = {f"isolation.{layer}": int(bool(on)) for layer, on in report["layers"].items()}
    required = report.get("required")
    metrics["isolation.required"] = int(bool(required))  # 1 when any layer is required
    if isinstance(required, list):
        metrics["isolation.required_layers"] = len(required)
    return metrics
