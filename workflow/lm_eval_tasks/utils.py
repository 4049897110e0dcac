"""lm-eval hooks of the PopuLoRA math tasks: field mapping, prompt and grading.

The logic lives in `populora.bench.math_grading` (unit-tested); this file only adapts it to
lm-eval's hook signatures. `process_<benchmark>` maps each dataset's own fields to three
uniform ones, so one prompt and one grader serve every task:

* `populora_question`: the problem text;
* `populora_gold`: the reference answer (see math_grading's field table);
* `populora_benchmark`: which extraction rules apply (GSM8K's `####` fallback).

`load_<benchmark>` is each task's `custom_dataset`: lm-eval calls it with the task metadata merged
with `--metadata` (and the model arguments), so the data folder is chosen with lm-eval's own
mechanism: `--metadata '{"data_dir": "/path/to/benchmarks"}'`. Without it, `$POPULORA_BENCHMARKS`,
else `../shared/benchmarks` beside the repository root; `data_dir: official` reads the published
AZR evaluation files.
"""

import os
from pathlib import Path

from populora.bench import DATA_ENV
from populora.bench.lmeval import OFFICIAL_MATH_DATA
from populora.bench.math_grading import gold_answer, grade, question_of

DEFAULT_DATA = Path(__file__).resolve().parents[2].parent / "shared" / "benchmarks"


def data_location(benchmark: str, data_dir: str | None = None) -> str:
    """The test file of one benchmark: under `data_dir` (metadata), $POPULORA_BENCHMARKS, or the default."""
    chosen = data_dir or os.environ.get(DATA_ENV) or str(DEFAULT_DATA)
    if chosen == "official":
        return f"{OFFICIAL_MATH_DATA}/{benchmark}/test.jsonl"
    path = Path(chosen).resolve() / "math" / benchmark / "test.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f'{path} not found. Fix: pass --metadata \'{{"data_dir": "<folder holding math/>"}}\' '
            f"(or set {DATA_ENV}), or data_dir official for the published files."
        )
    return str(path)


def _loader(benchmark: str):
    def load(data_dir: str | None = None, **_metadata):
        import datasets

        return datasets.load_dataset("json", data_files={"test": data_location(benchmark, data_dir)})

    return load


PROMPT_SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."


def _processor(benchmark: str):
    def process_docs(dataset):
        def uniform(doc: dict) -> dict:
            return {
                "populora_question": question_of(doc),
                "populora_gold": gold_answer(doc, benchmark),
                "populora_benchmark": benchmark,
            }

        return dataset.map(uniform)

    return process_docs


process_gsm8k = _processor("gsm8k")
process_math500 = _processor("math500")
process_minerva_math = _processor("minerva_math")
process_olympiadbench = _processor("olympiadbench")
process_aime24 = _processor("aime24")
process_aime25 = _processor("aime25")
process_amc23 = _processor("amc23")


load_gsm8k = _loader("gsm8k")
load_math500 = _loader("math500")
load_minerva_math = _loader("minerva_math")
load_olympiadbench = _loader("olympiadbench")
load_aime24 = _loader("aime24")
load_aime25 = _loader("aime25")
load_amc23 = _loader("amc23")


def doc_to_text(doc: dict) -> str:
    return f"{doc['populora_question'].strip()}\n{PROMPT_SUFFIX}"


def doc_to_target(doc: dict) -> str:
    return doc["populora_gold"]


def process_results(doc: dict, results: list[str]) -> dict:
    verdict = grade(results[0], doc["populora_gold"], doc["populora_benchmark"])
    return {"accuracy": float(verdict["correct"])}
