"""A scratch DVC + git project on tiny params, shared by the slow experiment tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.conftest import REPO, copy_shipped_files

BIN = str(Path(sys.executable).parent)
GIT_ID = {
    "GIT_AUTHOR_NAME": "ci",
    "GIT_AUTHOR_EMAIL": "ci@example.org",
    "GIT_COMMITTER_NAME": "ci",
    "GIT_COMMITTER_EMAIL": "ci@example.org",
}


def env() -> dict[str, str]:
    """The environment of git and DVC commands in a scratch project."""
    out = {**os.environ, **GIT_ID, "PATH": BIN + os.pathsep + os.environ["PATH"], "DVC_NO_ANALYTICS": "1"}
    out.pop("PYTHONPATH", None)  # stages import the scratch project's copy of the library
    return out


def run(cwd: Path, *args: str, timeout: int = 1800, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(list(args), cwd=cwd, env=env(), capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def new_dvc_project(root: Path, params: dict, *, snakemake: bool = False) -> Path:
    """Copy the code into `root`, write `params`, render dvc.yaml, `git init` + `dvc init`, commit
    (`snakemake`: the Snakefile and profiles too, so both engines run there)."""
    for name in ("populora", "stages", "workflow", *(("profiles",) if snakemake else ())):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    if snakemake:
        shutil.copy(REPO / "Snakefile", root / "Snakefile")
    shutil.copy(REPO / ".gitignore", root / ".gitignore")
    copy_shipped_files(root)
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run(root, f"{BIN}/python", "-m", "workflow.render_dvc", "--params", "params.yaml", "--out", "dvc.yaml")
    run(root, "git", "init", "-q")
    run(root, f"{BIN}/dvc", "init", "-q")
    shutil.copy(REPO / ".dvcignore", root / ".dvcignore")  # dvc init writes its own
    run(root, "git", "add", "-A")
    run(root, "git", "commit", "-qm", "setup")
    return root
