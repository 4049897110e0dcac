"""Supervised examples for the warm start: a verified task as the solver sees it, and the answer it should give.

An example is the solver's exact prompt and plan (`populora.tasks.prompts.solver_prompt` with worked
examples, the chat template, the scaffold's prefill such as "```output\\n") and, as the target, the gold
answer and the closing fence: what a correct scaffolded completion is, so the parser and grader accept it
(`tests/test_warm_start.py`). Token ids are laid out as the sampler feeds them (prompt, then prefill, each
encoded on its own: `populora.lm.sampling`), so the model is trained on the contexts it answers in.

    examples = build_examples(tasks, seeds, chat=chat_wrapper(tokenizer), worked_examples=1, seed=0)
    rows = [encode_example(e, tokenizer) for e in examples]      # {"context": [...], "target": [...]}
"""

from __future__ import annotations

import random
from collections.abc import Callable

from populora.tasks import prompts
from populora.tasks.plans import FENCE
from populora.tasks.roles import make_plan
from populora.tasks.tasks import program_key

WORKED_FIELDS = ("task_id", "type", "program", "inputs", "outputs", "message")


def gold_answer(task: dict) -> str:
    """The answer a correct solver gives: the output's repr for `code_o`, the gold input for `code_i`."""
    if task["type"] == "code_o":
        return task["outputs"][0]
    if task["type"] == "code_i":
        return task["inputs"][0]
    raise ValueError(f"the warm start trains code_o and code_i answers, not {task['type']!r}")


def target_text(task: dict) -> str:
    """What the model writes after the prefill: the answer, a line break and the closing fence (its stop)."""
    return f"{gold_answer(task)}\n{FENCE}"


def build_examples(
    tasks: list[dict],
    seeds: list[dict],
    *,
    chat: Callable[[str], str],
    worked_examples: int,
    seed: int,
    mode: str = "scaffolded",
) -> list[dict]:
    """One example per verified task: `prompt` (the chat-wrapped solver prompt), `prefill`, `target`.

    Each worked example is drawn, half the time, from `seeds` (what the pool's prompts show) and otherwise
    from the tasks *before* it in `tasks` (what a grown buffer shows), never one with the task's own program:
    so the first n examples are the same whatever follows them, and a shorter budget is a prefix of a longer."""
    if mode != "scaffolded":
        raise ValueError("the warm start trains the scaffolded answer format (solve.mode: scaffolded)")
    rng = random.Random(seed)
    earlier: dict[str, list[dict]] = {}
    seeds_by_type: dict[str, list[dict]] = {}
    for row in seeds:
        seeds_by_type.setdefault(row["type"], []).append(row)
    out = []
    for task in tasks:
        picked = [
            pick_worked(task, seeds_by_type.get(task["type"], []), earlier.get(task["type"], []), rng)
            for _ in range(worked_examples)
        ]
        shown = [{k: e.get(k) for k in WORKED_FIELDS} for e in picked if e is not None]
        plan = make_plan(
            prompts.solver_prompt(task, shown), prompts.solver_steps(task["type"]), mode, chat, task["type"], "solve"
        )
        out.append(
            {
                "task_id": task["task_id"],
                "type": task["type"],
                "family": task.get("family"),
                "prompt": plan.prompt,
                "prefill": plan.steps[0].prefill,
                "target": target_text(task),
            }
        )
        earlier.setdefault(task["type"], []).append(task)
    return out


def pick_worked(task: dict, seeds: list[dict], earlier: list[dict], rng: random.Random, tries: int = 8) -> dict | None:
    """A worked example for `task`: from `seeds` or `earlier` (half and half when both exist), never one whose
    normalised program is the task's (`program_key`: it would hand over the answer); None if none is found."""
    key = program_key(task.get("program"))
    for _ in range(tries):
        source = seeds if earlier == [] or (seeds and rng.random() < 0.5) else earlier
        if not source:
            return None
        choice = rng.choice(source)
        if key is None or program_key(choice.get("program")) != key:
            return choice
    return None


def encode_example(example: dict, tokenizer) -> dict:
    """`context` (prompt then prefill, as the sampler encodes them) and `target` token ids."""

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []

    return {"context": encode(example["prompt"]) + encode(example["prefill"]), "target": encode(example["target"])}


def answer_budget(tasks: list[dict], tokenizer) -> int:
    """Tokens the longest gold answer of `tasks` takes with its closing fence (what `solve.max_new_tokens`
    must allow)."""
    return max((len(tokenizer(target_text(t), add_special_tokens=False)["input_ids"]) for t in tasks), default=0)
