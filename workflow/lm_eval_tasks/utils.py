"""lm-eval hooks of the PopuLoRA math tasks: field mapping, prompt and grading.

The logic lives in `populora.bench.math_grading` (unit-tested); this file only adapts it to
lm-eval's hook signatures. `process_<benchmark>` maps each dataset's own fields to three
uniform ones, so one prompt and one grader serve every task:

* `populora_question`: the problem text;
* `populora_gold`: the reference answer (see math_grading's field table);
* `populora_benchmark`: which extraction rules apply (GSM8K's `####` fallback).
"""

from populora.bench.math_grading import gold_answer, grade, question_of

PROMPT_SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."


def _processor(benchmark: str):
    def process_docs(dataset):
        def uniform(doc: dict) -> dict:
            return {"populora_question": question_of(doc), "populora_gold": gold_answer(doc, benchmark),
                    "populora_benchmark": benchmark}

        return dataset.map(uniform)

    return process_docs


process_gsm8k = _processor("gsm8k")
process_math500 = _processor("math500")
process_minerva_math = _processor("minerva_math")
process_olympiadbench = _processor("olympiadbench")
process_aime24 = _processor("aime24")
process_aime25 = _processor("aime25")
process_amc23 = _processor("amc23")


def doc_to_text(doc: dict) -> str:
    return f"{doc['populora_question'].strip()}\n{PROMPT_SUFFIX}"


def doc_to_target(doc: dict) -> str:
    return doc["populora_gold"]


def process_results(doc: dict, results: list[str]) -> dict:
    verdict = grade(results[0], doc["populora_gold"], doc["populora_benchmark"])
    return {"accuracy": float(verdict["correct"])}
