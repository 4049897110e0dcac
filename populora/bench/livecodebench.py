"""LiveCodeBench code generation (the paper's third code benchmark, opt-in): data, prompt, code extraction.

    problems, source = load_problems(data_dir, params.bench.livecodebench, limit)
    text = chat_prompt(problems[0], tokenizer)          # what the model is given (greedy, pass@1)
    code = extract_code(completion)                     # what runs against the tests
    # grading: populora/bench/livecodebench_grading.py (every test case in the verifier's sandbox)

Data. `bench.livecodebench.release` (`release_v5`: every problem up to v5; `v5`: only those added in
v5) of the official `livecodebench/code_generation_lite`: the local copy in the same schema,
`<bench.data_dir>/livecodebench/<release>.jsonl`, when there is one, else the hub through `datasets`
(the release's files test.jsonl, test2.jsonl, ... as the dataset's loading script maps them). With
neither, params validation fails before any stage runs (`populora.core.benchmark_data`). Problems are kept
when `start_date <= contest_date <= end_date` (dates at midnight, as lcb_runner's
`load_code_generation_dataset` compares them): score only problems published after the base model's
training cut-off, LiveCodeBench's answer to contamination. `bench.limit(s)` then keeps the first N in
file order.

Rows (the official schema): question_title, question_content, platform, question_id, contest_id,
contest_date (ISO datetime), starter_code, difficulty, public_test_cases (JSON text of a list of
{"input", "output", "testtype"}), private_test_cases (the same JSON text, or base64 of zlib of a
pickle of that JSON text), metadata (JSON text; `func_name` marks a LeetCode-style functional problem).
A pickle is read with an unpickler that admits nothing but a plain str (no class, no function, no
object from the internet); anything else is refused, naming the problem. Tests run public first,
then private, as lcb_runner's `get_evaluation_sample` orders them.

Prompt: lcb_runner's generic chat format (lcb_runner/prompts/code_generation.py), the system message
`SYSTEM_MESSAGE` and the user message of `get_generic_question_template_answer`: the question, then
the format instruction with the starter code (functional problems) or with a `# YOUR CODE HERE`
block (stdin problems), then "### Answer: (use the provided format with backticks)". It goes through
the tokenizer's chat template (plain "system\\n\\nuser" text without one). Extraction is lcb_runner's
`extract_code`: the lines between the last two lines holding a ``` fence; without two fences, no code.
"""

from __future__ import annotations

import base64
import io
import json
import pickle
import re
import zlib
from datetime import date, datetime, time
from pathlib import Path
from time import perf_counter
from typing import TYPE_CHECKING

from populora.bench import LIVECODEBENCH_HUB, BenchError, data_source, livecodebench_file
from populora.core.io import write_jsonl

if TYPE_CHECKING:  # annotations only: the runner table (runners.py) imports this module
    from populora.bench.models import BenchModel
    from populora.bench.partial import Partial
    from populora.bench.settings import BenchSettings
    from populora.tasks.plans import Plan

FIELDS = (
    "question_title",
    "question_content",
    "platform",
    "question_id",
    "contest_id",
    "contest_date",
    "starter_code",
    "difficulty",
    "public_test_cases",
    "private_test_cases",
    "metadata",
)
MAX_PICKLE_BYTES = 1 << 30  # a decompressed private-test pickle larger than this is refused

SYSTEM_MESSAGE = (
    "You are an expert Python programmer. You will be given a question (problem specification) and "
    "will generate a correct Python program that matches the specification and passes all tests."
)
FORMAT_WITH_STARTER_CODE = (
    "You will use the following starter code to write the solution to the problem and "
    "enclose your code within delimiters."
)
FORMAT_WITHOUT_STARTER_CODE = (
    "Read the inputs from stdin solve the problem and write the answer to stdout (do not directly test on the "
    "sample inputs). Enclose your code within delimiters as follows. Ensure that when the python program runs, it "
    "reads the inputs, runs the algorithm and writes output to STDOUT."
)


# ------------------------------------------------------------------------------------------ data


def release_files(release: str) -> list[str]:
    """The hub files of a release: release_vN is test.jsonl, test2.jsonl ... testN.jsonl; vN is testN.jsonl."""
    match = re.fullmatch(r"(release_)?v([1-9][0-9]*)", release)
    if match is None:
        raise BenchError(
            f"unknown LiveCodeBench release {release!r}. Fix: use release_vN or vN (bench.livecodebench.release)."
        )
    name = lambda n: "test.jsonl" if n == 1 else f"test{n}.jsonl"  # noqa: E731
    last = int(match.group(2))
    return [name(n) for n in range(1, last + 1)] if match.group(1) else [name(last)]


def hub_data_files(release: str) -> list[str]:
    """Where `datasets` reads the release from (hf:// paths of the dataset repository)."""
    return [f"hf://datasets/{LIVECODEBENCH_HUB}/{name}" for name in release_files(release)]


def read_hub(release: str, cache_dir: str | None = None) -> list[dict]:
    """The release's rows from the hub through `datasets` (every column read as text)."""
    import datasets

    features = datasets.Features({name: datasets.Value("string") for name in FIELDS})
    try:
        table = datasets.load_dataset(
            "json", data_files=hub_data_files(release), split="train", features=features, cache_dir=cache_dir
        )
    except Exception as error:  # network, hub and arrow errors come in many kinds
        raise BenchError(
            f"could not load LiveCodeBench {release} from the hub ({LIVECODEBENCH_HUB}): "
            f"{type(error).__name__}: {error}. Fix: run where the hub is reachable, or put a copy at "
            f"<bench.data_dir>/{livecodebench_file(release)}."
        ) from error
    return [dict(row) for row in table]


def read_local(path: Path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise BenchError(
                        f"{path}:{number} is not a JSON row ({error}). Fix: use the release's "
                        "rows unchanged, one JSON object per line."
                    ) from error
    return rows


def load_rows(data_dir: Path | None, release: str) -> tuple[list[dict], str]:
    """(rows in file order, where they came from): the local copy when there is one, else the hub."""
    if data_dir is not None:
        path = Path(data_dir) / livecodebench_file(release)
        if path.is_file():
            return read_local(path), str(path)
    return read_hub(release), f"hub:{LIVECODEBENCH_HUB}@{release}"


def contest_date(row: dict) -> datetime:
    try:
        return datetime.fromisoformat(str(row["contest_date"]))
    except (KeyError, ValueError) as error:
        raise BenchError(
            f"LiveCodeBench problem {row.get('question_id')!r}: contest_date {row.get('contest_date')!r} "
            "is not an ISO datetime. Fix: use the release's rows unchanged."
        ) from error


def in_window(rows: list[dict], start: date | None, end: date | None) -> list[dict]:
    """The rows with start <= contest_date <= end (each date at midnight, as lcb_runner compares)."""
    low = datetime.combine(start, time()) if start else None
    high = datetime.combine(end, time()) if end else None
    return [
        row for row in rows if (low is None or low <= contest_date(row)) and (high is None or contest_date(row) <= high)
    ]


class StringOnlyUnpickler(pickle.Unpickler):
    """Admits no global at all (no class, no function): a pickle can then build only plain values."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused to load {module}.{name}: only a plain string is accepted")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused a persistent id: only a plain string is accepted")


def decode_tests(text: str, problem_id: str) -> list[dict]:
    """A test-case field: JSON text, or base64(zlib(pickle(JSON text))) read with StringOnlyUnpickler."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        inflater = zlib.decompressobj()
        raw = inflater.decompress(base64.b64decode(text.encode("utf-8")), MAX_PICKLE_BYTES)
        if inflater.unconsumed_tail:
            raise pickle.UnpicklingError(f"larger than {MAX_PICKLE_BYTES} bytes decompressed")
        value = StringOnlyUnpickler(io.BytesIO(raw)).load()
    except Exception as error:  # binascii, zlib and pickle errors: all mean "refused"
        raise BenchError(
            f"LiveCodeBench problem {problem_id}: private_test_cases refused "
            f"({type(error).__name__}: {error}). Fix: use the official release unchanged."
        ) from error
    if type(value) is not str:
        raise BenchError(
            f"LiveCodeBench problem {problem_id}: private_test_cases refused (the pickle holds a "
            f"{type(value).__name__}, not a string). Fix: use the official release unchanged."
        )
    return json.loads(value)


def problem(row: dict) -> dict:
    """One row as the problem the benchmark scores: prompt fields and the test cases, public first."""
    problem_id = row.get("question_id")
    missing = [name for name in FIELDS if not isinstance(row.get(name), str)]
    if missing or not problem_id:
        raise BenchError(
            f"LiveCodeBench row {problem_id or str(row)[:60]!r} lacks the text field(s) {missing}. "
            "Fix: use the official code_generation_lite schema."
        )
    try:
        tests = decode_tests(row["public_test_cases"], problem_id) + decode_tests(row["private_test_cases"], problem_id)
        metadata = json.loads(row["metadata"] or "{}")
    except json.JSONDecodeError as error:
        raise BenchError(
            f"LiveCodeBench problem {problem_id}: test cases or metadata are not JSON ({error}). "
            "Fix: use the official release unchanged."
        ) from error
    if not tests or not all(
        isinstance(t, dict) and isinstance(t.get("input"), str) and isinstance(t.get("output"), str) for t in tests
    ):
        raise BenchError(
            f"LiveCodeBench problem {problem_id}: no test cases of {{input, output}} text. "
            "Fix: use the official release unchanged."
        )
    return {
        "task_id": problem_id,
        "title": row["question_title"],
        "content": row["question_content"],
        "platform": row["platform"],
        "contest_id": row["contest_id"],
        "contest_date": contest_date(row).isoformat(),
        "difficulty": row["difficulty"],
        "starter_code": row["starter_code"],
        "fn_name": metadata.get("func_name"),
        "testtype": tests[0].get("testtype"),
        "tests": [(t["input"], t["output"]) for t in tests],
    }


def load_problems(data_dir: Path | None, config, limit: int | None) -> tuple[list[dict], str]:
    """(the first `limit` problems of the release inside the contest window, their source)."""
    rows, source = load_rows(data_dir, config.release)
    rows = in_window(rows, config.start_date, config.end_date)
    rows = rows[:limit] if limit else rows
    if not rows:
        raise BenchError(
            f"no LiveCodeBench {config.release} problem in {source} between {config.start_date} and "
            f"{config.end_date}. Fix: widen bench.livecodebench.start_date / end_date or use a later release."
        )
    return [problem(row) for row in rows], source


# ---------------------------------------------------------------------------- prompt, extraction


def user_prompt(item: dict) -> str:
    """lcb_runner's get_generic_question_template_answer."""
    text = f"### Question:\n{item['content']}\n\n"
    if item["starter_code"]:
        text += f"### Format: {FORMAT_WITH_STARTER_CODE}\n```python\n{item['starter_code']}\n```\n\n"
    else:
        text += f"### Format: {FORMAT_WITHOUT_STARTER_CODE}\n```python\n# YOUR CODE HERE\n```\n\n"
    return text + "### Answer: (use the provided format with backticks)\n\n"


def chat_prompt(item: dict, tokenizer) -> str:
    """The model input: system message and question through the chat template."""
    if tokenizer.chat_template is None:
        return f"{SYSTEM_MESSAGE}\n\n{user_prompt(item)}"
    messages = [{"role": "system", "content": SYSTEM_MESSAGE}, {"role": "user", "content": user_prompt(item)}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def extract_code(completion: str) -> str:
    """lcb_runner's extract_code: the lines between the last two lines holding ``` ("" without two)."""
    lines = completion.split("\n")
    fences = [index for index, line in enumerate(lines) if "```" in line]
    if len(fences) < 2:
        return ""
    return "\n".join(lines[fences[-2] + 1 : fences[-1]])


# ---------------------------------------------------------------- the runner


def run(
    settings: BenchSettings, models: list[BenchModel], base_model: Path, out: Path, log, partial: Partial | None = None
) -> dict[str, dict]:
    """LiveCodeBench of every model in one greedy generation pass (rows select their model's adapter),
    in pieces of problems kept in `partial` as they finish (`populora.bench.partial`); every test case
    of every solution run in the verifier's sandbox (populora/bench/livecodebench*.py)."""
    from populora.tasks.plans import Plan, Step

    cfg = settings.livecodebench
    problems, source = load_problems(settings.data_dir, cfg, settings.limit)
    local = not source.startswith("hub:")  # else the hub's release, named the same everywhere
    log.info(
        "%s: %d problems of %s (contests %s to %s) from %s, %d model(s) in one pass",
        settings.benchmark,
        len(problems),
        cfg.release,
        cfg.start_date or "the first",
        cfg.end_date or "the last",
        source,
        len(models),
    )
    adapters = {name: path for model in models for name, path in model.adapters.items()}
    tokenizer, lm = settings.load_model(base_model, adapters)
    plans = [Plan(prompt=chat_prompt(problem, tokenizer), steps=(Step("", stop=None),)) for problem in problems]
    start = perf_counter()
    outputs = _generate(lm, tokenizer, settings, models, problems, plans, partial, log)
    generation_s = perf_counter() - start
    lm = None  # free the model before grading
    codes = [extract_code(output["completion"]) for output in outputs]
    verdicts = _grade(problems * len(models), codes, settings, log)
    results = {}
    for index, model in enumerate(models):
        part = slice(index * len(problems), (index + 1) * len(problems))
        samples = _samples(problems, plans, outputs[part], codes[part], verdicts[part])
        write_jsonl(out / model.name / "samples.jsonl", samples)
        results[model.name] = {
            **_summary(samples, settings),
            "generation_s": round(generation_s, 1),
            "models_in_pass": len(models),
            "data": data_source(settings.data_dir, livecodebench_file(cfg.release), source) if local else source,
        }
    return results


def _generate(
    lm,
    tokenizer,
    settings: BenchSettings,
    models: list[BenchModel],
    problems: list[dict],
    plans: list[Plan],
    partial: Partial | None,
    log,
) -> list[dict]:
    """Every model's greedy completion of every problem, model by model, in pieces kept in `partial`."""
    from populora.bench.partial import generate_in_pieces, piece_size
    from populora.lm.sampling import GenRow, run_plans

    bench = settings.benchmark

    def generate(indices: list[int], progress) -> dict[str, list[dict]]:
        rows = [
            GenRow(plans[i], model.name if model.adapter is not None else None) for model in models for i in indices
        ]
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
            model.name: [
                {"completion": o.completion, "truncated": o.truncated, "tokens": o.tokens_generated}
                for o in made[k * len(indices) : (k + 1) * len(indices)]
            ]
            for k, model in enumerate(models)
        }

    generated = generate_in_pieces(
        partial,
        models,
        [p["task_id"] for p in problems],
        generate,
        size=piece_size(settings, len(models)),
        cost=lambda i: len(models),
        desc=bench,
        unit="steps",
        log=log,
    )
    return [output for model in models for output in generated[model.name]]


def _grade(problems: list[dict], codes: list[str], settings: BenchSettings, log) -> list[dict]:
    """Each solution's verdict: every test case of its problem run in the sandbox."""
    from populora.bench.livecodebench_grading import grade

    cfg = settings.livecodebench
    log.info("running the tests of %d solutions in the sandbox (%g s per test)", len(codes), cfg.timeout_s)
    return grade(
        list(zip(problems, codes)),
        settings.verify,
        timeout_s=cfg.timeout_s,
        memory_mb=cfg.memory_mb,
        log=log,
    )


def _samples(
    problems: list[dict], plans: list[Plan], outputs: list[dict], codes: list[str], verdicts: list[dict]
) -> list[dict]:
    """One model's rows of samples.jsonl: the problem, its prompt, completion, code and verdict."""
    return [
        {
            "task_id": p["task_id"],
            "title": p["title"],
            "platform": p["platform"],
            "difficulty": p["difficulty"],
            "contest_date": p["contest_date"],
            "functional": bool(p["fn_name"]),
            "prompt": plan.prompt,
            "completion": o["completion"],
            "code": code,
            "tokens": o["tokens"],
            "hit_token_limit": o["truncated"],
            **v,
        }
        for p, plan, o, code, v in zip(problems, plans, outputs, codes, verdicts)
    ]


def _summary(samples: list[dict], settings: BenchSettings) -> dict:
    """One model's score (overall and per difficulty), its failure reasons and the settings it was scored under."""
    from collections import Counter

    cfg = settings.livecodebench
    correct = sum(row["passed"] for row in samples)
    by_difficulty = {
        level: {
            "n": sum(r["difficulty"] == level for r in samples),
            "correct": sum(r["passed"] for r in samples if r["difficulty"] == level),
        }
        for level in sorted({r["difficulty"] for r in samples})
    }
    return {
        "n": len(samples),
        "per_problem": {row["task_id"]: int(row["passed"]) for row in samples},
        "metrics": {"pass@1": correct / len(samples) if samples else 0.0},
        "by_difficulty": by_difficulty,
        "reasons": dict(Counter(row["reason"] for row in samples if row["reason"])),
        "hit_token_limit": sum(row["hit_token_limit"] for row in samples),
        "release": cfg.release,
        "start_date": cfg.start_date and cfg.start_date.isoformat(),
        "end_date": cfg.end_date and cfg.end_date.isoformat(),
        "timeout_s": cfg.timeout_s,
        "harness": "populora.bench.livecodebench_grading (lcb_runner's judging, populora.sandbox)",
    }
