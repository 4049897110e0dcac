"""populora.core.progress: off a terminal a long loop logs a few plain lines (never a carriage
return) and always a final one; on a terminal it draws a tqdm bar; a stage's log shows the lines."""

from __future__ import annotations

import io
import logging
import subprocess
import sys

import pytest

from populora.core.progress import Progress, duration, progress_mode
from tests.conftest import REPO


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def captured():
    stream = io.StringIO()
    log = logging.getLogger("test.progress")
    handler = logging.StreamHandler(stream)
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    yield log, stream
    log.removeHandler(handler)


def test_off_a_terminal_many_fast_items_give_few_lines_and_no_carriage_return(captured, monkeypatch, capsys):
    log, stream = captured
    monkeypatch.delenv("POPULORA_PROGRESS", raising=False)
    assert progress_mode() == "log"  # pytest's stderr is not a terminal
    clock = Clock()
    with Progress(10_000, "solve", unit="steps", log=log, every_s=30, clock=clock) as progress:
        for i in range(10_000):
            clock.now = (i + 1) / 100  # 100 s in all: a line at 30, 60 and 90 s
            progress.update()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4 and progress.lines == 4
    assert lines[0] == "solve: 3000/10000 steps (30%), 30.0 s elapsed, ~1 min 10 s left"
    assert lines[-1] == "solve: 10000/10000 steps (100%) in 1 min 40 s"
    assert "\r" not in stream.getvalue() and "\r" not in capsys.readouterr().err  # no bar drawn either


def test_a_final_line_always_appears(captured):
    log, stream = captured
    Progress(5, "grade", unit="rows", log=log, every_s=30, mode="log").close()
    assert stream.getvalue().splitlines() == ["grade: 0/5 rows (0%) in 0.0 s"]
    stream.truncate(0), stream.seek(0)
    clock = Clock()
    with (
        pytest.raises(RuntimeError),
        Progress(None, "update", unit="micro-batches", log=log, clock=clock, mode="log") as progress,
    ):
        progress.update(3, note="step 1/2")
        clock.now = 5
        raise RuntimeError("out of memory")
    assert stream.getvalue().splitlines() == ["update: 3 micro-batches, stopped after 5.0 s; step 1/2"]


def test_work_kept_from_before_counts_but_does_not_speed_up_the_estimate(captured):
    log, stream = captured
    clock = Clock()
    progress = Progress(100, "cruxeval_o", unit="problems", log=log, every_s=10, initial=50, clock=clock, mode="log")
    clock.now = 10
    progress.update(10)
    assert stream.getvalue().splitlines() == ["cruxeval_o: 60/100 problems (60%), 10.0 s elapsed, ~40 s left"]


def test_on_a_terminal_a_bar_is_drawn_and_disabled_reports_nothing(captured, monkeypatch):
    log, stream = captured
    monkeypatch.setenv("POPULORA_PROGRESS", "bar")
    with Progress(3, "verify", unit="rows", log=log) as progress:
        assert progress._bar is not None
        progress.update(3)
    (line,) = stream.getvalue().splitlines()  # the bar is cleared; the final line stays in the log
    assert line.startswith("verify: 3/3 rows (100%) in ")
    stream.truncate(0), stream.seek(0)
    with Progress(3, "verify", log=log, enabled=False) as progress:
        progress.update(3)
    assert stream.getvalue() == "" and progress.lines == 0


def test_durations():
    assert [duration(s) for s in (0.04, 59.94, 61, 3725)] == ["0.0 s", "59.9 s", "1 min 01 s", "1 h 02 min"]
    assert duration(6.6, tenths=False) == "7 s"


def test_a_stage_log_holds_plain_progress_lines(tmp_path):
    """The grade stage off a terminal (a pipe): its log file and stderr get the stage-tagged lines,
    no carriage return, and no third-party bar."""
    tasks = tmp_path / "tasks.jsonl"
    answers = tmp_path / "answers.jsonl"
    task = {
        "task_id": "t",
        "type": "code_o",
        "program": "def f(a):\n    return a + 1",
        "inputs": ["1"],
        "outputs": ["2"],
        "message": None,
        "valid": True,
    }
    import json

    tasks.write_text(json.dumps(task) + "\n")
    answers.write_text("".join(json.dumps({"task_id": "t", "answer": str(i)}) + "\n" for i in range(6)))
    log = tmp_path / "grade.log"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "stages.grade",
            "--tasks",
            str(tasks),
            "--answers",
            str(answers),
            "--out",
            str(tmp_path / "graded.jsonl"),
            "--workers",
            "1",
            "--log",
            str(log),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    text = log.read_text()
    assert "\r" not in text and "\r" not in done.stderr
    assert " grade INFO grade: 6/6 answers (100%) in " in text, text
