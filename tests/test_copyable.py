"""propose.reject_copyable: code_o/code_i tasks whose output is an argument of the input (a
student solves them by echoing what it is shown) become invalid, and the identity seed stays out
of the buffer; off (AZR) nothing changes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from populora.bench.diagnostics import copy_solves
from populora.config import ParamsError, load_params
from populora.core.literals import output_is_an_argument
from populora.core.state import BUFFER
from populora.tasks.tasks import IDENTITY_PROGRAM, is_copyable, mark_copyable

REPO = Path(__file__).resolve().parents[1]
DISGUISED = "def f(x):\n    return str(x).encode().decode()"


def task(task_type, inputs, outputs, valid=True, program="def f(a):\n    return a"):
    return {
        "task_id": f"{task_type}-{inputs}",
        "type": task_type,
        "program": program,
        "inputs": inputs,
        "outputs": outputs,
        "valid": valid,
        "reason": None if valid else "exception",
        "reason_detail": None,
    }


@pytest.mark.parametrize(
    "arguments, output, expected",
    [
        ("'hello'", "'hello'", True),  # the identity seed, a disguised identity on a string
        ("3, 4", "4", True),  # f(a, b) = b: the second argument
        ("[1, 2], 3", "[1, 2]", True),  # containers compare by value
        ("'hello'", "'olleh'", False),
        ("1", "1.0", False),  # 1 and 1.0: a different value to write
        ("1, 2", "True", False),
        ("x=5", "5", True),  # keyword arguments count
        ("'a'", "not a literal", False),
        ("garbled(", "1", False),
    ],
)
def test_output_is_an_argument(arguments, output, expected):
    assert output_is_an_argument(arguments, output) is expected


def test_the_benchmark_copy_ceiling_uses_the_same_rule():
    sample = {"type": "code_o", "input": "'abc', 2", "gold_output": "'abc'"}
    assert copy_solves(sample) is output_is_an_argument(sample["input"], sample["gold_output"]) is True


def test_copyable_tasks_are_code_o_and_code_i_whose_output_is_shown():
    assert is_copyable(task("code_o", ["'hello'"], ["'hello'"], program=DISGUISED))
    assert is_copyable(task("code_i", ["'hello'"], ["'hello'"]))
    assert not is_copyable(task("code_o", ["'hello'"], ["'olleh'"]))
    assert not is_copyable(task("code_f", ["'a'"] * 10, ["'a'"] * 10)), "a code_f answer is a program"
    assert not is_copyable(task("code_o", ["1"], [])), "no outputs: nothing to compare (an invalid row)"
    assert not is_copyable({"type": "code_o"})


def test_mark_copyable_invalidates_only_valid_copyable_rows_and_keeps_the_rest():
    rows = [
        task("code_o", ["'hi'"], ["'hi'"], program=DISGUISED),
        task("code_i", ["3"], ["4"], program="def f(a):\n    return a + 1"),
        task("code_o", ["'hi'"], ["'hi'"], valid=False),
        task("code_f", ["1"] * 10, ["1"] * 10),
        "a malformed row",
    ]
    out = mark_copyable(rows)
    assert [r["valid"] if isinstance(r, dict) else r for r in out] == [False, True, False, True, "a malformed row"]
    assert out[0]["reason"] == "copyable" and "is an argument" in out[0]["reason_detail"]
    assert out[0]["outputs"] == ["'hi'"] and out[0]["program"] == DISGUISED, "the row keeps what it was"
    assert out[2]["reason"] == "exception", "an invalid row keeps its own reason"
    assert out[1:] == rows[1:] and rows[0]["valid"], "new rows: the input is not changed"


def test_reject_copyable_with_only_the_identity_seed_fails_before_any_work(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump({"propose": {"reject_copyable": True}, "buffer": {"seeds": "identity"}}))
    with pytest.raises(ParamsError, match="buffer.seeds: builtin"):
        load_params(path)
    path.write_text(
        yaml.safe_dump({"propose": {"reject_copyable": True, "types": ["code_f"]}, "buffer": {"seeds": "identity"}})
    )
    assert load_params(path).propose.reject_copyable, "code_f only: nothing of the identity seed is dropped"


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_verify_stage_marks_copyable_tasks_only_when_asked(tmp_path):
    proposals = [
        {"task_id": "echo", "type": "code_o", "program": DISGUISED, "inputs": ["'hello'"], "message": None},
        {
            "task_id": "inc",
            "type": "code_i",
            "program": "def f(a):\n    return a + 1",
            "inputs": ["1"],
            "message": None,
        },
        {
            "task_id": "first",
            "type": "code_i",
            "program": "def f(a, b):\n    return a",
            "inputs": ["[1], 2"],
            "message": None,
        },
    ]
    (tmp_path / "proposals.jsonl").write_text("".join(json.dumps(p) + "\n" for p in proposals))
    params = tmp_path / "params.yaml"
    verdicts = {}
    for reject in (False, True):
        params.write_text(yaml.safe_dump({"propose": {"reject_copyable": reject}}))
        out = tmp_path / f"tasks-{reject}.jsonl"
        result = _run(
            "stages.verify",
            "--params",
            str(params),
            "--proposals",
            str(tmp_path / "proposals.jsonl"),
            "--out",
            str(out),
            "--timeout",
            "2",
        )
        assert result.returncode == 0, result.stderr
        verdicts[reject] = [(r["valid"], r["reason"]) for r in map(json.loads, out.read_text().splitlines())]
    assert verdicts[False] == [(True, None)] * 3, "AZR keeps copyable tasks"
    assert verdicts[True] == [(False, "copyable"), (True, None), (False, "copyable")]


@pytest.mark.slow  # stage subprocesses on the tiny model: the full suite runs it
def test_init_leaves_the_identity_seed_out_when_rejecting_copyable(tiny_model_dir, tmp_path):
    buffers = {}
    for reject in (False, True):
        params = tmp_path / f"params-{reject}.yaml"
        params.write_text(
            yaml.safe_dump(
                {"propose": {"reject_copyable": reject}, "buffer": {"seeds": "builtin"}, "dag": {"arms": ["baseline"]}}
            )
        )
        checkpoint = tmp_path / f"init-{reject}"
        result = _run(
            "stages.init",
            "--params",
            str(params),
            "--arm",
            "baseline",
            "--base-model",
            str(tiny_model_dir),
            "--checkpoint",
            str(checkpoint),
        )
        assert result.returncode == 0, result.stderr
        buffers[reject] = [json.loads(line) for line in (checkpoint / BUFFER).read_text().splitlines()]
    kept = {(t["type"], t["program"]) for t in buffers[True]}
    assert ("code_o", IDENTITY_PROGRAM) not in kept and ("code_i", IDENTITY_PROGRAM) not in kept
    assert ("code_f", IDENTITY_PROGRAM) in kept, "a code_f seed is never copyable"
    assert not any(is_copyable(t) for t in buffers[True])
    dropped = [t for t in buffers[False] if (t["type"], t["program"]) not in kept]
    assert sorted(t["type"] for t in dropped) == ["code_i", "code_o"], "only the identity seed's two tasks go"
