"""Math answers: the question and gold answer of each dataset, answer extraction, equivalence.

Used by the lm-eval tasks of `workflow/lm_eval_tasks/` (their `utils.py` calls `question_of`,
`gold_answer`, `extract_answer` and `is_equiv`), and unit-tested in tests/test_bench_math_grading.py.

Field mapping (as the AZR / Qwen2.5-Math evaluation reads the same files):

| benchmark     | question                      | gold answer                                   |
|---------------|-------------------------------|-----------------------------------------------|
| gsm8k         | question                      | the number after `####` in `answer`           |
| math500       | problem                       | the last `\\boxed{}` of `solution`            |
| minerva_math  | problem                       | the last `\\boxed{}` of `solution`            |
| olympiadbench | question                      | `final_answer[0]` without `$`                 |
| aime24/aime25 | question or problem           | `answer`                                      |
| amc23         | question or problem           | `answer` (a float such as 27.0, read as 27)   |

Extraction, in order: the last `\\boxed{...}` / `\\fbox{...}` (brace-matched); "(final) answer is X";
for GSM8K only, `#### X` and then the last number in the text (lm-eval's "flexible-extract"). The
competition sets get no last-number fallback: in a derivation cut off by the token limit the last
number is an index or an intermediate value, not an answer.

Equivalence, in order: equal after normalisation (LaTeX spacing, `\\dfrac`, `\\left`, units and
`\\text{}`, `$`, `%`, degrees, thousands separators, `x = ` prefixes); equal as numbers (relative
tolerance 1e-6); `math_verify.verify(parse("\\boxed{gold}"), parse("\\boxed{pred}"))`, with
math_verify's own (signal based) timeouts of `TIMEOUT_S` seconds; a timeout counts as wrong.
"""

from __future__ import annotations

import math
import re
import threading

TIMEOUT_S = 3  # AZR grades with a 3 s timeout per comparison

_BOX_COMMANDS = ("\\boxed", "\\fbox")
_NUMBER = r"-?\d[\d,]*(?:\.\d+)?|-?\.\d+"


def question_of(doc: dict) -> str:
    """The problem text: the first field present among question, problem, Question, input."""
    for key in ("question", "problem", "Question", "input"):
        value = doc.get(key)
        if isinstance(value, str) and value.strip():
            return value
    raise KeyError(f"no question field in document with keys {sorted(doc)}")


def gold_answer(doc: dict, benchmark: str) -> str:
    """The reference answer of one document, as a string."""
    if benchmark == "gsm8k":
        return doc["answer"].split("####")[-1].strip().replace(",", "")
    if benchmark in ("math500", "minerva_math"):
        boxed = last_boxed(doc.get("solution") or "")
        if boxed is not None:
            return boxed
        return str(doc["answer"])
    if benchmark == "olympiadbench":
        return doc["final_answer"][0].strip().strip("$").strip()
    if benchmark in ("aime24", "aime25", "amc23"):
        return _number_text(doc["answer"])
    raise ValueError(f"unknown math benchmark {benchmark!r}")


def _number_text(value) -> str:
    """27.0 -> '27', 2.5 -> '2.5', '070' stays a string."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}` or `\\fbox{...}` (brace-matched), or of `\\boxed 5`."""
    start = max(text.rfind(command) for command in _BOX_COMMANDS)
    if start < 0:
        return None
    command = next(c for c in _BOX_COMMANDS if text.startswith(c, start))
    rest = text[start + len(command) :]
    if rest.startswith(" "):  # `\boxed 5`: up to the next `$` or whitespace
        match = re.match(r"\s+([^\s$]+)", rest)
        return match.group(1) if match else None
    if not rest.startswith("{"):
        return None
    depth = 0
    for index, char in enumerate(rest):
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return rest[1:index]
    return None  # unbalanced: the answer was cut off


def extract_answer(text: str, benchmark: str) -> str | None:
    """The model's final answer in a completion, or None when it states none."""
    boxed = last_boxed(text)
    if boxed is not None:
        return boxed
    stated = re.findall(r"answer is:?\s*\$?([^\n$]+?)\$?(?:\.\s|\.?$|\n|\. I hope)", text, flags=re.IGNORECASE)
    if stated:
        return stated[-1].strip()
    if benchmark != "gsm8k":
        # No number-grabbing for competition math: in a cut-off derivation the last number is an
        # index or an intermediate value ("P(x_2)" -> 2), which would be scored as an answer.
        return None
    hashes = re.findall(r"####\s*(" + _NUMBER + ")", text)
    if hashes:
        return hashes[-1]
    numbers = re.findall(_NUMBER, text)
    return numbers[-1].rstrip(".") if numbers else None


# ---------------------------------------------------------------------------------------------
# Normalisation


_REMOVE = (
    "\\left",
    "\\right",
    "\\displaystyle",
    "\\!",
    "\\,",
    "\\;",
    "\\:",
    "\\ ",
    "~",
    "^{\\circ}",
    "^\\circ",
    "\\circ",
    "\\%",
    "%",
    "\\$",
    "$",
    "\\(",
    "\\)",
    "\\[",
    "\\]",
)
_UNIT_COMMANDS = r"\\(?:text|textbf|mathrm|mbox|operatorname)"


def normalize(answer: str) -> str:
    """A canonical string form of an answer (both gold and prediction go through it)."""
    text = str(answer).strip()
    boxed = last_boxed(text)
    if boxed is not None and text.startswith(_BOX_COMMANDS):
        text = boxed
    text = text.replace("\n", " ").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    # "x = 5", "k=3", "f(x) = 2x": compare right-hand sides (the lhs is a name, not part of the answer).
    text = re.sub(r"^\s*[a-zA-Z]\w*(?:_\{?\w+\}?)?(?:\([^()]*\))?\s*=\s*(?!=)", "", text)
    # A trailing unit in \text{...}/\mathrm{...} after a value: "5 \text{ cm}" -> "5".
    text = re.sub(r"(?<=[\d}])\s*" + _UNIT_COMMANDS + r"\{[^{}]*\}(\^\{?\d\}?)?\s*$", "", text)
    text = re.sub(_UNIT_COMMANDS + r"\{([^{}]*)\}", r"\1", text)
    for token in _REMOVE:
        text = text.replace(token, "")
    # A number followed only by words: "18 dollars" -> "18".
    words = re.fullmatch(r"\s*(" + _NUMBER + r")\s+[a-zA-Z][a-zA-Z ]*\.?\s*", text)
    if words:
        text = words.group(1)
    text = re.sub(r"\\frac(\d)(\d)", r"\\frac{\1}{\2}", text)
    text = re.sub(r"\\frac\{([^{}]*)\}(\d)", r"\\frac{\1}{\2}", text)
    text = re.sub(r"\\sqrt(\d)", r"\\sqrt{\1}", text)
    text = text.replace(" ", "").rstrip(".")
    if re.fullmatch(r"-?\d{1,3}(,\d{3})+(\.\d+)?", text):  # thousands separators
        text = text.replace(",", "")
    number = _to_float(text)
    if number is not None and number.is_integer() and abs(number) < 1e15:
        text = str(int(number))
    return text


def _to_float(text: str) -> float | None:
    """A plain number or a simple fraction, else None."""
    text = text.strip()
    match = re.fullmatch(r"(-?)\\frac\{(-?\d+(?:\.\d+)?)\}\{(-?\d+(?:\.\d+)?)\}", text) or re.fullmatch(
        r"(-?)(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)", text
    )
    if match:
        sign, numerator, denominator = match.groups()
        if float(denominator) == 0:
            return None
        value = float(numerator) / float(denominator)
        return -value if sign else value
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


# ---------------------------------------------------------------------------------------------
# Equivalence


def is_equiv(prediction: str | None, gold: str, timeout_s: int = TIMEOUT_S) -> bool:
    """Does `prediction` state the same answer as `gold`?"""
    if prediction is None or not str(prediction).strip():
        return False
    pred, ref = normalize(prediction), normalize(gold)
    if pred == ref:
        return True
    pred_value, ref_value = _to_float(pred), _to_float(ref)
    if pred_value is not None and ref_value is not None:
        return math.isclose(pred_value, ref_value, rel_tol=1e-6, abs_tol=1e-9)
    return _math_verify(str(gold), str(prediction), timeout_s)


def _math_verify(gold: str, prediction: str, timeout_s: int) -> bool:
    from math_verify import parse, verify
    from math_verify.errors import TimeoutException

    # math_verify times out with SIGALRM, which only works in the main thread; elsewhere it must
    # run without its timeout (lm-eval grades in the main thread, so this is the rare path).
    timeout = timeout_s if threading.current_thread() is threading.main_thread() else None
    try:
        gold_parsed = parse(f"\\boxed{{{_unbox(gold)}}}", parsing_timeout=timeout)
        pred_parsed = parse(f"\\boxed{{{_unbox(prediction)}}}", parsing_timeout=timeout)
        if not gold_parsed or not pred_parsed:
            return False
        return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))
    except TimeoutException:
        return False
    except Exception:  # noqa: BLE001  (a malformed expression is a wrong answer, never a crash)
        return False


def _unbox(text: str) -> str:
    boxed = last_boxed(text)
    return boxed if boxed is not None and text.strip().startswith(_BOX_COMMANDS) else text


def grade(completion: str, gold: str, benchmark: str) -> dict:
    """Extraction and verdict of one completion (also what the samples files record)."""
    extracted = extract_answer(completion, benchmark)
    return {"extracted": extracted, "gold": gold, "correct": is_equiv(extracted, gold)}
