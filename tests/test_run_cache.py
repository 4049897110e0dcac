"""Carrying DVC's run cache of some stages to another checkout (workflow/run_cache.py): in a fresh clone whose
upstream stage wrote the same bytes, DVC restores the carried stage instead of running it; where the upstream
bytes differ, it runs the stage as usual (the control that could fail).

    .venv/bin/python -m pytest tests/test_run_cache.py -q -m ""
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.dvc_project import env as dvc_env
from workflow import run_cache

# `make` writes the large, cheap upstream output (its bytes depend on FLAVOUR, which DVC does not track: another
# machine's bytes); `score` the small, costly one, and leaves ran.flag beside it whenever it really runs
DVC_YAML = """stages:
  make:
    cmd: python make.py
    deps: [make.py]
    outs: [big.txt]
  score:
    cmd: python score.py
    deps: [score.py, big.txt]
    params: [level]
    outs: [score.json, parts]
"""
MAKE = "import os\nopen('big.txt', 'w').write(os.environ.get('FLAVOUR', 'a') * 1000)\n"
SCORE = """import json, pathlib
text = open('big.txt').read()
json.dump({'n': len(text)}, open('score.json', 'w'))
pathlib.Path('parts').mkdir()
pathlib.Path('parts/first.txt').write_text(text[:3])
open('ran.flag', 'w')
"""


def _run(cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    result = subprocess.run(list(args), cwd=cwd, env={**dvc_env(), **env}, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"{' '.join(args)}:\n{result.stdout[-2000:]}\n{result.stderr[-2000:]}"
    return result


@pytest.fixture(scope="module")
def origin(tmp_path_factory) -> Path:
    """A DVC project whose two stages ran once (the stage's outputs in its cache, its run-cache entries)."""
    root = tmp_path_factory.mktemp("origin")
    _run(root, "git", "init", "-q")
    _run(root, "dvc", "init", "-q")
    (root / "dvc.yaml").write_text(DVC_YAML)
    (root / "params.yaml").write_text("level: 3\n")
    (root / "make.py").write_text(MAKE)
    (root / "score.py").write_text(SCORE)
    (root / ".gitignore").write_text("ran.flag\n")
    _run(root, "git", "add", "-A")
    _run(root, "git", "commit", "-qm", "pipeline")
    _run(root, "dvc", "repro", "-q")
    assert (root / "ran.flag").exists()
    return root


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_a_carried_stage_is_restored_where_upstream_bytes_match_and_run_where_they_differ(origin, tmp_path):
    carried = tmp_path / "carried"
    assert run_cache.main(["export", str(origin), str(carried), "--outs", "score.json", "parts"]) == 0
    entries = list((carried / "runs").glob("*/*/*"))
    assert len(entries) == 1 and "score.json" in entries[0].read_text()  # `make`'s entry and big.txt stay behind
    assert not (carried / run_cache.object_path(_lock_md5(origin, "big.txt"))).exists()

    for flavour, restored in (("a", True), ("b", False)):
        clone = tmp_path / f"clone-{flavour}"
        _run(tmp_path, "git", "clone", "-q", str(origin), str(clone))
        assert run_cache.main(["import", str(carried), str(clone)]) == 0
        assert run_cache.import_into(carried, clone) == 0  # a second import copies nothing, overwrites nothing
        _run(clone, "dvc", "repro", "-q", "make", FLAVOUR=flavour)  # the cheap large stage, remade
        out = _run(clone, "dvc", "repro", FLAVOUR=flavour)
        assert (clone / "ran.flag").exists() != restored, out.stdout
        if restored:
            assert "Stage 'score' is cached - skipping run, checking out outputs" in out.stdout
            assert (clone / "score.json").read_bytes() == (origin / "score.json").read_bytes()
            assert (clone / "parts" / "first.txt").read_text() == "aaa"
        else:
            assert json.loads((clone / "score.json").read_text()) == {"n": 1000}
            assert (clone / "parts" / "first.txt").read_text() == "bbb"
        assert "Data and pipelines are up to date" in _run(clone, "dvc", "status").stdout


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_export_says_when_nothing_matches_and_import_needs_a_dvc_project(origin, tmp_path, capsys):
    assert run_cache.main(["export", str(origin), str(tmp_path / "none"), "--outs", "absent.json"]) == 1
    assert "no run-cache entry" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="not a DVC project"):
        run_cache.import_into(tmp_path, tmp_path)


def test_wanted_takes_a_path_or_a_folder_above_it():
    assert run_cache.wanted("results/bench/base/cruxeval_o", ["results/bench/base"])
    assert run_cache.wanted("results/heldout/base.json", ["results/heldout/base.json"])
    assert not run_cache.wanted("results/bench/base_x", ["results/bench/base"])
    assert run_cache.object_path("ddf76a94ca69c00bce75063d7e6bd46a.dir") == Path(
        "files/md5/dd/f76a94ca69c00bce75063d7e6bd46a.dir"
    )


def _lock_md5(root: Path, path: str) -> str:
    import yaml

    lock = yaml.safe_load((root / "dvc.lock").read_text())
    return next(out["md5"] for stage in lock["stages"].values() for out in stage.get("outs", []) if out["path"] == path)
