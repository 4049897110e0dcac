"""LiveCodeBench on a fixture in the official schema written here (stdin and functional problems, one with
compressed private tests): loading and the contest window, the refused pickles, the official prompt and
extraction, lcb_runner's judging in the sandbox (correct, wrong and hostile solutions), the params
check, and the bench stage on the tiny model through to results/metrics.json.

    python -m pytest -q tests/test_livecodebench.py
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import zlib
from pathlib import Path

import pytest
import yaml

from populora.bench import BenchError
from populora.bench import livecodebench as lcb
from populora.bench import livecodebench_grading as grading
from populora.config import LiveCodeBenchSection, ParamsError, VerifySection, parse_params
from populora.core import benchmark_data
from stages import bench as bench_stage
from stages import bench_summary
from tests.tiny_model import export_members

REPO = Path(__file__).resolve().parents[1]
RELEASE = "release_v5"


def compressed(value) -> str:
    """What the official release does to large private tests: base64(zlib(pickle(...)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(value))).decode("ascii")


def row(
    question_id: str,
    date: str,
    public: list,
    private,
    *,
    fn_name: str | None = None,
    starter: str = "",
    difficulty: str = "easy",
    platform: str = "atcoder",
) -> dict:
    testtype = "functional" if fn_name else "stdin"
    cases = lambda pairs: [{"input": i, "output": o, "testtype": testtype} for i, o in pairs]  # noqa: E731
    return {
        "question_title": f"title of {question_id}",
        "question_content": f"Solve {question_id}.",
        "platform": platform,
        "question_id": question_id,
        "contest_id": question_id.split("_")[0],
        "contest_date": date,
        "starter_code": starter,
        "difficulty": difficulty,
        "public_test_cases": json.dumps(cases(public)),
        "private_test_cases": private if isinstance(private, str) else json.dumps(cases(private)),
        "metadata": json.dumps({"func_name": fn_name} if fn_name else {}),
    }


# abc300_a: a + b from stdin, private tests compressed; lc_add: LeetCode-style functional; cf_halve: a
# float output, published before the window the stage test uses.
ROWS = [
    row(
        "abc300_a",
        "2024-09-01T00:00:00",
        [("1 2\n", "3\n")],
        compressed(
            json.dumps(
                [{"input": i, "output": o, "testtype": "stdin"} for i, o in [("10 20\n", "30\n"), ("-5 5\n", "0\n")]]
            )
        ),
    ),
    row(
        "lc_add",
        "2024-10-05T12:00:00",
        [("1\n2", "3")],
        [("[1, 2]\n[3]", "[1, 2, 3]")],
        fn_name="addTwo",
        starter="class Solution:\n    def addTwo(self, a, b):\n        ",
        difficulty="medium",
        platform="leetcode",
    ),
    row(
        "cf_halve",
        "2023-06-01T00:00:00",
        [("3\n", "1.5\n")],
        [("4\n", "2\n")],
        difficulty="hard",
        platform="codeforces",
    ),
]
CORRECT = {
    "abc300_a": "a, b = map(int, input().split())\nprint(a + b)",
    "lc_add": "class Solution:\n    def addTwo(self, a, b):\n        return a + b",
    "cf_halve": "import sys\n\ndef main():\n    n = int(sys.stdin.read())\n    print(n / 2)\n\n"
    "if __name__ == '__main__':\n    main()",
}


def write_release(data_dir: Path, rows: list[dict] = ROWS) -> Path:
    path = data_dir / benchmark_data.livecodebench_file(RELEASE)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return data_dir


def problems(tmp_path: Path, **window) -> dict[str, dict]:
    loaded, _ = lcb.load_problems(write_release(tmp_path), LiveCodeBenchSection(release=RELEASE, **window), None)
    return {p["task_id"]: p for p in loaded}


# ------------------------------------------------------------------------------- data and pickles


def test_official_rows_load_with_compressed_private_tests_and_the_contest_window(tmp_path):
    every = problems(tmp_path)
    assert list(every) == ["abc300_a", "lc_add", "cf_halve"]  # file order
    assert every["abc300_a"]["tests"] == [("1 2\n", "3\n"), ("10 20\n", "30\n"), ("-5 5\n", "0\n")]  # public first
    assert every["lc_add"]["fn_name"] == "addTwo" and every["abc300_a"]["fn_name"] is None
    # the window compares each date at midnight, as lcb_runner does (lc_add's contest is at noon)
    assert list(problems(tmp_path, start_date="2024-08-01")) == ["abc300_a", "lc_add"]
    assert list(problems(tmp_path, start_date="2024-08-01", end_date="2024-10-05")) == ["abc300_a"]
    loaded, source = lcb.load_problems(tmp_path, LiveCodeBenchSection(release=RELEASE), 2)
    assert [p["task_id"] for p in loaded] == ["abc300_a", "lc_add"] and source.endswith("release_v5.jsonl")


def test_a_pickle_holding_anything_but_a_string_is_refused(tmp_path):
    class Exploit:
        def __reduce__(self):
            return os.system, (f"touch {tmp_path / 'pwned'}",)

    for payload, what in (
        (compressed(Exploit()), "refused to load posix.system"),
        (compressed(["a list"]), "holds a list"),
    ):
        rows = [row("abc999_z", "2024-09-01T00:00:00", [("1\n", "1\n")], payload)]
        with pytest.raises(BenchError, match="abc999_z") as error:
            lcb.load_problems(write_release(tmp_path, rows), LiveCodeBenchSection(release=RELEASE), None)
        assert what in str(error.value) and "private_test_cases refused" in str(error.value)
    assert not (tmp_path / "pwned").exists()
    with pytest.raises(BenchError, match="abc999_z.*refused"):  # neither JSON nor a compressed pickle
        lcb.decode_tests("not base64 at all!", "abc999_z")


def test_release_files_and_the_hub_path_through_datasets(tmp_path, monkeypatch):
    assert lcb.release_files("release_v3") == ["test.jsonl", "test2.jsonl", "test3.jsonl"]
    assert lcb.release_files("v5") == ["test5.jsonl"] and lcb.release_files("v1") == ["test.jsonl"]
    assert lcb.hub_data_files("release_v2")[1] == "hf://datasets/livecodebench/code_generation_lite/test2.jsonl"
    # without a local copy the rows come through `datasets` (here from local files standing in for the hub)
    local = write_release(tmp_path / "copy") / benchmark_data.livecodebench_file(RELEASE)
    monkeypatch.setattr(lcb, "hub_data_files", lambda release: [str(local)])
    read = lcb.read_hub(RELEASE, cache_dir=str(tmp_path / "cache"))  # (arrow may respell contest_date)
    assert [lcb.problem(r) for r in read] == [lcb.problem(r) for r in ROWS]
    monkeypatch.setattr(lcb, "read_hub", lambda release: [{"read": release}])
    assert lcb.load_rows(tmp_path / "empty", RELEASE) == (
        [{"read": RELEASE}],
        f"hub:livecodebench/code_generation_lite@{RELEASE}",
    )
    assert lcb.load_rows(None, RELEASE)[0] == [{"read": RELEASE}]


# ------------------------------------------------------------------------------ prompt, extraction


def test_prompt_is_lcb_runners_generic_chat_prompt(tmp_path, tiny_model_dir):
    from transformers import AutoTokenizer

    every = problems(tmp_path)
    stdin_prompt, functional_prompt = lcb.user_prompt(every["abc300_a"]), lcb.user_prompt(every["lc_add"])
    assert stdin_prompt == (
        "### Question:\nSolve abc300_a.\n\n### Format: "
        + lcb.FORMAT_WITHOUT_STARTER_CODE
        + "\n```python\n# YOUR CODE HERE\n```\n\n### Answer: (use the provided format with backticks)\n\n"
    )
    assert (
        f"### Format: {lcb.FORMAT_WITH_STARTER_CODE}\n```python\nclass Solution:\n    def addTwo" in functional_prompt
    )
    text = lcb.chat_prompt(every["abc300_a"], AutoTokenizer.from_pretrained(tiny_model_dir))
    assert text.startswith(f"<|im_start|>system\n{lcb.SYSTEM_MESSAGE}<|im_end|>") and text.endswith(
        "<|im_start|>assistant\n"
    )


def test_extraction_takes_the_last_fenced_block():
    text = "Idea:\n```python\nprint(1)\n```\nBetter:\n```python\nprint(2)\n```\nDone."
    assert lcb.extract_code(text) == "print(2)"
    assert lcb.extract_code("```python\nprint(1)") == ""  # unterminated (e.g. out of tokens): no code


# ----------------------------------------------------------------------------------------- judging


def test_stdout_is_compared_as_lcb_runner_compares():
    assert grading.stdio_matches("3  \n\n", "3\n")  # whitespace around lines and the text
    assert grading.stdio_matches("1.50\n2\n", "1.5\n2.0")  # lines equal as decimals
    assert not grading.stdio_matches("1\n2\n", "1 2\n")  # line counts differ
    assert not grading.stdio_matches("1.5000001\n", "1.5\n")  # decimals compare exactly
    assert not grading.stdio_matches("yes\n", "Yes\n")


def test_the_program_is_built_as_lcb_runner_builds_it():
    source = grading.solution_source({"fn_name": None}, CORRECT["cf_halve"])
    assert source.startswith(grading.IMPORT_STRING) and "def wrapped_function():" in source
    assert "\nimport sys\n" in source and "__main__" not in source  # imports hoisted, the main guard unwrapped
    assert grading.solution_source({"fn_name": "f"}, "x = 1") == grading.IMPORT_STRING + "\n\nx = 1"


HOSTILE = {
    "write_outside": "open({path!r}, 'w').write('x')\nprint(3)",
    "fork_bomb": "import os\nwhile True:\n    os.fork()",
    "env_secret": "import os\nprint(os.environ.get('POPULORA_TEST_SECRET'))",
    "infinite_loop": "while True:\n    pass",
    "memory_hog": "x = bytearray(8 * 1024 ** 3)\nprint(3)",
}


def test_correct_solutions_pass_wrong_ones_fail_and_hostile_ones_are_contained(tmp_path, monkeypatch):
    monkeypatch.setenv("POPULORA_TEST_SECRET", "hunter2")
    every = problems(tmp_path)
    outside = tmp_path / "outside.txt"
    pairs = [(every[k], code) for k, code in CORRECT.items()]
    pairs += [
        (every["abc300_a"], "a, b = map(int, input().split())\nprint(a - b)"),  # wrong answer
        (every["lc_add"], "class Solution:\n    def addTwo(self, a, b):\n        return (a, b)"),
        (every["lc_add"], "class Solution:\n    def add(self, a, b):\n        return a + b"),  # wrong name
        (every["abc300_a"], "print(1 / 0)"),
        (every["abc300_a"], "def f(:\n"),
        (every["abc300_a"], ""),
    ]
    pairs += [(every["abc300_a"], code.format(path=str(outside))) for code in HOSTILE.values()]
    verdicts = grading.grade(pairs, VerifySection(workers=2), timeout_s=2.0, memory_mb=512)
    assert [v["passed"] for v in verdicts[:3]] == [True, True, True]
    assert verdicts[0]["tests_passed"] == verdicts[0]["tests_total"] == 3  # public and compressed private tests
    reasons = [v["reason"] for v in verdicts[3:]]
    assert reasons == [
        "wrong_answer",
        "wrong_answer",
        "no_entry",
        "runtime_error",
        "syntax",
        "no_code",
        "runtime_error",
        "runtime_error",
        "wrong_answer",
        "timeout",
        "memory",
    ]
    assert verdicts[3]["tests_passed"] == 0 and "test 1 of 3" in verdicts[3]["detail"]
    write, fork, secret = verdicts[9:12]
    assert not outside.exists() and "Error" in write["detail"]  # the host's folders are not even visible
    assert "BlockingIOError" in fork["detail"]  # no process can be started
    assert "hunter2" not in secret["detail"] and "None" in secret["detail"]  # an empty environment


# ------------------------------------------------------------------------------------------ params


def test_off_by_default_on_in_the_gpu_overlay_and_validated_before_any_work(tmp_path, monkeypatch):
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    assert "livecodebench" not in parse_params({"bench": {"data_dir": None}}).bench.benchmarks
    assert "livecodebench" not in yaml.safe_load((REPO / "params.yaml").read_text())["bench"]["benchmarks"]
    assert "livecodebench" in yaml.safe_load((REPO / "params/gpu-paper.yaml").read_text())["bench"]["benchmarks"]
    monkeypatch.setattr(benchmark_data, "hub_unreachable", lambda: "no network (test)")
    raw = {"bench": {"benchmarks": ["livecodebench"], "data_dir": str(tmp_path)}}
    with pytest.raises(ParamsError) as error:
        parse_params(raw)
    message = str(error.value)
    assert (
        "bench.data_dir" in message and "livecodebench/release_v5.jsonl" in message and "no network (test)" in message
    )
    assert "Fix:" in message and "drop livecodebench from bench.benchmarks" in message
    with pytest.raises(ParamsError, match="no data folder"):
        parse_params({"bench": {"benchmarks": ["livecodebench"], "data_dir": None}})
    write_release(tmp_path)  # a local copy: no hub needed
    assert parse_params(raw).bench.livecodebench.release == RELEASE
    monkeypatch.setattr(benchmark_data, "hub_unreachable", lambda: None)  # the hub answers: no copy needed
    assert parse_params({"bench": {"benchmarks": ["livecodebench"], "data_dir": None}})
    with pytest.raises(ParamsError, match="bench.livecodebench"):
        parse_params(
            {"bench": {"data_dir": None, "livecodebench": {"start_date": "2025-01-02", "end_date": "2025-01-01"}}}
        )
    with pytest.raises(ParamsError, match="bench.livecodebench"):
        parse_params({"bench": {"data_dir": None, "livecodebench": {"release": "latest"}}})


# ------------------------------------------------------------------------------- the stage, the summary


def _stage_params(tmp_path: Path, data_dir: Path) -> Path:
    path = tmp_path / "params.yaml"
    path.write_text(
        "model:\n  device: cpu\nverify:\n  workers: 2\ndag:\n  arms: [population]\n"
        "population:\n  teachers: 1\n  students: 2\n"
        f"bench:\n  benchmarks: [livecodebench]\n  roles: [students]\n  data_dir: {data_dir}\n  limit: 2\n"
        "  max_new_tokens: 16\n  batch_size: 4\n"
        "  livecodebench: {release: release_v5, start_date: '2024-08-01', timeout_s: 2.0}\n"
    )
    return path


@pytest.mark.slow  # stage subprocesses on the tiny model: the full suite runs it
def test_bench_stage_and_summary_on_the_fixture(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    params = _stage_params(tmp_path, write_release(tmp_path / "data"))
    bench_dir = tmp_path / "results" / "bench"
    common = [
        "--params",
        str(params),
        "--bench",
        "livecodebench",
        "--base-model",
        str(tiny_model_dir),
        "--log",
        str(tmp_path / "bench.log"),
    ]
    assert bench_stage.main([*common, "--results", str(bench_dir / "base" / "livecodebench")]) == 0
    members = export_members(tmp_path, tiny_model_dir, {"student0": 1, "student1": 2})
    assert (
        bench_stage.main(
            [
                *common,
                "--arm",
                "population",
                "--models",
                str(members),
                "--results",
                str(bench_dir / "population" / "livecodebench"),
            ]
        )
        == 0
    )
    result = json.loads((bench_dir / "population" / "livecodebench" / "population-student1.json").read_text())
    assert result["n"] == 2 and list(result["per_problem"]) == ["abc300_a", "lc_add"]  # window, then limit 2
    assert result["models_in_pass"] == 2 and result["release"] == RELEASE and result["start_date"] == "2024-08-01"
    assert result["data"].startswith(f"livecodebench/{RELEASE}.jsonl sha256:")  # the file, not the folder
    assert result["metrics"]["pass@1"] == result["correct"] / 2 and result["interval"]["method"] == "wilson"
    samples = [
        json.loads(line)
        for line in (bench_dir / "population" / "livecodebench" / "population-student1" / "samples.jsonl")
        .read_text()
        .splitlines()
    ]
    assert [s["task_id"] for s in samples] == ["abc300_a", "lc_add"]
    assert all(s["passed"] or s["reason"] in grading.REASONS for s in samples)  # a reason for every failure
    assert samples[0]["prompt"].startswith("<|im_start|>system\nYou are an expert Python programmer.")
    metrics_path = tmp_path / "results" / "metrics.json"
    assert (
        bench_summary.main(
            [
                "--params",
                str(params),
                "--results",
                str(bench_dir),
                "--metrics",
                str(metrics_path),
                "--dynamics",
                str(tmp_path / "results" / "dynamics"),
                "--headline",
                str(tmp_path / "results" / "headline.json"),
                "--progress",
                str(tmp_path / "results" / "progress.json"),
            ]
        )
        == 0
    )
    metrics = json.loads(metrics_path.read_text())
    assert metrics["bench.livecodebench.n"] == 2
    for model in ("base", "population-student0", "population-student1"):
        low, high = metrics[f"bench.livecodebench.ci.{model}.low"], metrics[f"bench.livecodebench.ci.{model}.high"]
        assert 0.0 <= low <= high <= 1.0 and f"bench.livecodebench.correct.{model}" in metrics
    assert "bench.livecodebench.base" in metrics and "avg.code.mean" in metrics  # scored in the code group


def test_missing_release_fails_the_stage_before_any_work(tmp_path, tiny_model_dir, monkeypatch):
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    monkeypatch.setattr(benchmark_data, "hub_unreachable", lambda: "no network (test)")
    (tmp_path / "data").mkdir()
    argv = [
        "--params",
        str(_stage_params(tmp_path, tmp_path / "data")),
        "--bench",
        "livecodebench",
        "--base-model",
        str(tiny_model_dir),
        "--results",
        str(tmp_path / "r"),
        "--log",
        str(tmp_path / "bench.log"),
    ]
    with pytest.raises(SystemExit) as exit_info:
        bench_stage.main(argv)
    assert exit_info.value.code == 2 and not (tmp_path / "r").exists()
    assert "livecodebench/release_v5.jsonl" in (tmp_path / "bench.log").read_text()
