"""Verifier semantics: validity of proposals, grading of answers, and the two CLIs end to end.

.venv/bin/python -m pytest tests/test_verifier.py -q
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from populora.config import VerifySection, load_params
from populora.sandbox import LAYERS, SKIP_ENV, Sandbox
from populora.tasks.tasks import IDENTITY_CODE_F_SEED, IDENTITY_SEED
from populora.verifier import (
    GRADE_REASONS,
    GRADERS,
    VERIFY_REASONS,
    IsolationError,
    grade_rows,
    limits_of,
    verify_config,
    verify_rows,
)
from tests.seed_tasks import seed_rows

REPO = Path(__file__).resolve().parents[1]
ROOT = os.geteuid() == 0  # every sandbox layer is on only as root (tests/test_sandbox.py checks them)
DEFAULT_LAYERS = VerifySection().required_layers  # all but uid_drop: what an ordinary user gets
CONFIG = VerifySection(
    timeout_s=1.0, memory_mb=256, max_output_chars=10_000, required_layers=LAYERS if ROOT else DEFAULT_LAYERS
)

CLASSY = """class Acc:
    def __init__(self):
        self.total = 0
    def add(self, x):
        self.total += x
        return self
def helper(xs):
    return [x * 2 for x in xs]
def f(xs):
    acc = Acc()
    for x in helper(xs):
        acc.add(x)
    return acc.total"""
DATACLASS = """from dataclasses import dataclass
@dataclass
class P:
    x: int
    y: int
def f(a):
    return P(a, a + 1)"""
HELPER_REPR = """def mk(x):
    return x
class W:
    def __init__(self, v):
        self.v = v
    def __repr__(self):
        return f'mk({self.v})'
    def __eq__(self, other):
        return other == self.v
def f(a):
    return W(a)"""
ORDER_DEPENDENT = "import math\ndef f(a):\n    math.calls = getattr(math, 'calls', 0) + 1\n    return math.calls"
SUBCLASS_WALK = """def f(a):
    for c in getattr(object, '__subcl' + 'asses__')():
        if c.__name__ == '_wrap_close':
            g = getattr(c.__init__, '__glo' + 'bals__')
            return g['kill'](g['getppid'](), 9)
"""
TEN = [str(i) for i in range(10)]

# (task_id, type, program, inputs, expected reason (None = valid), expected outputs or None)
VALIDITY = [
    ("classes_and_helpers", "code_o", CLASSY, ["[1, 2, 3]"], None, ["12"]),
    ("param_named_input", "code_i", "def f(input):\n    return input[::-1]", ["'abc'"], None, ["'cba'"]),
    ("set_of_strings", "code_o", "def f(a):\n    return {'b', 'a', 'c', 'd', 'e'}", ["1"], None, None),
    ("dataclass_output", "code_o", DATACLASS, ["1"], None, ["P(x=1, y=2)"]),
    (
        "counter_output",
        "code_o",
        "from collections import Counter\ndef f(s):\n    return Counter(s)",
        ["'aab'"],
        None,
        ["Counter({'a': 2, 'b': 1})"],
    ),
    ("comment_in_input", "code_o", "def f(a, b):\n    return a + b", ["1, 2  # a comment"], None, ["3"]),
    ("code_f_squares", "code_f", "def f(a):\n    return a * a", TEN, None, [str(i * i) for i in range(10)]),
    ("syntax", "code_o", "def f(:\n    pass", ["1"], "syntax", None),
    ("import_os", "code_o", "import os\ndef f(a):\n    return a", ["1"], "forbidden_module", None),
    ("from_os_import", "code_o", "from os import path\ndef f(a):\n    return a", ["1"], "forbidden_module", None),
    ("import_dotted", "code_o", "import os.path as p\ndef f(a):\n    return a", ["1"], "forbidden_module", None),
    ("import_list", "code_o", "import collections, sys\ndef f(a):\n    return a", ["1"], "forbidden_module", None),
    ("nested_import", "code_o", "def f(a):\n    import random\n    return a", ["1"], "forbidden_module", None),
    (
        "importlib",
        "code_o",
        "import importlib\ndef f(a):\n    return importlib.import_module('os')",
        ["1"],
        "forbidden_module",
        None,
    ),
    (
        "from_importlib",
        "code_o",
        "from importlib import import_module\ndef f(a):\n    return a",
        ["1"],
        "forbidden_module",
        None,
    ),
    ("relative_import", "code_o", "from . import x\ndef f(a):\n    return a", ["1"], "forbidden_module", None),
    ("dunder_import", "code_o", "def f(a):\n    return __import__('os').getcwd()", ["1"], "forbidden_name", None),
    (
        "builtins_getattr",
        "code_o",
        "def f(a):\n    return getattr(__builtins__, '__imp' + 'ort__')('os')",
        ["1"],
        "forbidden_name",
        None,
    ),
    ("open_builtin", "code_o", "def f(a):\n    return open('/etc/passwd').read()", ["1"], "forbidden_name", None),
    ("eval_builtin", "code_o", "def f(a):\n    return eval('1 + 1')", ["1"], "forbidden_name", None),
    ("subclasses_attr", "code_o", "def f(a):\n    return a.__class__.__subclasses__()", ["1"], "forbidden_name", None),
    ("forbidden_in_input", "code_o", "def f(a):\n    return a", ["open('/etc/passwd').read()"], "forbidden_name", None),
    ("no_f", "code_o", "def g(a):\n    return a", ["1"], "no_entry_function", None),
    ("lambda_f", "code_o", "f = lambda a: a", ["1"], "no_entry_function", None),
    ("class_f", "code_o", "class f:\n    pass", ["1"], "no_entry_function", None),
    ("raises", "code_o", "def f(a):\n    return 1 / 0", ["1"], "exception", None),
    ("top_level_raises", "code_o", "raise ValueError('x')\ndef f(a):\n    return a", ["1"], "exception", None),
    ("loops", "code_o", "def f(a):\n    while True:\n        pass", ["1"], "timeout", None),
    ("memory", "code_o", "def f(a):\n    return len([0] * 10**9)", ["1"], "memory", None),
    ("huge_output", "code_o", "def f(a):\n    return 'x' * 100_000", ["1"], "output_too_large", None),
    ("nan", "code_o", "def f(a):\n    return float('nan')", ["1"], "unrepresentable", None),
    ("identity_compared", "code_o", "class A:\n    pass\ndef f(a):\n    return A()", ["1"], "unrepresentable", None),
    ("function_value", "code_o", "def f(a):\n    return f", ["1"], "unrepresentable", None),
    ("repr_calls_helper", "code_o", HELPER_REPR, ["1"], "unrepresentable", None),
    (
        "set_order_leaks",
        "code_o",
        "def f(a):\n    return list({'b', 'a', 'c', 'd', 'e'})",
        ["1"],
        "nondeterministic",
        None,
    ),
    ("string_hash", "code_o", "def f(a):\n    return hash(a)", ["'abc'"], "nondeterministic", None),
    ("call_order", "code_f", ORDER_DEPENDENT, TEN, "nondeterministic", None),
    ("one_bad_input", "code_f", "def f(a):\n    return 10 // a", TEN[1:] + ["0"], "exception", None),
    ("static_evasion_kills_parent", "code_o", SUBCLASS_WALK, ["1"], "exception", None),
    ("code_f_five_inputs", "code_f", "def f(a):\n    return a", TEN[:5], "wrong_input_count", None),
    ("code_o_two_inputs", "code_o", "def f(a):\n    return a", ["1", "2"], "wrong_input_count", None),
    ("input_not_arguments", "code_o", "def f(a):\n    return a", ["1)"], "bad_input", None),
    ("input_statement", "code_o", "def f(a):\n    return a", ["x += 1"], "bad_input", None),
    ("too_long", "code_o", "def f(a):\n    return a\n" + "#" * 20_001, ["1"], "too_long", None),
]
MALFORMED = [
    {"task_id": "m1", "type": "code_o", "inputs": ["1"], "message": None},
    {"task_id": "m2", "type": "code_o", "program": "def f(a):\n    return a", "inputs": "1", "message": None},
    {"task_id": "m3", "type": "code_o", "program": "def f(a):\n    return a", "inputs": [1], "message": None},
    {"task_id": "m4", "type": "code_x", "program": "def f(a):\n    return a", "inputs": ["1"], "message": None},
    {"task_id": 5, "type": "code_o", "program": "def f(a):\n    return a", "inputs": ["1"], "message": None},
    {"task_id": "m6", "type": "code_o", "program": "def f(a):\n    return a", "inputs": ["1"], "message": 3},
    "not a row",
]


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, limits=limits_of(CONFIG)) as sandbox:
        yield sandbox


@pytest.fixture(scope="module")
def verified(box):
    rows = [
        {"task_id": t, "type": k, "program": p, "inputs": i, "message": None, "extra": t}
        for t, k, p, i, _, _ in VALIDITY
    ]
    return {row["task_id"]: row for row in verify_rows(rows, CONFIG, sandbox=box)}


@pytest.mark.parametrize("task_id,reason,outputs", [(v[0], v[4], v[5]) for v in VALIDITY], ids=[v[0] for v in VALIDITY])
def test_validity(verified, task_id, reason, outputs):
    row = verified[task_id]
    assert (row["valid"], row["reason"]) == (reason is None, reason), row["reason_detail"]
    assert row["reason"] is None or row["reason"] in VERIFY_REASONS
    if outputs is not None:
        assert row["outputs"] == outputs
    if reason is not None:
        assert row["outputs"] == []
    assert row["extra"] == task_id  # other fields pass through


def test_malformed_rows_get_a_row_each_in_order(box):
    out = verify_rows(MALFORMED, CONFIG, sandbox=box)
    assert [row["reason"] for row in out] == ["malformed_row"] * len(MALFORMED)
    assert [row.get("task_id") for row in out[:-1]] == [row["task_id"] for row in MALFORMED[:-1]]
    assert out[-1]["row"] == "not a row" and out[-1]["valid"] is False


def test_a_verifier_bug_on_one_row_spares_the_others(box, monkeypatch):
    import populora.verifier.validity as verifier

    real = verifier.static_check
    monkeypatch.setattr(
        verifier,
        "static_check",
        lambda row, n: (_ for _ in ()).throw(RuntimeError("bug")) if row["task_id"] == "x" else real(row, n),
    )
    rows = [dict(r, task_id=t) for t, r in (("x", seed_rows()[0]), ("y", seed_rows()[0]))]
    out = verify_rows(rows, CONFIG, sandbox=box)
    assert [(r["valid"], r["reason"]) for r in out] == [(False, "sandbox_error"), (True, None)]


def test_identity_seeds_are_valid(box):
    assert len(IDENTITY_CODE_F_SEED["inputs"]) == 10 and IDENTITY_SEED["inputs"] == ["'Hello world'"]
    assert IDENTITY_CODE_F_SEED["message"] == "Write a function that returns whatever you input"
    out = verify_rows(seed_rows(), CONFIG, sandbox=box)
    assert all(row["valid"] for row in out)
    assert out[0]["outputs"] == ["'Hello world'"]
    assert out[2]["outputs"][2] == "{'a': 1, 'b': 2}"


# ----------------------------------------------------------------------------- grading

TASKS = [
    ("o_num", "code_o", "def f(a):\n    return a * 2", ["3"]),
    ("o_dict", "code_o", "def f(a):\n    return {'b': a, 'a': 1}", ["3"]),
    ("o_set", "code_o", "def f(a):\n    return {a, 'x', 'y'}", ["'z'"]),
    ("o_counter", "code_o", "from collections import Counter\ndef f(s):\n    return Counter(s)", ["'hello'"]),
    ("o_tuple", "code_o", "def f(a):\n    return (a, a + 1)", ["1"]),
    ("i_mod", "code_i", "def f(a):\n    return a % 3", ["4"]),
    ("i_kw", "code_i", "def f(a, b=0):\n    return a + b", ["1, b=2"]),
    ("f_sq", "code_f", "def f(a):\n    return a * a", TEN),
    ("f_imports", "code_f", "import math\ndef f(a):\n    return math.floor(a / 2)", TEN),
    ("bad", "code_o", "def f(a):\n    return 1 / 0", ["1"]),
]
ALWAYS_EQUAL = (
    "class X:\n    def __eq__(self, other):\n        return True\n    def __repr__(self):\n"
    "        return '25'\ndef f(a):\n    return X()"
)
FORGER = 'import os\ndef f(a):\n    os.write(3, b\'{"status": "ok", "calls": []}\')\n    os._exit(0)'
# (task_id, answer, correct, reason)
GRADING = [
    ("o_num", "6", True, None),
    ("o_num", "6.0", True, None),
    ("o_num", "  6\n", True, None),
    ("o_num", "7", False, "wrong"),
    ("o_num", "'6'", False, "wrong"),
    ("o_num", "6)", False, "syntax"),
    ("o_num", "f(3)", False, "unsafe_answer"),
    ("o_num", "__import__('os').getcwd()", False, "unsafe_answer"),
    ("o_dict", "{'a': 1, 'b': 3}", True, None),
    ("o_set", "{'y', 'z', 'x'}", True, None),
    ("o_counter", "Counter({'l': 2, 'h': 1, 'e': 1, 'o': 1})", True, None),
    ("o_counter", "Counter({'l': 3})", False, "wrong"),
    ("o_tuple", "(1, 2)", True, None),
    ("o_tuple", "[1, 2]", False, "wrong"),
    ("i_mod", "4", True, None),
    ("i_mod", "7", True, None),  # another input with the same output
    ("i_mod", "5", False, "wrong"),
    ("i_mod", "'x'", False, "exception"),
    ("i_mod", "4, 5", False, "exception"),
    ("i_mod", "1)", False, "syntax"),
    ("i_mod", "__import__('os').getpid()", False, "unsafe_answer"),
    ("i_kw", "a=1, b=2", True, None),
    ("i_kw", "3", True, None),
    ("i_kw", "**{'a': 3}", False, "unsafe_answer"),
    ("f_sq", "def f(a):\n    return a * a", True, None),
    ("f_sq", "def f(a):\n    return a ** 2", True, None),
    ("f_sq", "def f(a):\n    return {0: 0, 1: 1, 2: 4, 3: 9, 4: 16}[a]", False, "exception"),
    ("f_sq", "def f(a):\n    return {0: 0, 1: 1, 2: 4, 3: 9, 4: 16}.get(a, 0)", False, "wrong"),
    ("f_sq", "def g(a):\n    return a * a", False, "no_entry_function"),
    ("f_sq", "def f(a:\n", False, "syntax"),
    ("f_sq", "def f(a):\n    while True:\n        pass", False, "timeout"),
    ("f_sq", ALWAYS_EQUAL, False, "wrong"),
    ("f_sq", FORGER, False, "crash"),
    ("f_imports", "def f(a):\n    return math.floor(a / 2)", True, None),  # reference imports prepended
    ("f_imports", "def f(a):\n    return a // 2", True, None),
    ("bad", "1", False, "unknown_task"),  # invalid tasks are ignored
    ("nope", "1", False, "unknown_task"),
    ("o_num", None, False, "malformed"),
]


@pytest.fixture(scope="module")
def tasks(box):
    rows = [{"task_id": t, "type": k, "program": p, "inputs": i, "message": None} for t, k, p, i in TASKS]
    return verify_rows(rows, CONFIG, sandbox=box)


@pytest.fixture(scope="module")
def graded(box, tasks):
    answers = [{"task_id": t, "answer": a, "n": n} for n, (t, a, _, _) in enumerate(GRADING)]
    return grade_rows(tasks, answers, CONFIG, sandbox=box)


@pytest.mark.parametrize("n", range(len(GRADING)), ids=[f"{g[0]}:{g[1]!r}"[:60] for g in GRADING])
def test_grading(graded, n):
    row, (_, _, correct, reason) = graded[n], GRADING[n]
    assert row["n"] == n
    assert (row["correct"], row["reason"]) == (correct, reason), row["reason_detail"]
    assert row["reason"] is None or row["reason"] in GRADE_REASONS


def test_grading_keeps_order_and_odd_rows(box, tasks):
    out = grade_rows(tasks, ["junk", {"answer": "6"}, {"task_id": "o_num", "answer": "6"}], CONFIG, sandbox=box)
    assert [(r["correct"], r["reason"]) for r in out] == [
        (False, "malformed_row"),
        (False, "malformed_row"),
        (True, None),
    ]


# ----------------------------------------------------------------------------- command lines


def write_lines(path: Path, rows: list) -> None:
    path.write_text("".join((json.dumps(r) if not isinstance(r, str) else r) + "\n" for r in rows))


def read_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_stage(*args: str) -> None:
    result = subprocess.run([sys.executable, "-m", *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr


def test_verify_and_grade_command_lines(tmp_path):
    proposals = [
        {
            "task_id": "a",
            "type": "code_o",
            "program": "def f(a):\n    return a + 1",
            "inputs": ["1"],
            "message": None,
            "teacher": "t0",
        },
        {
            "task_id": "b",
            "type": "code_i",
            "program": "import os\ndef f(a):\n    return a",
            "inputs": ["1"],
            "message": None,
        },
        "this line is not JSON",
        {"task_id": "c", "type": "code_o", "program": SUBCLASS_WALK, "inputs": ["1"], "message": None},
        [1, 2],
        {"task_id": "d", "type": "code_f", "program": "def f(a):\n    return -a", "inputs": TEN, "message": "negate"},
    ]
    write_lines(tmp_path / "proposals.jsonl", proposals)
    run_stage(
        "stages.verify",
        "--proposals",
        str(tmp_path / "proposals.jsonl"),
        "--out",
        str(tmp_path / "tasks.jsonl"),
        "--timeout",
        "2",
    )
    out = read_lines(tmp_path / "tasks.jsonl")
    assert len(out) == len(proposals)
    assert [r.get("task_id") for r in out] == ["a", "b", None, "c", None, "d"]
    assert [r["valid"] for r in out] == [True, False, False, False, False, True]
    assert [r["reason"] for r in out] == [None, "forbidden_module", "malformed_row", "exception", "malformed_row", None]
    assert all({"valid", "reason", "outputs"} <= set(r) for r in out)
    assert out[0]["outputs"] == ["2"] and out[0]["teacher"] == "t0"

    answers = [
        {"task_id": "a", "answer": "2"},
        {"task_id": "d", "answer": "def f(x):\n    return -x"},
        {"task_id": "b", "answer": "1"},
        {"task_id": "a", "answer": None},
    ]
    write_lines(tmp_path / "answers.jsonl", answers)
    run_stage(
        "stages.grade",
        "--tasks",
        str(tmp_path / "tasks.jsonl"),
        "--answers",
        str(tmp_path / "answers.jsonl"),
        "--out",
        str(tmp_path / "graded.jsonl"),
    )
    graded = read_lines(tmp_path / "graded.jsonl")
    assert [(g["correct"], g["reason"]) for g in graded] == [
        (True, None),
        (True, None),
        (False, "unknown_task"),
        (False, "malformed"),
    ]


def test_graders_cover_every_task_type():
    assert set(GRADERS) == {"code_o", "code_i", "code_f"}


# ----------------------------------------------------------------------------- one source of limits


def test_limit_defaults_have_one_source():
    """The config model's defaults are params.yaml's; the library takes them from the model."""
    assert VerifySection() == load_params(REPO / "params.yaml").verify
    assert verify_config() == VerifySection()
    assert verify_config(None, timeout_s=0.5).timeout_s == 0.5
    assert verify_config(CONFIG, workers=3) == CONFIG.model_copy(update={"workers": 3})
    with pytest.raises(ValueError, match="timeout_s"):
        verify_config(None, timeout_s=-1)
    import dataclasses

    from populora.sandbox import Limits

    assert [f.name for f in dataclasses.fields(Limits) if f.default is dataclasses.MISSING] == [
        "timeout_s",
        "memory_mb",
        "max_output_chars",
    ]


def test_model_dump_call_still_works(box):
    """stages/init.py calls verify_rows(rows, **params.verify.model_dump())."""
    out = verify_rows(seed_rows()[:1], sandbox=box, **CONFIG.model_dump())
    assert out[0]["valid"] and out[0]["outputs"] == ["'Hello world'"]


# ----------------------------------------------------------------------------- isolation requirement


def test_missing_layer_refuses_to_run_code(monkeypatch):
    monkeypatch.setenv(SKIP_ENV, "seccomp")
    with pytest.raises(IsolationError) as error:
        verify_rows(seed_rows(), VerifySection(required_layers=["seccomp", "fs_jail"]))
    message = str(error.value)
    assert "missing required containment layers (seccomp;" in message and "seccomp: off. Fix:" in message
    assert "remove seccomp from verify.required_layers" in message
    with pytest.raises(IsolationError, match="seccomp"):
        grade_rows([], [{"task_id": "x", "answer": "1"}], VerifySection())  # default: required


def test_missing_layer_runs_with_a_loud_warning_when_allowed(monkeypatch, caplog):
    monkeypatch.setenv(SKIP_ENV, "seccomp")
    with caplog.at_level(logging.WARNING, logger="populora.verifier"):
        out = verify_rows(seed_rows(), CONFIG.model_copy(update={"required_layers": ()}))
    assert all(row["valid"] for row in out)
    assert any("SANDBOX DEGRADED" in r.getMessage() and "seccomp" in r.getMessage() for r in caplog.records)


def test_required_layers_config():
    assert VerifySection().required_layers == (
        "fs_jail",
        "ipc_namespace",
        "mount_namespace",
        "net_namespace",
        "seccomp",
    )
    assert VerifySection(required_layers="all").required_layers == LAYERS
    assert VerifySection(required_layers=["seccomp", "fs_jail", "seccomp"]).required_layers == ("fs_jail", "seccomp")
    from populora.config import ParamsError, parse_params

    with pytest.raises(ParamsError, match=r"verify.required_layers: unknown sandbox layers \['teleport'\].*Fix:"):
        parse_params({"verify": {"required_layers": ["teleport"]}})
    with pytest.raises(ParamsError, match="verify.require_isolation: unknown key.*required_layers"):
        parse_params({"verify": {"require_isolation": True}})  # the old all-or-nothing key: required_layers now
    with pytest.raises(ParamsError, match="wall_timeout_s .* is below timeout_s"):
        parse_params({"verify": {"timeout_s": 2, "wall_timeout_s": 1}})


def run_stage_raw(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.skipif(not ROOT, reason="every layer is on only as root")
def test_stage_logs_layers_and_writes_isolation(tmp_path):
    write_lines(tmp_path / "proposals.jsonl", seed_rows())
    result = run_stage_raw(
        "stages.verify",
        "--proposals",
        str(tmp_path / "proposals.jsonl"),
        "--out",
        str(tmp_path / "tasks.jsonl"),
        "--isolation",
        str(tmp_path / "isolation.json"),
        "--log",
        str(tmp_path / "verify.log"),
    )
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "isolation.json").read_text()) == {
        "layers": {
            "fs_jail": True,
            "ipc_namespace": True,
            "mount_namespace": True,
            "net_namespace": True,
            "seccomp": True,
            "uid_drop": True,
        },
        "required": list(DEFAULT_LAYERS),
        "mode": "root",
    }
    log = (tmp_path / "verify.log").read_text()
    assert "sandbox layers: fs_jail=on, ipc_namespace=on" in log and "(root; required: fs_jail, ipc_namespace" in log
    assert "CPU limit 2 s, wall backstop 10 s" in log


def test_stages_refuse_with_a_missing_layer(tmp_path):
    """A node without a file-system jail or a network namespace is refused under the default."""
    write_lines(tmp_path / "proposals.jsonl", seed_rows())
    env = {SKIP_ENV: "fs_jail,net_namespace"}
    verify = run_stage_raw(
        "stages.verify",
        "--proposals",
        str(tmp_path / "proposals.jsonl"),
        "--out",
        str(tmp_path / "tasks.jsonl"),
        "--isolation",
        str(tmp_path / "isolation.json"),
        env=env,
    )
    assert verify.returncode == 3, verify.stderr
    assert "refusing to run model code" in verify.stderr and "(fs_jail, net_namespace;" in verify.stderr
    assert (
        "fs_jail: off. Fix:" in verify.stderr
        and "net_namespace: off. Fix: run where unprivileged user" in verify.stderr
    )
    assert "net_namespace=OFF" in verify.stderr
    assert not (tmp_path / "tasks.jsonl").exists() and not (tmp_path / "isolation.json").exists()
    write_lines(tmp_path / "answers.jsonl", [{"task_id": "a", "answer": "1"}])
    grade = run_stage_raw(
        "stages.grade",
        "--tasks",
        str(tmp_path / "proposals.jsonl"),
        "--answers",
        str(tmp_path / "answers.jsonl"),
        "--out",
        str(tmp_path / "graded.jsonl"),
        env=env,
    )
    assert grade.returncode == 3 and "net_namespace: off" in grade.stderr
    assert not (tmp_path / "graded.jsonl").exists()


def write_params(tmp_path: Path, **verify) -> Path:
    import yaml

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["verify"] = {k: v for k, v in raw["verify"].items() if k != "required_layers"} | verify
    raw["bench"]["data_dir"] = str((REPO / raw["bench"]["data_dir"]).resolve())  # the copy lives elsewhere
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    return tmp_path / "params.yaml"


def test_stages_run_without_uid_drop_by_default(tmp_path):
    """What an ordinary user gets (every layer but uid_drop) meets the default: the stage runs and
    says so; `all` refuses it."""
    write_lines(tmp_path / "proposals.jsonl", seed_rows())
    args = (
        "stages.verify",
        "--proposals",
        str(tmp_path / "proposals.jsonl"),
        "--out",
        str(tmp_path / "tasks.jsonl"),
        "--isolation",
        str(tmp_path / "isolation.json"),
    )
    result = run_stage_raw(*args, "--params", str(REPO / "params.yaml"), env={SKIP_ENV: "uid_drop"})
    assert result.returncode == 0, result.stderr
    assert "sandbox layers off (not in verify.required_layers): uid_drop: off" in result.stderr
    assert "SANDBOX DEGRADED" not in result.stderr
    report = json.loads((tmp_path / "isolation.json").read_text())
    assert report["required"] == list(DEFAULT_LAYERS) and report["layers"]["uid_drop"] is False
    assert all(row["valid"] for row in read_lines(tmp_path / "tasks.jsonl"))
    refused = run_stage_raw(
        *args[:-2], "--params", str(write_params(tmp_path, required_layers="all")), env={SKIP_ENV: "uid_drop"}
    )
    assert refused.returncode == 3 and "uid_drop: off. Fix: run as root" in refused.stderr, refused.stderr


def test_stages_warn_and_run_when_isolation_is_not_required(tmp_path):
    params = write_params(tmp_path, required_layers=[])  # no layer required
    write_lines(tmp_path / "proposals.jsonl", seed_rows())
    result = run_stage_raw(
        "stages.verify",
        "--params",
        str(params),
        "--proposals",
        str(tmp_path / "proposals.jsonl"),
        "--out",
        str(tmp_path / "tasks.jsonl"),
        "--isolation",
        str(tmp_path / "isolation.json"),
        env={SKIP_ENV: "uid_drop,seccomp"},
    )
    assert result.returncode == 0, result.stderr
    assert "SANDBOX DEGRADED" in result.stderr and "seccomp" in result.stderr
    report = json.loads((tmp_path / "isolation.json").read_text())
    assert report["required"] == [] and report["layers"]["uid_drop"] is False
    assert all(row["valid"] for row in read_lines(tmp_path / "tasks.jsonl"))


def test_the_code_f_shape_is_one_definition(box):
    """propose.code_f_inputs decides how many inputs a code_f row needs, how many the grader
    hides and how many pairs the solver sees (it was fixed at 10 / 5 in three places)."""
    from populora.tasks.prompts import solver_prompt
    from populora.tasks.tasks import code_f_split, seed_proposals

    six = [row for row in seed_proposals("builtin", 6) if row["type"] == "code_f"]
    assert all(len(row["inputs"]) == 6 for row in six)
    assert all(row["valid"] for row in verify_rows(six, CONFIG, sandbox=box, code_f_inputs=6))
    assert {row["reason"] for row in verify_rows(six, CONFIG, sandbox=box)} == {"wrong_input_count"}  # default 10
    product = [row for row in six if row["program"] == "def f(a, b):\n    return a * b"]
    task = {**verify_rows(product, CONFIG, sandbox=box, code_f_inputs=6)[0], "valid": True}
    shown, hidden = code_f_split(task["inputs"])
    assert len(shown) == len(hidden) == 3
    prompt = solver_prompt(task, [])
    assert all(f"```input_{i}\n" in prompt for i in range(3)) and "input_3" not in prompt
    right = "def f(a, b):\n    return a * b"
    wrong_on_hidden = "def f(a, b):\n    if (a, b) in [(2, 3), (0, 5), (-1, 4)]:\n        return a * b\n    return 0"
    graded = grade_rows(
        [task],
        [{"task_id": task["task_id"], "answer": right}, {"task_id": task["task_id"], "answer": wrong_on_hidden}],
        CONFIG,
        sandbox=box,
    )
    assert [row["correct"] for row in graded] == [True, False]
