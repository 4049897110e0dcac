"""What a warm start buys, measured: models answer verified family tasks, per type and family, beside the baselines.

Every model is a member of one stacked sampler (`populora.lm.engines.load_sampler`): `None` is the model
folder itself (the raw base, or a merged warm base), a name is an adapter on it (a checkpoint of the budget
sweep). Each answers every task greedily and `samples` times at temperature 1 with the solver's exact prompt
(the task's worked examples attached once: `populora.heldout.pool.attach_examples`), graded in the sandbox
(`populora.heldout.scoring`). `summarize` turns the per-task counts into per-type and per-family rates, and
the paired difference of two models over tasks with its 95% interval (`populora.core.stats.paired_bootstrap`).

    scores = score_models(params, "results/base_model", {"lr1e-3-n800": "sweep/adapters/..."}, tasks, box,
                          samples=4)
    table = summarize(scores, tasks, samples=4)                   # model -> type|family -> rates
    gain = paired_gain(scores, tasks, "lr1e-3-n800", "base")      # per type: mean, interval
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from statistics import mean

from populora.heldout.pool import BASE


def score_models(
    params,
    model_dir: str | Path,
    adapters: dict[str, str | Path],
    tasks: list[dict],
    sandbox,
    *,
    samples: int,
    seed: int = 0,
    base: bool = True,
) -> dict[str, dict[str, dict[str, int]]]:
    """model -> task_id -> {"greedy": 0|1, "correct": right answers of `samples` at temperature 1}; the model
    folder itself is `base` (scored when `base`), each adapter its name."""
    from populora.heldout.scoring import pass_counts, score_members
    from populora.lm.engines import load_sampler

    tokenizer, model = load_sampler(model_dir, adapters, params)
    members: list[str | None] = [*([None] if base else []), *adapters]
    _, greedy = score_members(params, model, tokenizer, tasks, members, {}, sandbox)
    counts = (
        pass_counts(params, model, tokenizer, tasks, members, sandbox, samples=samples, seed=seed) if samples else {}
    )
    out = {}
    for member in members:
        name = member or BASE
        out[name] = {
            t["task_id"]: {
                "greedy": greedy.get(name, {}).get(t["task_id"], 0),
                "correct": counts.get(name, {}).get(t["task_id"], 0),
            }
            for t in tasks
        }
    return out


def _rates(verdicts: dict[str, dict[str, int]], ids: list[str], samples: int) -> dict:
    return {
        "n": len(ids),
        "greedy": round(mean(verdicts[t]["greedy"] for t in ids), 4) if ids else None,
        "pass_rate": round(mean(verdicts[t]["correct"] / samples for t in ids), 4) if ids and samples else None,
    }


def groups(tasks: list[dict]) -> dict[str, list[str]]:
    """Group name -> task ids: every type (`code_o`), and every type within a family (`code_o list_reduce`)."""
    out: dict[str, list[str]] = defaultdict(list)
    for task in tasks:
        out[task["type"]].append(task["task_id"])
        out[f"{task['type']} {task.get('family')}"].append(task["task_id"])
    return dict(sorted(out.items()))


def summarize(scores: dict, tasks: list[dict], *, samples: int) -> dict[str, dict[str, dict]]:
    """model -> group (`groups`) -> {n, greedy, pass_rate}."""
    named = groups(tasks)
    return {
        model: {group: _rates(verdicts, ids, samples) for group, ids in named.items()}
        for model, verdicts in scores.items()
    }


def paired_gain(
    scores: dict, tasks: list[dict], model: str, against: str, *, samples: int, measure: str = "pass_rate"
) -> dict[str, dict]:
    """Per type: `model` minus `against` on the same tasks (the pass rate over `samples` answers, or the greedy
    verdict), in points, with the 95% paired bootstrap interval over tasks."""
    from populora.core.stats import paired_bootstrap

    out = {}
    for task_type in sorted({t["type"] for t in tasks}):
        ids = [t["task_id"] for t in tasks if t["type"] == task_type]

        def value(name: str, tid: str) -> float:
            row = scores[name][tid]
            return row["correct"] / samples if measure == "pass_rate" else row["greedy"]

        diffs = [value(model, t) - value(against, t) for t in ids]
        point, low, high = paired_bootstrap(diffs)
        out[task_type] = {
            "points": round(100 * point, 2),
            "interval": [round(100 * low, 2), round(100 * high, 2)],
            "n": len(ids),
            "excludes_zero": low > 0 or high < 0,
        }
    return out
