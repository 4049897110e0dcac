"""One door: `python -m populora <command>` reaches every tool outside the DAG (a library module with a `main`)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from populora.__main__ import COMMANDS, main
from tests.conftest import REPO


def test_every_library_main_is_a_command():
    with_main = set()
    for folder in ("populora", "workflow"):
        for path in (REPO / folder).rglob("*.py"):
            if path.relative_to(REPO).as_posix() != "populora/__main__.py" and re.search(
                r"^def main\(", path.read_text(), re.M
            ):
                with_main.add(".".join(path.relative_to(REPO).with_suffix("").parts))
    assert with_main == {module for module, _ in COMMANDS.values()}


def test_the_door_lists_its_commands_and_refuses_an_unknown_one(capsys):
    assert main(["--help"]) == 0
    listed = capsys.readouterr().out
    assert all(name in listed for name in COMMANDS)
    assert main(["no-such-command"]) == 2 and "unknown command" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["check-params", "ruler", "study"])
def test_a_command_runs_its_module(command):
    result = subprocess.run(
        [sys.executable, "-m", "populora", command, "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert result.returncode == 0 and f"python -m populora {command}" in result.stdout, result.stderr[-2000:]
