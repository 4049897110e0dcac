"""Shared fixtures: a tiny randomly initialised model (no download) and tiny params."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
# Benchmark data (../shared/benchmarks beside the checkout): named absolutely, so that projects the
# tests build in temporary folders (and their subprocesses) find it wherever the suite runs from.
os.environ.setdefault("POPULORA_BENCHMARKS", str(REPO.parent / "shared" / "benchmarks"))
TINY_PARAMS = REPO / "tests" / "fixtures" / "params.tiny.yaml"


# Files committed with the code that the default params name (heldout.pool_file: pool v3, made on the warm base).
# A scratch project needs them too: the DAG passes them to the stages as inputs, relative to the project.
SHIPPED_FILES = ("data/pool-v3/pool.jsonl",)


def copy_shipped_files(root: Path) -> Path:
    """Copy `SHIPPED_FILES` into the scratch project `root`, at the same relative paths."""
    import shutil

    for name in SHIPPED_FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, root / name)
    return root


def copy_snakemake_entry(root: Path) -> Path:
    """A scratch Snakemake project: the Snakefile, workflow/ and profiles/ copied into `root`
    (stages run from the checkout through PYTHONPATH), with the data files the default params name
    (`SHIPPED_FILES`: inputs like any other, read from the project); params.yaml is the caller's."""
    import shutil

    for name in ("Snakefile", "workflow", "profiles"):
        src = REPO / name
        (shutil.copytree if src.is_dir() else shutil.copy)(src, root / name)
    return copy_shipped_files(root)


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


def without_warm_start_or_pool(params: dict, *, propose_pool: bool = False) -> dict:
    """`params` for a whole-pipeline test that asserts nothing on the warm start or on the held-out pool:
    `warm_start.enabled: false` (the warm base is the base, hard-linked: no model loaded, and bench_base
    scores no raw base) and `heldout.per_type: 0` (an empty pool written without loading a model, as the
    tiny model's proposals give anyway; `propose_pool` keeps the proposals). Tested elsewhere: the warm
    start end to end by the Snakemake smoke run and under both engines (tests/test_engines_share.py), in
    process by tests/test_warm_start.py; a committed pool scored by the smoke run; the tiny model proposing
    its pool by the DVC experiments (propose_pool) and the SLURM run."""
    heldout = params["heldout"] if propose_pool else {**params["heldout"], "per_type": 0}
    return {**params, "warm_start": {**params["warm_start"], "enabled": False}, "heldout": heldout}


# The modules that take minutes, longest first (the README's test command, --durations=40, 2026-11-29, two
# workers sharing two cores with the vLLM lane: the DVC experiments ~570 s, the kill test ~560 s, the Snakemake
# smoke runs ~570 s (less the pool's reuse since), both engines on one tiny DAG ~240 s, the SLURM run ~233 s,
# the DVC queue of two seeds ~219 s, the device check ~118 s, the pool baselines ~101 s, ...;
# docs/measurements.md). scripts/run_tests.sh runs the suite on two xdist workers, a module at a time on one
# worker (--dist loadfile, in collection order): starting these first pairs them off across the workers
# instead of leaving one of them alone at the end with a ten-minute module. Order only.
LONGEST_MODULES = (
    "test_dvc_experiments",
    "test_kill_stages",
    "test_pipeline_smoke",
    "test_engines_share",
    "test_slurm_cluster",
    "test_report_study",
    "test_device_check",
    "test_ruler",
    "test_gpu_env",
    "test_study_controls",
    "test_bench_resume",
    "test_update_jobs",
    "test_dvc_shape",
    "test_sandbox",
    "test_bench_members",
    "test_artifacts_robustness",
)


def module_rank(module_name: str) -> int:
    """Where a test module goes in the run: LONGEST_MODULES first, in their order, then the rest."""
    short = module_name.rsplit(".", 1)[-1]
    return LONGEST_MODULES.index(short) if short in LONGEST_MODULES else len(LONGEST_MODULES)


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: module_rank(item.module.__name__) if item.module else len(LONGEST_MODULES))  # stable


# The stage host (populora/core/stagehost/): every `python -m stages.<name>` the engines start in a test runs in a
# fork of one process per pytest worker that imported torch, transformers and PEFT once, not each ~7 s anew (most of
# a tiny pipeline's stage: the smoke module 123 s against 382 s, CPU 55 s against 592 s, docs/measurements.md).
# Started at configure time in the background; a stage started before the host listens waits for it.
# POPULORA_TEST_STAGE_HOST=0 leaves it out (the vLLM lane: vLLM starts processes and threads of its own).
_STAGE_HOST: dict = {}


def _runs_tests(config) -> bool:
    """This process runs tests: an xdist worker, or a session without xdist (not xdist's controller)."""
    return bool(os.environ.get("PYTEST_XDIST_WORKER")) or not getattr(config.option, "numprocesses", None)


def pytest_configure(config):
    if os.environ.get("POPULORA_TEST_STAGE_HOST", "1") == "0" or not _runs_tests(config):
        return
    folder = tempfile.mkdtemp(prefix="stagehost-")
    socket_path = os.path.join(folder, "stages.sock")
    log = open(os.path.join(folder, "host.log"), "w")  # closed at unconfigure
    host = subprocess.Popen(
        [sys.executable, "-m", "populora.core.stagehost", "serve", "--socket", socket_path],
        cwd=REPO,
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # a test's kill of its process group never reaches the host
    )
    os.environ["POPULORA_STAGE_HOST"] = socket_path
    _STAGE_HOST.update(process=host, log=log)


def pytest_unconfigure(config):
    if not _STAGE_HOST:
        return
    os.environ.pop("POPULORA_STAGE_HOST", None)
    _STAGE_HOST["process"].terminate()
    _STAGE_HOST["process"].wait(timeout=30)
    _STAGE_HOST["log"].close()
