"""The time model (workflow/time_model.py) behind the GPU overlays' arithmetic and the SLURM runtimes.

    python -m pytest tests/test_time_model.py -q

The figures written beside params/gpu-smoke.yaml and params/gpu-paper.yaml are the model's (a test
fails when one drifts), and `snakemake -n` on each overlay shows every cluster job's runtime from it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from populora.config import merge, parse_params
from tests.conftest import copy_shipped_files
from workflow.dag import STAGES, scope_items
from workflow.time_model import Model, job_seconds, one_gpu_seconds, runtime_minutes

REPO = Path(__file__).resolve().parents[1]
BIN = str(Path(sys.executable).parent)


def overlay(name: str, **changes) -> dict:
    raw = merge(
        yaml.safe_load((REPO / "params.yaml").read_text()),
        yaml.safe_load((REPO / "params" / f"{name}.yaml").read_text()),
    )
    if name == "gpu-paper":  # LiveCodeBench needs the hub (or a local copy) to validate
        raw["bench"]["benchmarks"] = [b for b in raw["bench"]["benchmarks"] if b != "livecodebench"]
    return merge(raw, changes)


def test_the_smoke_overlays_arithmetic_is_the_models():
    params = parse_params(overlay("gpu-smoke"))
    gpu, total, jobs = one_gpu_seconds(params)
    text = (REPO / "params" / "gpu-smoke.yaml").read_text()
    assert f"{gpu:.0f} s = {gpu / 60:.1f} min" in text and f"{total / 60:.1f} min every job in turn" in text
    assert gpu / 60 < 11 and total / 60 < 17  # "a GPU in ten minutes": the GPU jobs one at a time
    first = next(s for name, _, s in jobs if name == "propose")
    assert f"the first propose {first:.0f} s" in text


def test_the_paper_overlay_keeps_every_row_in_flight_without_preemption():
    """max_num_seqs fits the KV cache when every row runs to its cap (a propose row is the longest)."""
    params = parse_params(overlay("gpu-paper", sampler={"max_num_seqs": 10_000}))
    model = Model(params)
    longest = 500 + 250 * params.propose.references + params.propose.max_new_tokens
    fits = model.in_flight(longest, 1)
    assert parse_params(overlay("gpu-paper")).sampler.max_num_seqs <= fits < 256, fits
    assert longest <= params.update.max_seq_len  # the window holds a whole row


def test_no_estimate_on_the_cpu_and_one_for_every_cluster_job_on_a_gpu():
    cpu = parse_params(yaml.safe_load((REPO / "params.yaml").read_text()))
    gpu = parse_params(overlay("gpu-paper"))
    for stage in STAGES:
        for item in scope_items(stage.scope, gpu).values():
            assert runtime_minutes(stage.name, cpu, item) is None
            if not stage.local:
                assert job_seconds(stage.name, gpu, item) > 0, stage.name


def test_estimates_grow_with_the_work():
    paper = parse_params(overlay("gpu-paper"))
    item = {"arm": "population", "gen": "000"}
    solve = job_seconds("solve", paper, item)
    assert solve > job_seconds("solve", paper, {"arm": "baseline", "gen": "000"})  # 4 students, not 1
    more = parse_params(overlay("gpu-paper", solve={"samples": 16}))
    assert job_seconds("solve", more, item) > 1.8 * (solve - 120)
    assert job_seconds("bench", paper, {"arm": "population", "bench": "gsm8k"}) > job_seconds(
        "bench_base", paper, {"bench": "gsm8k"}
    )
    eager = parse_params(overlay("gpu-paper", sampler={"enforce_eager": True}))
    assert job_seconds("propose", eager, item) < job_seconds("propose", paper, item)  # no compile, no capture


@pytest.mark.slow  # Snakemake subprocesses
@pytest.mark.parametrize("name", ["gpu-smoke", "gpu-paper"])
def test_snakemake_dry_run_shows_the_time_models_runtimes(name, tmp_path):
    import shutil

    for entry in ("Snakefile", "profiles", "workflow", "populora", "stages"):
        (shutil.copytree if (REPO / entry).is_dir() else shutil.copy)(REPO / entry, tmp_path / entry)
    copy_shipped_files(tmp_path)
    raw = overlay(name, dag={"generations": 1})
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    params = parse_params(raw)
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(tmp_path)}
    result = subprocess.run(
        [f"{BIN}/snakemake", "-n", "--cores", "16"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    for block in re.split(r"\n(?=[ \t]*(?:local)?rule \w+:)", result.stdout)[1:]:
        stage = re.match(r"[ \t]*(?:local)?rule (\w+):", block).group(1)
        if stage == "all" or next(s for s in STAGES if s.name == stage).local:
            continue
        wildcards = (
            dict(re.findall(r"(\w+)=([\w.]+)", re.search(r"wildcards: (.*)", block).group(1)))
            if "wildcards:" in block
            else {}
        )
        shown = int(re.search(r"\bruntime=(\d+)", block).group(1))
        assert shown == runtime_minutes(stage, params, wildcards), (stage, wildcards, shown)
