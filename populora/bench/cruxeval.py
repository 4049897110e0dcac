"""CRUXEval (AZR's in-distribution benchmark): CRUXEval-O is code_o, CRUXEval-I is code_i.

Data: `cruxeval/cruxeval.jsonl` of the benchmark folder (800 rows `{id, code, input, output}`,
facebookresearch/cruxeval, MIT), or the official file (`OFFICIAL_URL`) when `bench.data_dir` is
null. `limit = N` scores the first N rows in file order.

A row becomes a verifier task row (`task_row`), so answers are graded by `populora.verifier.grade_rows`
in the sandbox exactly like the students' answers during training: code_o by value equality of the
predicted output with the gold repr, code_i by executing `f(predicted input)` and comparing with the
gold output (the official evaluation's `assert f(input) == output`).

Prompts (`bench.cruxeval.prompt`):

* `project` (default): the solver prompt the students train on (`populora.tasks.prompts.solver_prompt`,
  plan by `populora.tasks.roles.make_plan` in `solve.mode`, answer by `populora.tasks.parsing.parse_answer`), with
  `bench.cruxeval.worked_examples` worked examples drawn from CRUXEval rows outside the scored slice
  (or, when every row is scored, from the other rows), with a fixed seed: every model sees the same
  prompts, so per-problem results pair up across models;
* `official`: CRUXEval's direct prompts (two fixed examples, `[PYTHON] ... assert f(...) == ??`),
  plain text continuation stopped at `[/ANSWER]`, post-processed as the official harness does
  (code_o: the text after `==`; code_i: the call before `==`, whose arguments are the answer).
"""

from __future__ import annotations

import json
import random
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING

from populora.bench import BenchError, data_source, relative_data_file
from populora.bench.gold_loglik import GoldItem, gold_logprobs
from populora.core.io import write_jsonl
from populora.core.progress import Progress
from populora.tasks import prompts
from populora.tasks.parsing import parse_answer
from populora.tasks.roles import make_plan

if TYPE_CHECKING:  # annotations only: the runner table (runners.py) imports this module
    from populora.bench.models import BenchModel
    from populora.bench.partial import Partial
    from populora.bench.settings import BenchSettings

BENCHMARKS = {"cruxeval_o": "code_o", "cruxeval_i": "code_i"}
DATA_FILE = "cruxeval/cruxeval.jsonl"
OFFICIAL_URL = "https://raw.githubusercontent.com/facebookresearch/cruxeval/main/data/cruxeval.jsonl"
EXAMPLE_SEED = 0
ANSWER_END = "[/ANSWER]"

OFFICIAL_OUTPUT_PROMPT = """You are given a Python function and an assertion containing an input to the function. Complete the assertion with a literal (no unsimplified expressions, no function calls) containing the output when executing the provided code on the given input, even if the function is incorrect or incomplete. Do NOT output any extra information. Provide the full assertion with the correct output in [ANSWER] and [/ANSWER] tags, following the examples.

[PYTHON]
def f(n):
    return n
assert f(17) == ??
[/PYTHON]
[ANSWER]
assert f(17) == 17
[/ANSWER]

[PYTHON]
def f(s):
    return s + "a"
assert f("x9j") == ??
[/PYTHON]
[ANSWER]
assert f("x9j") == "x9ja"
[/ANSWER]

[PYTHON]
{code}
assert f({input}) == ??
[/PYTHON]
[ANSWER]
"""

OFFICIAL_INPUT_PROMPT = """You will be given a function f and an output in the form f(??) == output. Find any input such that executing f on the input leads to the given output. There may be multiple answers, but you should only output one. In [ANSWER] and [/ANSWER] tags, complete the assertion with one such input that will produce the output when executing the function.

[PYTHON]
def f(my_list):
    count = 0
    for i in my_list:
        if len(i) % 2 == 0:
            count += 1
    return count
assert f(??) == 3
[/PYTHON]
[ANSWER]
assert f(["mq", "px", "zy"]) == 3
[/ANSWER]

[PYTHON]
def f(s1, s2):
    return s1 + s2
assert f(??) == "banana"
[/PYTHON]
[ANSWER]
assert f("ba", "nana") == "banana"
[/ANSWER]

[PYTHON]
{code}
assert f(??) == {output}
[/PYTHON]
[ANSWER]
"""


def data_path(data_dir: Path) -> Path:
    return Path(data_dir) / DATA_FILE


def load_rows(data_dir: Path | None) -> list[dict]:
    """Every CRUXEval row in file order, from the offline folder or the official file."""
    if data_dir is None:
        try:
            with urllib.request.urlopen(OFFICIAL_URL, timeout=60) as response:  # fixed https URL
                text = response.read().decode("utf-8")
        except OSError as error:
            raise BenchError(
                f"could not download CRUXEval from {OFFICIAL_URL}: {error}. Fix: set bench.data_dir "
                "(or POPULORA_BENCHMARKS) to a folder holding cruxeval/cruxeval.jsonl."
            ) from error
        source = OFFICIAL_URL
    else:
        path = data_path(data_dir)
        if not path.is_file():
            raise BenchError(
                f"benchmark file for CRUXEval not found: {path}. Fix: point bench.data_dir (or the "
                "POPULORA_BENCHMARKS environment variable) at the folder holding cruxeval/cruxeval.jsonl, "
                "or set bench.data_dir: null to use the official download."
            )
        text, source = path.read_text(encoding="utf-8"), str(path)
    rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    for row in rows:
        if not all(isinstance(row.get(key), str) for key in ("id", "code", "input", "output")):
            raise BenchError(
                f"{source}: a row lacks id/code/input/output strings ({str(row)[:80]}). "
                "Fix: use the official cruxeval.jsonl."
            )
    return rows


def task_row(row: dict, task_type: str) -> dict:
    """A CRUXEval row as a valid verifier task (one input, one gold output)."""
    return {
        "task_id": row["id"],
        "type": task_type,
        "program": row["code"],
        "inputs": [row["input"]],
        "outputs": [row["output"]],
        "message": None,
        "valid": True,
        "origin": "cruxeval",
    }


def split(rows: list[dict], limit: int | None) -> tuple[list[dict], list[dict]]:
    """(scored rows: the first `limit`, all when None; worked-example pool: the rest)."""
    scored = rows[:limit] if limit else list(rows)
    return scored, rows[len(scored) :]


def project_prompts(
    tasks: list[dict], pool: list[dict], *, worked_examples: int, seed: int = EXAMPLE_SEED
) -> list[tuple[str, list[str]]]:
    """(solver prompt, ids of its worked examples) per task. Examples come from `pool` (tasks of the
    same type), or from the other scored tasks when the pool is empty; drawn with a fixed seed."""
    rng = random.Random(seed)
    out = []
    for task in tasks:
        candidates = pool or [t for t in tasks if t["task_id"] != task["task_id"]]
        examples = rng.sample(candidates, min(worked_examples, len(candidates)))
        out.append((prompts.solver_prompt(task, examples), [e["task_id"] for e in examples]))
    return out


def official_prompt(task: dict) -> str:
    if task["type"] == "code_o":
        return OFFICIAL_OUTPUT_PROMPT.format(code=task["program"], input=task["inputs"][0])
    return OFFICIAL_INPUT_PROMPT.format(code=task["program"], output=task["outputs"][0])


def plans(
    tasks: list[dict], pool: list[dict], *, prompt: str, mode: str, worked_examples: int, chat
) -> list[tuple[prompts.Plan, list[str]]]:
    """One generation plan (and its worked-example ids) per task."""
    if prompt == "official":
        return [
            (prompts.Plan(prompt=official_prompt(t), steps=(prompts.Step("", stop=ANSWER_END),)), []) for t in tasks
        ]
    built = project_prompts(tasks, pool, worked_examples=worked_examples)
    return [
        (make_plan(text, prompts.solver_steps(t["type"]), mode, chat, t["type"], "solve"), ids)
        for t, (text, ids) in zip(tasks, built)
    ]


def parse_official(text: str, task_type: str) -> tuple[str | None, str | None]:
    """The official post-processing: cut at [/ANSWER]; code_o keeps what follows `==`, code_i the
    call before it, reduced to its argument list (the answer format of the verifier)."""
    text = text.split(ANSWER_END, 1)[0].strip()
    if not text:
        return None, "no_answer_block"
    if task_type == "code_o":
        answer = text.split("==", 1)[1] if "==" in text else text
        answer = answer.strip()
        return (answer, None) if answer else (None, "no_answer_block")
    call = text.split("==", 1)[0].strip()
    if "assert f" in call:
        call = "f" + call.split("assert f", 1)[1].strip()
    if not (call.startswith("f(") and call.endswith(")")):
        return None, "format"
    return call[2:-1].strip(), None


def extract(text: str, task_type: str, *, prompt: str, mode: str, truncated: bool) -> tuple[str | None, str | None]:
    """The answer of one completion (None and a reason when there is none)."""
    if prompt == "official":
        return parse_official(text, task_type)
    return parse_answer(text, task_type, mode=mode, truncated=truncated)


def gold_item(task: dict, plan: prompts.Plan, adapter: str | None, prompt: str) -> GoldItem:
    """What a model should write after the benchmark's own prompt to be right: the gold answer and
    the end of its block (project prompt: after the answer fence's prefill; official prompt: the
    assertion and `[/ANSWER]`), scored teacher-forced by `populora.bench.gold_loglik`."""
    if prompt == "official":
        call = f"assert f({task['inputs'][0]}) == {task['outputs'][0]}"
        return GoldItem(plan.prompt, f"{call}\n{ANSWER_END}", adapter)
    gold = task["outputs"][0] if task["type"] == "code_o" else task["inputs"][0]
    return GoldItem(plan.prompt + plan.steps[0].prefill, f"{gold}\n```", adapter)


def gold_scores(outputs: list[dict], items: list[GoldItem], lm, tokenizer, settings) -> list[tuple[float, int]] | None:
    """Each answer's gold log-likelihood: the one its generation scored (hf engine), else a
    teacher-forced pass of its own (`gold_logprobs`: pieces kept from a run before this was scored
    in the prefill, or a sampler without a carried cache); None where the engine gives no forward
    pass (vllm)."""
    gold: list[tuple[float, int] | None] = [tuple(o["gold"]) if o.get("gold") is not None else None for o in outputs]
    missing = [k for k, value in enumerate(gold) if value is None]
    if missing and hasattr(lm, "parameters"):
        scored = gold_logprobs(lm, tokenizer, [items[k] for k in missing], batch_size=settings.batch_size)
        for k, value in zip(missing, scored):
            gold[k] = value
    scores = [value for value in gold if value is not None]
    return scores if len(scores) == len(gold) else None


# ---------------------------------------------------------------- the runner


def run(
    settings: BenchSettings, models: list[BenchModel], base_model: Path, out: Path, log, partial: Partial | None = None
) -> dict[str, dict]:
    """CRUXEval-O/-I of every model in one generation pass (rows select their model's adapter), in
    pieces of problems kept in `partial` as they finish (`populora.bench.partial`)."""
    from populora.tasks.prompts import chat_wrapper

    bench = settings.benchmark
    task_type, cfg = BENCHMARKS[bench], settings.cruxeval
    data_dir = settings.data_dir
    scored, pool = split(load_rows(data_dir), settings.limit)
    tasks = [task_row(row, task_type) for row in scored]
    pool_tasks = [task_row(row, task_type) for row in pool]
    log.info(
        "%s: %d problems (%s) from %s, %s prompt, %d model(s) in one pass",
        bench,
        len(tasks),
        task_type,
        data_dir or OFFICIAL_URL,
        cfg.prompt,
        len(models),
    )
    adapters = {name: path for model in models for name, path in model.adapters.items()}
    tokenizer, lm = settings.load_model(base_model, adapters)
    built = plans(
        tasks,
        pool_tasks,
        prompt=cfg.prompt,
        mode=settings.solve_mode,
        worked_examples=cfg.worked_examples,
        chat=chat_wrapper(tokenizer),
    )
    gold_items = _gold_items(tasks, built, models, cfg.prompt)

    start = time.perf_counter()
    outputs = _generate(lm, tokenizer, settings, models, tasks, built, gold_items, partial, log)
    generation_s = time.perf_counter() - start
    start = time.perf_counter()
    gold = gold_scores(outputs, gold_items, lm, tokenizer, settings)
    gold_s = time.perf_counter() - start
    lm = None  # free the model before grading
    graded = _grade(tasks * len(models), outputs, settings, task_type, cfg.prompt, log)
    handed_back = handed_back_baseline(tasks, settings.verify)
    results = {}
    for index, model in enumerate(models):
        part = slice(index * len(tasks), (index + 1) * len(tasks))
        samples = _samples(tasks, built, outputs[part], graded[part], task_type)
        write_jsonl(out / model.name / "samples.jsonl", samples)
        results[model.name] = {
            **_gold_summary(tasks, gold[part] if gold is not None else None, outputs[part], gold_s),
            **_summary(samples, settings, handed_back),
            "generation_s": round(generation_s, 1),
            "models_in_pass": len(models),
            "s_per_problem": round(generation_s / max(1, len(outputs)), 2),
            "tokens": sum(row["tokens"] for row in samples),
            "harness": "populora.verifier",
            "data": data_source(data_dir, relative_data_file(bench), OFFICIAL_URL),
        }
    return results


def _gold_items(
    tasks: list[dict], built: list[tuple[prompts.Plan, list[str]]], models: list[BenchModel], prompt: str
) -> list[GoldItem]:
    """What each model should write after each prompt, model by model in the order of the outputs."""
    return [
        gold_item(task, plan, model.name if model.adapter is not None else None, prompt)
        for model in models
        for task, (plan, _) in zip(tasks, built)
    ]


def _generate(
    lm,
    tokenizer,
    settings: BenchSettings,
    models: list[BenchModel],
    tasks: list[dict],
    built: list[tuple[prompts.Plan, list[str]]],
    gold_items: list[GoldItem],
    partial: Partial | None,
    log,
) -> list[dict]:
    """Every model's greedy completion of every plan, model by model, in pieces kept in `partial`."""
    from populora.bench.partial import generate_in_pieces, piece_size
    from populora.lm.sampling import GenRow, run_plans

    bench = settings.benchmark

    def row(k: int, i: int) -> GenRow:
        # the row carries its gold answer: the hf engine scores it in the prompt's own prefill
        item = gold_items[k * len(tasks) + i]
        return GenRow(built[i][0], item.adapter, item.gold)

    def generate(indices: list[int], progress) -> dict[str, list[dict]]:
        rows = [row(k, i) for k in range(len(models)) for i in indices]
        made = run_plans(
            lm,
            tokenizer,
            rows,
            temperature=0.0,
            top_p=1.0,
            max_new_tokens=settings.max_new_tokens,
            batch_size=settings.batch_size,
            seed=0,
            desc=bench,
            progress=progress,
        )
        return {
            model.name: [_kept_output(o) for o in made[k * len(indices) : (k + 1) * len(indices)]]
            for k, model in enumerate(models)
        }

    generated = generate_in_pieces(
        partial,
        models,
        [t["task_id"] for t in tasks],
        generate,
        size=piece_size(settings, len(models)),
        cost=lambda i: len(built[i][0].steps) * len(models),
        desc=bench,
        unit="steps",
        log=log,
    )
    return [output for model in models for output in generated[model.name]]


def _kept_output(output) -> dict:
    """What is kept of one completion (`run_plans`'s output), JSON-safe as `partial` stores it."""
    return {
        "completion": output.completion,
        "truncated": output.truncated,
        "tokens": output.tokens_generated,
        "gold": list(output.gold) if output.gold is not None else None,
    }


def _grade(
    all_tasks: list[dict], outputs: list[dict], settings: BenchSettings, task_type: str, prompt: str, log
) -> list[dict]:
    """Each completion's answer, graded against its task in the verifier's sandbox."""
    from populora.verifier import grade_rows

    answers = []
    for task, output in zip(all_tasks, outputs):
        answer, reason = extract(
            output["completion"], task_type, prompt=prompt, mode=settings.solve_mode, truncated=output["truncated"]
        )
        answers.append({"task_id": task["task_id"], "answer": answer, "parse_reason": reason})
    log.info("grading %d answers in the verifier's sandbox", len(answers))
    with Progress(len(answers), f"{settings.benchmark} grading", unit="answers", log=log) as progress:
        return grade_rows(all_tasks, answers, settings.verify, progress=progress.update)


def _samples(
    tasks: list[dict],
    built: list[tuple[prompts.Plan, list[str]]],
    outputs: list[dict],
    graded: list[dict],
    task_type: str,
) -> list[dict]:
    """One model's rows of samples.jsonl: the problem, its completion and its verdict."""
    return [
        {
            "task_id": t["task_id"],
            "type": task_type,
            "program": t["program"],
            "input": t["inputs"][0],
            "gold_output": t["outputs"][0],
            "examples": examples,
            "completion": o["completion"],
            "truncated": o["truncated"],
            "tokens": o["tokens"],
            "answer": g["answer"],
            "parse_reason": g["parse_reason"],
            "correct": bool(g["correct"]),
            "reason": g["reason"],
        }
        for t, (_, examples), o, g in zip(tasks, built, outputs, graded)
    ]


def _gold_summary(
    tasks: list[dict], own_gold: list[tuple[float, int]] | None, outputs: list[dict], gold_s: float
) -> dict:
    """One model's gold log-likelihoods (per problem and their mean), or why there are none."""
    if own_gold is None:
        return {"gold_loglik": {"skipped": "the vllm engine gives no forward pass"}}
    return {
        "per_problem_gold_logprob": {t["task_id"]: round(v, 6) for t, (v, _) in zip(tasks, own_gold)},
        "gold_loglik": {
            "mean": round(sum(v for v, _ in own_gold) / len(own_gold), 6) if own_gold else None,
            "tokens": sum(n for _, n in own_gold),
            "seconds": round(gold_s, 1),
            "in_generation": sum(o.get("gold") is not None for o in outputs),
        },
    }


def _summary(samples: list[dict], settings: BenchSettings, handed_back: dict) -> dict:
    """One model's score and the settings it was scored under."""
    from populora.bench.diagnostics import answer_diagnostics

    cfg = settings.cruxeval
    correct = sum(row["correct"] for row in samples)
    return {
        "diagnostics": answer_diagnostics(samples),
        "max_new_tokens": settings.max_new_tokens,
        "baseline": handed_back,
        "n": len(samples),
        "per_problem": {row["task_id"]: int(row["correct"]) for row in samples},
        "metrics": {"pass@1": correct / len(samples) if samples else 0.0},
        "prompt": cfg.prompt,
        "mode": settings.solve_mode if cfg.prompt == "project" else "official",
        "worked_examples": cfg.worked_examples if cfg.prompt == "project" else 2,
    }


def handed_back_baseline(tasks: list[dict], config) -> dict:
    """What a score on this benchmark stands beside: CRUXEval-O's copy baseline (an argument of the call given as
    the output), CRUXEval-I's echo baseline (the output handed back as the input), graded in the sandbox
    (`populora.verifier.baselines`): `{"kind", "correct", "n", "accuracy", "per_problem"}`."""
    from populora.verifier.baselines import BASELINE_OF, baseline_verdicts

    verdicts = baseline_verdicts(tasks, config)
    kind = BASELINE_OF[tasks[0]["type"]] if tasks else "copy"
    per_problem = {t["task_id"]: int(verdicts[t["task_id"]][kind]) for t in tasks}
    correct = sum(per_problem.values())
    return {
        "kind": kind,
        "correct": correct,
        "n": len(tasks),
        "accuracy": correct / len(tasks) if tasks else 0.0,
        "per_problem": per_problem,
    }
