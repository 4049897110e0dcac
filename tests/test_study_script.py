"""scripts/study.sh's controls: each control's `-S` flags, applied by DVC's own override code to
the study's params (the overlay on params.yaml) and to a params file of older code that does not
spell out the newer keys (what a study pinned to an earlier commit holds), validate and set what
the control says. A 1T-1S null once failed after 45 minutes of the study on exactly that. And the
machine each run records beside its wall time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from populora.config import load_params, merge

ROOT = Path(__file__).resolve().parents[1]
# study.sh runs `python` from its .venv: the one running the tests
VENV_ENV = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
CONTROLS = ("baseline", "baseline-roles", "1t1s", "2t2s", "2t2s-noevo", "ensemble", "4t4s", "1t1s-total-split")


def control_flags(control: str) -> list[str]:
    out = subprocess.run(
        ["bash", "-c", 'source scripts/study.sh && control_flags "$1"', "-", control],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    flags = [line for line in out if line]
    assert flags[::2] == ["-S"] * (len(flags) // 2), flags
    return flags[1::2]


def study_params(tmp_path: Path, *, older: bool) -> Path:
    params = merge(
        yaml.safe_load((ROOT / "params.yaml").read_text()), yaml.safe_load((ROOT / "params/cpu-study.yaml").read_text())
    )
    if older:  # keys later code added to params.yaml (the config's defaults stand in for them)
        for key in ("shuffle_advantages", "role_steps"):
            params["update"].pop(key, None)
        params["propose"].pop("reject_copyable", None)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


@pytest.mark.parametrize("older", [False, True], ids=["current", "older-params"])
@pytest.mark.parametrize(
    "control", [*CONTROLS, *(f"{c}-null" for c in CONTROLS), "1t1s-nocopy", "baseline-nocopy", "2t2s-nocopy-null"]
)
def test_every_control_applies_and_validates(control, older, tmp_path):
    from dvc.utils.hydra import apply_overrides

    path = study_params(tmp_path, older=older)
    apply_overrides(path, [*control_flags(control), "base.seed=2"])
    params = load_params(path)
    assert params.base.seed == 2
    assert params.update.shuffle_advantages is control.endswith("-null")
    assert params.propose.reject_copyable is control.removesuffix("-null").endswith("-nocopy")
    base = control.removesuffix("-null").removesuffix("-nocopy")
    assert list(params.dag.arms) == (["baseline"] if base.startswith("baseline") else ["population"])
    assert params.update.role_steps == ("per_role" if base == "baseline-roles" else "joint")
    assert params.update.step_rollouts == ("split" if base == "1t1s-total-split" else "all")
    sizes = {"1t1s": (1, 1), "ensemble": (2, 2), "4t4s": (4, 4)}
    if base in sizes:
        assert (params.population.teachers, params.population.students) == sizes[base]
    assert (params.evolve.replace == 0) is (base in ("2t2s-noevo", "ensemble"))
    # the ensemble control: independent pairs (teacher k serves student k only), no evolution
    assert (params.pairing.strategy == "pairs") is (base == "ensemble")


def test_an_unknown_control_is_refused():
    result = subprocess.run(
        ["bash", "-c", "source scripts/study.sh && control_flags 3t3s"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode != 0 and "unknown control 3t3s" in result.stderr


def test_machine_json_names_this_machine():
    """run.json records the machine each wall time was taken on (machines drawn for a study differ)."""
    out = subprocess.run(
        ["bash", "-c", "source scripts/study.sh && machine_json"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    machine = json.loads(out)
    assert machine["cpus"] == len(os.sched_getaffinity(0)) and machine["cpu"]
    flags = set(Path("/proc/cpuinfo").read_text().split()) if Path("/proc/cpuinfo").is_file() else set()
    assert set(machine["features"].split()) == {f for f in ("avx2", "avx512f", "avx512_bf16", "amx_bf16") if f in flags}
    assert (
        machine["threads"] == int(os.environ.get("OMP_NUM_THREADS") or 1) and machine["beside"] == ""
    )  # params.yaml's


def test_machine_json_reads_the_chain_threads_from_the_runs_params(tmp_path):
    """Without OMP_NUM_THREADS a training-chain stage takes model.cpu_threads (populora.lm.device.cpu_threads)."""
    params = tmp_path / "params.yaml"
    params.write_text("model:\n  cpu_threads: 2\n")
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    out = subprocess.run(
        ["bash", "-c", f"source scripts/study.sh && machine_json {params}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert json.loads(out)["threads"] == 2
    params.write_text("model:\n  dtype: float32\n")  # a clone of a commit before the key: one thread
    out = subprocess.run(
        ["bash", "-c", f"source scripts/study.sh && machine_json {params}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert json.loads(out)["threads"] == 1


def test_machine_json_records_threads_and_what_ran_beside():
    """Two study runs side by side on one thread each: their wall times must say so."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "STUDY_BESIDE": "another study run on 1 thread"}
    out = subprocess.run(
        ["bash", "-c", "source scripts/study.sh && machine_json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    machine = json.loads(out)
    assert machine["threads"] == 1 and machine["beside"] == "another study run on 1 thread"
    # nproc alone would say 1 here: the machine's CPUs do not change with the threads a stage uses
    assert machine["cpus"] == len(os.sched_getaffinity(0))


@pytest.mark.parametrize(
    "text, kept",
    [
        ("", False),
        ("schema: '2.0'\nstages:\n  a: {cmd: x", False),
        ("- not\n- a mapping\n", False),
        ("schema: '2.0'\nstages: {}\n", True),
    ],
)
def test_a_torn_dvc_lock_is_removed_and_a_whole_one_kept(text, kept, tmp_path):
    """A run killed as it began left an empty dvc.lock, which failed the next four runs in DVC's schema check."""
    lock = tmp_path / "dvc.lock"
    lock.write_text(text)
    out = subprocess.run(
        ["bash", "-c", 'source scripts/study.sh && drop_torn_lock "$1" run-s0', "-", str(lock)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
        env=VENV_ENV,
    ).stdout
    assert lock.exists() == kept and (("empty or unreadable" in out) != kept)


def test_no_dvc_lock_is_left_alone(tmp_path):
    subprocess.run(
        ["bash", "-c", 'source scripts/study.sh && drop_torn_lock "$1" run-s0', "-", str(tmp_path / "dvc.lock")],
        cwd=ROOT,
        check=True,
        env=VENV_ENV,
    )
    assert not (tmp_path / "dvc.lock").exists()


def _study_fn(call: str, *args: str) -> str:
    return subprocess.run(
        ["bash", "-c", f"source scripts/study.sh && {call}", "-", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def test_a_resumed_run_counts_every_attempt(tmp_path):
    """A run killed (a session's end) and started again: its wall time adds the killed attempts, each
    closed at its log's last write, so a resumed run's wall_s is not just its last attempt."""
    clone = str(tmp_path)
    assert _study_fn('earlier_attempts "$1" run-s0', clone) == "0 0"
    assert _study_fn('close_interrupted_attempt "$1" run-s0', clone) == ""  # nothing open: nothing to close
    assert not (tmp_path / "run-s0.attempts").exists()
    for begin, last_write in ((1000, 1600), (2000, 2100), (3000, 2900)):  # the last: a log older than its start
        (tmp_path / "run-s0.started").write_text(f"{begin}\n")
        (tmp_path / "run-s0.log").write_text("stage output\n")
        os.utime(tmp_path / "run-s0.log", (last_write, last_write))
        _study_fn('close_interrupted_attempt "$1" run-s0', clone)
        assert not (tmp_path / "run-s0.started").exists()
    assert (tmp_path / "run-s0.attempts").read_text().split() == ["600", "100", "0"]
    assert _study_fn('earlier_attempts "$1" run-s0', clone) == "700 3"
    assert _study_fn('earlier_attempts "$1" other-s0', clone) == "0 0"  # per run


def test_final_measurements_run_only_when_asked_and_measure_the_base_once(tmp_path):
    """STUDY_PASSK / STUDY_CROSSPLAY: pass@k of the run's final students (the base in the first run that
    measures it, left out once a committed run holds it) and a population's cross-play matrix, measured in
    the clone before the next experiment replaces the adapters (`python` stubbed: the arguments it got)."""
    clone, here, tmp = tmp_path / "clone", tmp_path / "here", tmp_path / "tmp"
    (clone / "results" / "heldout").mkdir(parents=True)
    (clone / "results" / "heldout" / "pool.jsonl").write_text('{"task_id": "t"}\n')
    (here / "study" / "runs").mkdir(parents=True)
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "python").write_text(f'#!/bin/sh\necho "$@" >> {tmp_path / "calls"}\n')
    (stub / "python").chmod(0o755)

    def measure(arm: str, **env) -> list[str]:
        (tmp_path / "calls").unlink(missing_ok=True)
        subprocess.run(
            [
                "bash",
                "-c",
                f'source scripts/study.sh && here="$1" runs=study/runs && '
                f'PATH="{stub}:$PATH" measure_final "$2" run-s3 {arm} "$3"',
                "-",
                str(here),
                str(clone),
                str(tmp),
            ],
            cwd=ROOT,
            check=True,
            env={**os.environ, **env},
        )
        return (tmp_path / "calls").read_text().splitlines() if (tmp_path / "calls").exists() else []

    assert measure("population") == []  # asked for nothing
    passk, crossplay = measure("population", STUDY_PASSK="64", STUDY_CROSSPLAY="8")
    assert passk.startswith("-m populora.analysis.passk --pool results/heldout/pool.jsonl") and "--no-base" not in passk
    assert "--run run-s3=results/population --samples 64" in passk and passk.endswith(f"--out {tmp}/passk")
    assert (
        crossplay
        == f"-m populora.analysis.crossplay results --arm population --params params.yaml --tasks-per-gen 8 --out {tmp}/crossplay"
    )
    committed = here / "study" / "runs" / "run-s1" / "passk"  # an earlier run measured the base
    committed.mkdir(parents=True)
    (committed / "passk.json").write_text('{"members": {"base": {}}}')
    (only,) = measure("baseline", STUDY_PASSK="16", STUDY_CROSSPLAY="8")  # no cross-play matrix for a single agent
    assert "--run run-s3=results/baseline --samples 16 --no-base" in only


def test_the_total_budget_control_doubles_what_one_pair_spends(tmp_path):
    """1T-1S at the 2T-2S population's total budget: its proposals, answers and optimizer steps, from the run's params."""
    params = tmp_path / "params.yaml"
    params.write_text("propose: {per_type: 8}\nsolve: {tasks_per_type: 4}\nupdate: {steps: 1}\n")
    out = subprocess.run(
        ["bash", "-c", 'source scripts/study.sh && control_flags 1t1s-total "$1"', "-", str(params)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    assert {
        "population.teachers=1",
        "population.students=1",
        "propose.per_type=16",
        "solve.tasks_per_type=8",
        "update.steps=2",
    } <= set(out)
    assert not any("step_rollouts" in flag for flag in out)  # each step over all the rollouts: twice the work
    split = subprocess.run(
        ["bash", "-c", 'source scripts/study.sh && control_flags 1t1s-total-split "$1"', "-", str(params)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\n")
    # the same budget, each of the two steps over its own half: every rollout trained on once
    assert set(split) == set(out) | {"++update.step_rollouts=split"}
    missing = subprocess.run(
        ["bash", "-c", "source scripts/study.sh && control_flags 1t1s-total /no/such/file"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert missing.returncode != 0 and "needs the run's params file" in missing.stderr
