"""Shared fixtures: a tiny randomly initialised model (no download) and tiny params."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
# Benchmark data (../shared/benchmarks beside the checkout): named absolutely, so that projects the
# tests build in temporary folders (and their subprocesses) find it wherever the suite runs from.
os.environ.setdefault("POPULORA_BENCHMARKS", str(REPO.parent / "shared" / "benchmarks"))
TINY_PARAMS = REPO / "tests" / "fixtures" / "params.tiny.yaml"


# Files committed with the code that the default params name (heldout.pool_file: SmolLM2's study pool).
# A scratch project that copies the code (and so resolves paths from its own copy) needs them too.
SHIPPED_FILES = ("study/learning/heldout_pool.jsonl",)


def copy_shipped_files(root: Path) -> Path:
    """Copy `SHIPPED_FILES` into the scratch project `root`, at the same relative paths."""
    import shutil

    for name in SHIPPED_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    return root


def copy_snakemake_entry(root: Path) -> Path:
    """A scratch Snakemake project: the Snakefile, workflow/ and profiles/ copied into `root`
    (stages run from the checkout through PYTHONPATH); params.yaml is the caller's."""
    import shutil

    for name in ("Snakefile", "workflow", "profiles"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    return root


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    from tests.tiny_model import tiny_model_dir as build

    return build(tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny_params_dict(tiny_model_dir) -> dict:
    """params.yaml with the tiny overlay applied (DVC needs every section the stages list)."""
    from populora.config import merge

    raw = merge(yaml.safe_load((REPO / "params.yaml").read_text()), yaml.safe_load(TINY_PARAMS.read_text()))
    raw["model"]["base_model"] = str(tiny_model_dir)
    return raw
