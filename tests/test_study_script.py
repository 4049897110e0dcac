"""scripts/study.sh's controls: each control's `-S` flags, applied by DVC's own override code to
the study's params (the overlay on params.yaml) and to a params file of older code that does not
spell out the newer keys (what a study pinned to an earlier commit holds), validate and set what
the control says. A 1T-1S null once failed after 45 minutes of the study on exactly that. And the
machine each run records beside its wall time."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
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


def _study_fn(call: str, *args: str, script: str = "scripts/study.sh") -> str:
    return subprocess.run(
        ["bash", "-c", f"source {script} && {call}", "-", *args],
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


def test_a_run_s_paused_seconds_go_into_its_run_json(tmp_path):
    """<clone>/<name>.paused_s (seconds stopped by hand for a measurement, over every attempt) becomes run.json's
    paused_s, which the analysis takes off the wall; none means 0, and a value that is no number is refused."""
    clone = str(tmp_path)
    assert _study_fn('paused_seconds "$1" run-s0', clone) == "0"
    (tmp_path / "run-s0.paused_s").write_text("7608\n")
    paused = _study_fn('paused_seconds "$1" run-s0', clone)
    assert paused == "7608"
    machine = '{"cpu": "c", "threads": 2}'
    text = _study_fn('run_json "$@"', "1t1s", "20", "1t1s-s20", "9000", "3", "4000", paused, machine, "a", "b", "true")
    run = json.loads(text)
    assert run["paused_s"] == 7608 and run["wall_s"] == 9000 and run["interrupted_s"] == 4000
    assert run["machine"] == {"cpu": "c", "threads": 2} and run["stage_host"] is True and run["source_commit"] == "a"
    from populora.analysis.runs import _wall_s

    assert _wall_s(run) == 9000 - 7608  # the analysis' wall: the pause taken off
    (tmp_path / "run-s0.paused_s").write_text("76 s\n")
    refused = subprocess.run(
        ["bash", "-c", 'source scripts/study.sh && paused_seconds "$1" run-s0', "-", clone],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert refused.returncode != 0 and "not a whole number of seconds" in refused.stderr


def test_final_measurements_run_only_when_asked_and_measure_the_base_once(tmp_path):
    """STUDY_PASSK / STUDY_CROSSPLAY: pass@k of the run's final students (the base in the first run that
    measures that base, known by its DVC hash: left out once a committed run holds it) and a population's
    cross-play matrix, measured in the clone before the next experiment replaces the adapters (`python`
    stubbed: the arguments it got)."""
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
    # their output has a log of its own: the run's log ends with its DVC work (a killed attempt's end)
    assert (clone / "run-s3.measure.log").exists() and not (clone / "run-s3.log").exists()
    assert passk.startswith("-m populora.analysis.passk --pool results/heldout/pool.jsonl") and "--no-base" not in passk
    assert "--base-model results/base_model --run run-s3=results/population --samples 64" in passk
    assert passk.endswith(f"--out {tmp}/passk")
    assert crossplay == (
        "-m populora.analysis.crossplay results --arm population --params params.yaml "
        f"--base-model results/base_model --tasks-per-gen 8 --out {tmp}/crossplay"
    )
    # a run that made a warm base trained its adapters on it: both load it (the modules' defaults at the study's
    # commit took the raw base)
    (clone / "results" / "warm_base").mkdir()
    passk, crossplay = measure("population", STUDY_PASSK="64", STUDY_CROSSPLAY="8")
    assert "--base-model results/warm_base --run" in passk and "--base-model results/warm_base --tasks" in crossplay
    # the base is known by its DVC hash, written beside figures that hold it (the stub wrote no figures)
    assert not (tmp / "passk" / "base_id").exists()  # the clone has no dvc.lock: nothing says which base it is
    (clone / "dvc.lock").write_text(
        "stages:\n  warm_start:\n    deps:\n    - path: results/base_model\n      hash: md5\n      md5: raw.dir\n"
        "    outs:\n    - path: results/warm_base\n      hash: md5\n      md5: warm-a.dir\n"
    )
    measure("population", STUDY_PASSK="64")
    assert (tmp / "passk" / "base_id").read_text() == "warm-a.dir\n"
    committed = here / "study" / "runs" / "run-s1" / "passk"  # an earlier run measured a base
    committed.mkdir(parents=True)
    (committed / "passk.json").write_text('{"members": {"base": {}}}')
    (committed / "base_id").write_text("warm-b.dir\n")  # another machine type's warm base: measured again here
    (tmp / "passk" / "base_id").unlink()
    (again,) = measure("baseline", STUDY_PASSK="16")
    assert "--no-base" not in again and (tmp / "passk" / "base_id").read_text() == "warm-a.dir\n"
    (committed / "base_id").write_text("warm-a.dir\n")  # this base: left out, and no base_id beside figures without it
    (tmp / "passk" / "base_id").unlink()
    (only,) = measure("baseline", STUDY_PASSK="16", STUDY_CROSSPLAY="8")  # no cross-play matrix for a single agent
    assert "--run run-s3=results/baseline --samples 16 --no-base" in only
    assert not (tmp / "passk" / "base_id").exists()


def test_the_total_budget_control_doubles_what_one_pair_spends(tmp_path):
    """1T-1S at the 2T-2S population's total budget: its proposals, answers and optimizer steps, from the run's params."""
    params = tmp_path / "params.yaml"
    params.write_text("propose: {per_type: 8}\nsolve: {tasks_per_type: 4}\nupdate: {steps: 1}\n")
    out = _study_fn('control_flags 1t1s-total "$1"', str(params)).split("\n")
    assert {
        "population.teachers=1",
        "population.students=1",
        "propose.per_type=16",
        "solve.tasks_per_type=8",
        "update.steps=2",
    } <= set(out)
    assert not any("step_rollouts" in flag for flag in out)  # each step over all the rollouts: twice the work
    split = _study_fn('control_flags 1t1s-total-split "$1"', str(params)).split("\n")
    # the same budget, each of the two steps over its own half: every rollout trained on once
    assert set(split) == set(out) | {"++update.step_rollouts=split"}
    missing = subprocess.run(
        ["bash", "-c", "source scripts/study.sh && control_flags 1t1s-total /no/such/file"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert missing.returncode != 0 and "needs the run's params file" in missing.stderr


HOST_PROBE = """source scripts/study.sh
start_stage_host "$1"
echo "socket=${POPULORA_STAGE_HOST:-}"
if [ -n "${POPULORA_STAGE_HOST:-}" ]; then
  for _ in $(seq 300); do [ -S "$POPULORA_STAGE_HOST" ] && break; sleep 0.1; done
  [ -S "$POPULORA_STAGE_HOST" ] && echo listening
  echo "pid=$stage_host_pid"
fi
stop_stage_host
"""


def start_stage_host(clone: Path, **environ: str) -> str:
    return subprocess.run(
        ["bash", "-c", HOST_PROBE, "-", str(clone)],
        cwd=ROOT,
        env={**VENV_ENV, **environ},
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout


def clone_with(tmp_path: Path, *, engine: str = "hf", device: str = "cpu", host_code: bool = True) -> Path:
    """A stand-in for a study clone: its params.yaml and (or not) its commit's stage host package."""
    clone = tmp_path / "clone"
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["model"]["device"], params["sampler"]["engine"] = device, engine
    clone.mkdir()
    (clone / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    if host_code:
        (clone / "populora").symlink_to(ROOT / "populora")
    return clone


def test_a_cpu_run_s_stages_get_a_stage_host_of_the_clone_s_code(tmp_path):
    """On the CPU with the transformers sampler the study's stages run in a host (~10 s of imports less per
    model stage), started from the clone's code and listening at the socket exported to the stages."""
    out = start_stage_host(clone_with(tmp_path))
    assert "socket=/" in out and "listening" in out, out
    # stopped by the shell that started it (study.sh's EXIT trap): a host outlives a shell that just exits
    pid = int(out.split("pid=")[1].split()[0])
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


@pytest.mark.parametrize(
    "case, clone_kwargs, environ",
    [
        ("switched off", {}, {"STUDY_STAGE_HOST": "off", "POPULORA_STAGE_HOST": "/somewhere/else.sock"}),
        ("vLLM sampler", {"engine": "vllm"}, {}),
        ("GPU run", {"device": "cuda"}, {}),
        ("commit without a host", {"host_code": False}, {}),
    ],
)
def test_no_stage_host_where_it_cannot_or_should_not_stand_in(case, clone_kwargs, environ, tmp_path):
    out = start_stage_host(clone_with(tmp_path, **clone_kwargs), **environ)
    assert "socket=\n" in out and "listening" not in out, (case, out)


def test_a_resumed_total_budget_run_reads_the_committed_params_not_the_killed_attempt_s(tmp_path):
    """`dvc exp run -S` edits the clone's params.yaml; a killed 1t1s-total run started again read those
    edits and doubled them a second time (four times one pair's budget). run_flags restores the
    committed params first, so every attempt gets the same flags."""
    clone = tmp_path / "clone"
    clone.mkdir()
    params = clone / "params.yaml"
    params.write_text("propose: {per_type: 8}\nsolve: {tasks_per_type: 4}\nupdate: {steps: 1}\n")
    git = ["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "params.yaml"], check=True)
    subprocess.run([*git, "commit", "-qm", "overlay"], check=True)
    committed = params.read_text()
    # what the killed attempt's -S left in the work tree, staged in the index as `dvc exp run` does
    params.write_text("propose: {per_type: 16}\nsolve: {tasks_per_type: 8}\nupdate: {steps: 2}\n")
    subprocess.run([*git, "add", "params.yaml"], check=True)
    flags = set(_study_fn('run_flags "$1" 1t1s-total', str(clone)).split("\n"))
    assert {"propose.per_type=16", "solve.tasks_per_type=8", "update.steps=2"} <= flags
    assert params.read_text() == committed
    staged = subprocess.run([*git, "diff", "--cached", "--quiet"], check=False)
    assert staged.returncode == 0  # the index holds the committed params too
    bad = subprocess.run(
        ["bash", "-c", 'source scripts/study.sh && run_flags "$1" 1t1s-total', "-", str(tmp_path / "no-clone")],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert bad.returncode != 0 and bad.stdout == ""


def _process_group(command_line: str) -> subprocess.Popen:
    """A process of its own group whose command line reads `command_line` (a stand-in for a study's stage)."""
    return subprocess.Popen(["bash", "-c", f'exec -a "{command_line}" sleep 60'], start_new_session=True)


def _state(pid: int, wanted: str = "") -> str:
    """The process's state letter; with `wanted`, polled for up to 5 s until it is one of those letters (a signal
    takes effect when the process is next scheduled, later on a loaded machine)."""
    deadline = time.monotonic() + 5
    while True:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if not wanted or state in wanted or time.monotonic() > deadline:
            return state
        time.sleep(0.05)


def _pause(*args: str, timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "scripts/study_pause.sh", *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def test_a_study_run_is_paused_in_a_model_stage_and_its_pause_recorded(tmp_path):
    """stop waits for a model-only stage (no sandbox backstop to fire), SIGSTOPs the run's process group; resume
    continues it and adds the seconds to <clone>/<name>.paused_s, which scripts/study.sh puts into run.json."""
    clone, name = str(tmp_path), "1t1s-s20"
    (tmp_path / f"{name}.paused_s").write_text("100\n")  # an earlier pause of the same run
    stage = _process_group("python -m stages.propose --params params.yaml --arm population")
    try:
        stopped = _pause("stop", clone, name, str(stage.pid))
        assert stopped.returncode == 0 and "in its propose stage" in stopped.stdout
        assert _state(stage.pid, "T") == "T"
        assert _pause("stop", clone, name, str(stage.pid)).returncode == 1  # paused already: said, nothing done
        time.sleep(1.1)
        resumed = _pause("resume", clone, name, str(stage.pid))
        assert resumed.returncode == 0 and _state(stage.pid, "SR") in {"S", "R"}
        paused = int((tmp_path / f"{name}.paused_s").read_text())
        assert 101 <= paused <= 110 and not (tmp_path / f"{name}.paused_at").exists()
        assert _study_fn('paused_seconds "$1" "$2"', clone, name) == str(paused)
        assert _pause("resume", clone, name, str(stage.pid)).returncode == 1  # not paused
    finally:
        os.killpg(stage.pid, signal.SIGKILL)


def test_a_pause_waits_through_a_gap_between_stages(tmp_path):
    """Between two stages no stage process runs: stop keeps waiting (it did not end at once) and stops the next."""
    # the group's first process names no stage; 1.5 s later it becomes a solve stage
    stage = subprocess.Popen(
        ["bash", "-c", 'sleep 1.5; exec -a "python -m stages.$0 --arm population" sleep 60', "solve"],
        start_new_session=True,
    )
    try:
        stopped = _pause("stop", str(tmp_path), "1t1s-s20", str(stage.pid))
        assert stopped.returncode == 0 and "in its solve stage" in stopped.stdout and _state(stage.pid, "T") == "T"
        assert _pause("resume", str(tmp_path), "1t1s-s20", str(stage.pid)).returncode == 0
    finally:
        os.killpg(stage.pid, signal.SIGKILL)


def test_a_study_run_is_not_paused_inside_a_sandbox_stage(tmp_path):
    """verify runs programs under a wall-clock backstop: stop waits and leaves the run alone meanwhile."""
    stage = _process_group("python -m stages.verify --params params.yaml --arm population")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            _pause("stop", str(tmp_path), "1t1s-s20", str(stage.pid), timeout=3)
        assert _state(stage.pid, "SR") in {"S", "R"} and not (tmp_path / "1t1s-s20.paused_at").exists()
    finally:
        os.killpg(stage.pid, signal.SIGKILL)


def test_the_pause_script_finds_the_study_run_of_a_clone(tmp_path):
    clone = str(tmp_path / "clone")
    study = _process_group(f"bash scripts/study.sh {clone} 1t1s:20 ensemble:20")
    try:
        time.sleep(0.2)
        found = _study_fn('study_pgid "$1"', clone, script="scripts/study_pause.sh")
        assert found == str(study.pid)  # started with setsid: its own group
        assert _pause("stop", clone + "-other", "x").returncode == 1  # no run of that clone: said, not waited on
    finally:
        os.killpg(study.pid, signal.SIGKILL)
