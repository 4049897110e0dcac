"""The cluster profile for real: the tiny pipeline's training (the population arm, one generation) through
`snakemake --profile profiles/slurm` on a one-node SLURM cluster started here
(scripts/slurm_local.sh: Debian's slurm-wlm and munge, installed with apt when missing; needs root),
with grouped jobs; its artifacts equal those of a local run, byte for byte (on the CPU: on a GPU, batch
composition and atomic adds change the numbers between runs, docs/gpu.md).

Skipped, with the reason, where the cluster cannot start (not root, no apt, a daemon that fails).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, copy_snakemake_entry

pytestmark = pytest.mark.slow
BIN = str(Path(sys.executable).parent)
# one generation: the arm's chain (init, a generation's `generate` and `train` groups, evolve, checkpoint)
# once. A second generation repeats the same jobs (~45% of the test's time, which is the suite's longest);
# the baseline arm, the same kinds of job with one adapter, would add a third of them
GENERATIONS = ("000",)
TARGETS = [f"results/population/gen{GENERATIONS[-1]}/checkpoint"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A running one-node cluster: the environment that reaches it (SLURM_CONF)."""
    folder = tmp_path_factory.mktemp("slurm")
    script = str(REPO / "scripts" / "slurm_local.sh")
    started = subprocess.run(["bash", script, "start", str(folder)], capture_output=True, text=True, timeout=900)
    if started.returncode == 77:
        pytest.skip(f"no SLURM cluster here: {started.stderr.strip()}")
    assert started.returncode == 0, started.stdout + started.stderr
    try:
        yield {**os.environ, "SLURM_CONF": str(folder / "slurm.conf")}
    finally:
        subprocess.run(["bash", script, "stop", str(folder)], capture_output=True, text=True, timeout=120)


def _project(root: Path, params: dict) -> Path:
    copy_snakemake_entry(root)
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    return root


def _snakemake(project: Path, *args: str, env: dict | None = None, timeout: int = 2400) -> subprocess.CompletedProcess:
    env = {**(env or os.environ), "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [f"{BIN}/snakemake", *args], cwd=project, env=env, capture_output=True, text=True, timeout=timeout
    )


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def test_tiny_training_through_the_slurm_profile_equals_a_local_run(cluster, tmp_path_factory, tiny_params_dict):
    params = json.loads(json.dumps(tiny_params_dict))
    params["dag"]["generations"] = len(GENERATIONS)
    params["dag"]["arms"] = ["population"]
    assert params["dag"]["update_jobs"] == 4  # the default: one job per adapter, side by side in `train`
    assert params["population"] == {"teachers": 2, "students": 2}
    params["model"]["device"] = "auto"  # model jobs request a GPU (the cluster's stand-ins) and run on the CPU
    local = _project(tmp_path_factory.mktemp("local"), params)
    remote = _project(tmp_path_factory.mktemp("remote"), params)

    # the site-specific part a user adds: the partition, squeue for job status (no accounting
    # database), short waits between status checks (a minute-long job needs no 40 s first wait)
    override = remote / "site"
    override.mkdir()
    (override / "config.yaml").write_text(
        yaml.safe_dump(
            {
                "default-resources": ["slurm_partition=main", "mem_mb=8000", "runtime=60"],
                "slurm-status-command": "squeue",
                "slurm-init-seconds-before-status-checks": 2,
                "latency-wait": 5,
                "slurm-keep-successful-logs": True,
            }
        )
    )
    # the local run goes on while SLURM's jobs are submitted and polled (most of that run's time is waiting)
    with ThreadPoolExecutor(max_workers=1) as pool:
        local_run = pool.submit(_snakemake, local, *TARGETS, "--cores", "2", "--resources", "gpu=1")
        submitted = _snakemake(remote, *TARGETS, "--profile", "profiles/slurm", "--profile", str(override), env=cluster)
        ran = local_run.result()
    log = submitted.stdout + submitted.stderr
    assert submitted.returncode == 0, log[-6000:]
    assert ran.returncode == 0, ran.stderr[-4000:]

    # grouped: per arm and generation one `generate` job (propose, verify, solve, grade) and one
    # `train` job (the update jobs and update_gather); base_model, warm_start and init on their own; pair,
    # reward, evolve and checkpoint run on the submitting node; heldout_pool (the base proposes the
    # held-out pool that generation 0's verify keeps out of training) is a model job of its own
    slurm_logs = remote / ".snakemake" / "slurm_logs"
    logs = [(p.relative_to(slurm_logs).parts[0], p.read_text()) for p in sorted(slurm_logs.rglob("*.log"))]
    kinds = sorted(top for top, _ in logs)
    generate = [text for top, text in logs if top.startswith("group_generate")]
    train = [text for top, text in logs if top.startswith("group_train")]
    assert len(generate) == len(train) == len(GENERATIONS), kinds
    assert sorted(top for top in kinds if not top.startswith("group_")) == [
        "rule_base_model",
        "rule_heldout_pool",
        "rule_init",
        "rule_warm_start",
    ]
    submissions = re.findall(r"submitted with SLURM jobid (\d+)", log)
    assert len(set(submissions)) == len(logs) == 1 + 1 + 1 + 1 + 2 * len(GENERATIONS), log[-3000:]
    for text in generate:
        assert all(f"localrule {rule}:" in text for rule in ("propose", "verify", "solve", "grade")), text[-3000:]
    assert sum(text.count("localrule update:") for text in train) == len(GENERATIONS) * 4
    assert all("localrule update_gather:" in text for text in train)

    for gen in GENERATIONS:
        for name in ("checkpoint", "trained", "metrics.json", "rollouts.jsonl", "tasks.jsonl", "answers.jsonl"):
            a, b = (root / "results/population" / f"gen{gen}" / name for root in (local, remote))
            if a.is_dir():
                assert _digest(a) == _digest(b), f"gen{gen}/{name} differs between local and SLURM"
            else:
                assert a.read_bytes() == b.read_bytes(), f"gen{gen}/{name} differs between local and SLURM"
    assert (
        remote / f"results/population/gen{GENERATIONS[-1]}/checkpoint/adapters/student1/adapter_model.safetensors"
    ).is_file()
