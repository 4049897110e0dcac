"""Code stamps (workflow/code_stamps.py): one file a stage module, holding the hashes of the code it runs,
rewritten exactly when one of those files changes, so a DVC stage needs one code dependency, not forty."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO
from workflow.code_stamps import (
    CODE_STAMPS,
    module_of_stamp,
    stage_modules,
    stale_stamps,
    stamp_content,
    stamp_path,
    write_code_stamps,
)
from workflow.dag import code_deps


@pytest.fixture
def code_copy(tmp_path) -> Path:
    """The pipeline's code in a scratch folder, to edit."""
    for name in ("populora", "stages", "workflow"):
        shutil.copytree(REPO / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    return tmp_path


def _stamps(root: Path) -> dict[str, tuple[bytes, int]]:
    folder = root / CODE_STAMPS
    return {path.name: (path.read_bytes(), path.stat().st_mtime_ns) for path in sorted(folder.iterdir())}


def test_a_stamp_lists_every_file_the_module_runs_with_its_hash():
    content = stamp_content("stages.pair")
    assert content["module"] == "stages.pair"
    assert sorted(content["files"]) == list(code_deps("stages.pair"))
    assert all(len(digest) == 64 for digest in content["files"].values())


def test_stamps_are_written_once_and_then_left_alone(code_copy):
    written = write_code_stamps(root=code_copy)
    assert written == sorted(stamp_path(module) for module in stage_modules())
    before = _stamps(code_copy)
    assert write_code_stamps(root=code_copy) == [] and stale_stamps(root=code_copy) == {}
    assert _stamps(code_copy) == before  # same bytes, same mtime: neither engine sees a change


def test_editing_a_module_rewrites_exactly_the_stamps_of_the_stages_that_run_it(code_copy):
    write_code_stamps(root=code_copy)
    before = _stamps(code_copy)
    report_code = code_copy / "populora" / "report" / "__init__.py"
    report_code.write_text(report_code.read_text() + "\n# an edit\n")
    expected = sorted(
        stamp_path(m) for m in stage_modules() if "populora/report/__init__.py" in code_deps(m, code_copy)
    )
    assert "results/.code/stages.report.json" in expected and "results/.code/stages.base_model.json" not in expected
    assert sorted(stale_stamps(root=code_copy)) == expected
    assert write_code_stamps(root=code_copy) == expected
    after = _stamps(code_copy)
    changed = sorted(f"{CODE_STAMPS}/{name}" for name in after if after[name] != before[name])
    assert changed == expected


def test_a_damaged_stamp_is_written_anew(code_copy):
    write_code_stamps(root=code_copy)
    damaged = code_copy / stamp_path("stages.pair")
    damaged.write_text("{not json")
    os.utime(damaged, (0, 0))
    assert write_code_stamps(root=code_copy) == [stamp_path("stages.pair")]
    assert json.loads(damaged.read_text()) == stamp_content("stages.pair", code_copy)


def test_module_of_stamp_names_only_stage_modules():
    assert module_of_stamp("results/.code/stages.pair.json") == "stages.pair"
    assert module_of_stamp("results/.code/stages.nonexistent.json") is None
    assert module_of_stamp("results/pair/x.json") is None
    assert module_of_stamp("stages/pair.py") is None
