"""GPU scheduling: GPU rules take a few threads and a device each (several for a multi-process
update); a group's allocation is shared out; the SLURM profile dry-runs with its own resources.
With `model.device: cpu` (the CPU default) the model stages claim no GPU and take one thread each."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from populora.lm.device import CPU_MODEL_THREADS
from stages import _common
from tests.conftest import REPO, copy_shipped_files
from workflow.dag import GPU_THREADS, STAGES

BIN = str(Path(sys.executable).parent)

# A GPU job: claim a device, report it, hold it until told to stop (or for `hold` seconds).
JOB = """
import logging, os, sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from populora.lm.gpus import claim_gpu
logging.basicConfig(level=logging.INFO)
device = claim_gpu(logging.getLogger("job"), poll_s=0.1, count=int(os.environ.get("COUNT", "1")))
Path(sys.argv[2]).write_text(f"{device} {os.environ.get('CUDA_VISIBLE_DEVICES')} {time.time()}")
stop = Path(sys.argv[3])
deadline = time.time() + 60
while not stop.exists() and time.time() < deadline:
    time.sleep(0.05)
"""


def _env(tmp_path, devices="0,1,2", **extra):
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_VISIBLE_DEVICES", "LOCAL_RANK", "SLURM_JOB_ID")}
    return {**env, "POPULORA_GPUS": devices, "POPULORA_GPU_LOCKS": str(tmp_path / "locks"), **extra}


def _wait_for(paths, timeout=60):
    deadline = time.time() + timeout
    while not all(p.exists() and p.read_text() for p in paths):
        assert time.time() < deadline, f"jobs did not report: {[p for p in paths if not p.exists()]}"
        time.sleep(0.05)


def test_the_dag_tells_its_gpu_stages_to_claim_a_device(tmp_path, monkeypatch):
    """The DAG's `gpu` stages, and only they, get --claim-gpu; a stage claims a device only with it."""
    for stage in STAGES:
        command = stage.command(
            {k: "X" for k in (*stage.inputs, *stage.outputs, *stage.side)}, dict.fromkeys(stage.wildcards, "0"), "L"
        )
        assert command.endswith(" --claim-gpu") == bool(stage.gpu), stage.name
    claims = []
    monkeypatch.setattr(_common, "claim_gpu", lambda log, **kwargs: claims.append(kwargs))
    params = tmp_path / "params.yaml"
    params.write_text((REPO / "params.yaml").read_text())
    parser = _common.stage_parser("test", arm=False, gen=False)
    _common.setup(parser.parse_args(["--params", str(params)]), "pair")
    assert claims == []
    _common.setup(parser.parse_args(["--params", str(params), "--claim-gpu"]), "solve")
    assert claims == [{}]


def test_concurrent_gpu_jobs_get_distinct_devices(tmp_path):
    stop = tmp_path / "stop"
    reports = [tmp_path / f"job{i}.txt" for i in range(3)]
    jobs = [
        subprocess.Popen([sys.executable, "-c", JOB, str(REPO), str(r), str(stop)], env=_env(tmp_path)) for r in reports
    ]
    try:
        _wait_for(reports)
        devices = [r.read_text().split()[:2] for r in reports]
        assert sorted(d for d, _ in devices) == ["0", "1", "2"]
        assert all(d == visible for d, visible in devices)  # CUDA_VISIBLE_DEVICES is the claimed device
    finally:
        stop.touch()
        for job in jobs:
            job.wait(timeout=60)


def test_a_job_waits_for_a_free_device_then_takes_the_released_one(tmp_path):
    stop_first = tmp_path / "stop_first"
    first, second = tmp_path / "first.txt", tmp_path / "second.txt"
    holder = subprocess.Popen(
        [sys.executable, "-c", JOB, str(REPO), str(first), str(stop_first)], env=_env(tmp_path, devices="5")
    )
    _wait_for([first])
    waiter = subprocess.Popen(
        [sys.executable, "-c", JOB, str(REPO), str(second), str(tmp_path / "stop_second")],
        env=_env(tmp_path, devices="5"),
    )
    try:
        time.sleep(1.0)
        assert not second.exists()  # the only device is held
        released = time.time()
        stop_first.touch()
        holder.wait(timeout=60)
        _wait_for([second])
        device, visible, when = second.read_text().split()
        assert device == visible == "5" and float(when) >= released
    finally:
        (tmp_path / "stop_second").touch()
        stop_first.touch()
        for job in (holder, waiter):
            job.wait(timeout=60)


def _claim(tmp_path, **env) -> list[str]:
    """What `claim_gpu` returns, and CUDA_VISIBLE_DEVICES after it, in a fresh process."""
    code = (
        "import logging, os, sys; sys.path.insert(0, sys.argv[1]); from populora.lm.gpus import claim_gpu;"
        "print(claim_gpu(logging.getLogger('x')), os.environ.get('CUDA_VISIBLE_DEVICES'))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, str(REPO)], env=_env(tmp_path, **env), capture_output=True, text=True, timeout=60
    )
    return out.stdout.split()


def test_a_device_given_by_the_caller_is_kept(tmp_path):
    assert _claim(tmp_path, CUDA_VISIBLE_DEVICES="3") == ["3", "3"]
    assert _claim(tmp_path, CUDA_VISIBLE_DEVICES="2,5", LOCAL_RANK="1") == ["2,5", "2,5"]  # accelerate launch's
    assert not (tmp_path / "locks").exists()


def test_an_allocation_of_several_gpus_is_shared_out(tmp_path):
    """A SLURM group job holds one GPU per update job (CUDA_VISIBLE_DEVICES=4,5,6): each job run
    inside it takes one of those, never all of them (cuda:0 would be the same GPU for every job)."""
    stop = tmp_path / "stop"
    reports = [tmp_path / f"job{i}.txt" for i in range(3)]
    env = _env(tmp_path, devices="", CUDA_VISIBLE_DEVICES="4,5,6")
    jobs = [subprocess.Popen([sys.executable, "-c", JOB, str(REPO), str(r), str(stop)], env=env) for r in reports]
    try:
        _wait_for(reports)
        assert sorted(r.read_text().split()[0] for r in reports) == ["4", "5", "6"]
    finally:
        stop.touch()
        for job in jobs:
            job.wait(timeout=60)


def test_a_multi_process_update_claims_its_devices_together(tmp_path):
    stop = tmp_path / "stop"
    pair, single = tmp_path / "pair.txt", tmp_path / "single.txt"
    first = subprocess.Popen(
        [sys.executable, "-c", JOB, str(REPO), str(pair), str(stop)], env=_env(tmp_path, devices="0,1,2", COUNT="2")
    )
    try:
        _wait_for([pair])
        assert pair.read_text().split()[:2] == ["0,1", "0,1"]
        second = subprocess.Popen(
            [sys.executable, "-c", JOB, str(REPO), str(single), str(stop)], env=_env(tmp_path, devices="0,1,2")
        )
        _wait_for([single])
        assert single.read_text().split()[0] == "2"
    finally:
        stop.touch()
        first.wait(timeout=60)
        second.wait(timeout=60)


def test_no_gpu_means_no_claim(tmp_path):
    assert _claim(tmp_path, devices="") == ["None", "None"]


def _snakemake_dry(
    *args: str, device: str | None = None, tmp_path: Path | None = None, changes: dict | None = None
) -> str:
    """A dry run of the repository's workflow; with `device` (or `changes`: section -> {key: value}), of a copy
    whose params.yaml sets `model.device` to it (and the `changes`), in `tmp_path`."""
    cwd = REPO
    if device is not None or changes:
        import shutil

        import yaml

        cwd = tmp_path / "project"
        cwd.mkdir(parents=True)
        for name in ("Snakefile", "profiles", "workflow", "populora", "stages"):
            (shutil.copytree if (REPO / name).is_dir() else shutil.copy)(REPO / name, cwd / name)
        copy_shipped_files(cwd)
        params = yaml.safe_load((REPO / "params.yaml").read_text())
        params["model"]["device"] = device or params["model"]["device"]
        for section, values in (changes or {}).items():
            params[section].update(values)
        (cwd / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    env = {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(cwd)}
    result = subprocess.run(
        [f"{BIN}/snakemake", "-n", "--forceall", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout + result.stderr


def _blocks(output: str) -> dict[str, str]:
    blocks = {}
    for block in re.split(r"\n(?=[ \t]*(?:local)?rule \w+:)", output):  # jobs of a group job are indented
        match = re.match(r"[ \t]*(local)?rule (\w+):", block)
        if match:
            blocks.setdefault(match.group(2), block)
    return blocks


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_gpu_rules_take_a_few_threads_not_every_core(device, tmp_path):
    """On a GPU a model stage takes a few threads and a device; on the CPU one thread and no
    device, so --cores 16 runs up to 16 of them side by side."""
    from populora.config import load_params

    params = load_params(REPO / "params.yaml")
    blocks = _blocks(_snakemake_dry("--cores", "16", device=device, tmp_path=tmp_path))
    for stage in STAGES:
        threads = (
            int(re.search(r"threads: (\d+)", blocks[stage.name]).group(1)) if "threads:" in blocks[stage.name] else 1
        )
        model_threads = GPU_THREADS if device == "cuda" else CPU_MODEL_THREADS
        if stage.alone and device == "cpu":  # the warm start takes every core (nothing runs beside it)
            model_threads = os.cpu_count() or 1
        # the sandbox stages: verify.workers on a GPU; one on the CPU, where a 2-thread claim waited behind the
        # 1-thread model stages (Snakemake keeps no cores free for it)
        sandbox_threads = params.verify.workers if device == "cuda" else 1
        expected = sandbox_threads if stage.threads == "verify.workers" else model_threads if stage.gpu else 1
        assert threads == expected, stage.name
        gpus = re.search(r"\bgpu=(\d+)", blocks[stage.name]).group(1)
        assert int(gpus) == (1 if stage.gpu and device == "cuda" else 0), stage.name
    assert {s.name for s in STAGES if s.threads == "verify.workers"} == {"init", "verify", "grade"}  # the sandbox


def test_model_stages_on_the_cpu_claim_no_gpu_and_one_thread_per_process():
    from populora.config import load_params

    params = load_params(REPO / "params.yaml")
    model_stages = [s for s in STAGES if s.gpu and not s.alone]
    assert params.model.device == "cpu"  # the CPU default runs its model stages side by side
    assert all(s.gpus(params) == 0 and s.thread_count(params) == CPU_MODEL_THREADS for s in model_stages)
    # a stage alone at its point of the chain (the warm start: every later stage needs its model) takes every core
    alone = [s for s in STAGES if s.alone]
    assert [s.name for s in alone] == ["warm_start"]
    assert all(s.gpus(params) == 0 and s.thread_count(params) == (os.cpu_count() or 1) for s in alone)
    for device in ("auto", "cuda"):  # auto claims a GPU: where a cluster job lands is not known here
        other = params.model_copy(update={"model": params.model.model_copy(update={"device": device})})
        assert all(s.gpus(other) >= 1 and s.thread_count(other) == GPU_THREADS for s in model_stages), device
    assert all(s.gpus(params) == 0 for s in STAGES if not s.gpu)
    # the sandbox stages claim one thread on the CPU (a ready job needing two waited behind 1-thread jobs)
    assert params.verify.workers == 2 and all(
        s.thread_count(params) == 1 for s in STAGES if s.threads == "verify.workers"
    )
    # update.processes on the CPU: no GPU claimed, but one thread per process (2 processes, 2 threads)
    two = params.model_copy(update={"update": params.update.model_copy(update={"processes": 2})})
    update = next(s for s in STAGES if s.name == "update")
    assert update.gpus(two) == 0 and update.thread_count(two) == 2 * CPU_MODEL_THREADS
    assert all(s.thread_count(two) == CPU_MODEL_THREADS for s in model_stages if s.name != "update")


def _resolved(*args: str) -> dict:
    """The settings a snakemake command line resolves to (its profiles and the workflow profile)."""
    code = (
        "import json, sys; from snakemake.cli import parse_args; _, a = parse_args(sys.argv[1:]);"
        "print(json.dumps({'cores': a.cores, 'resources': {k: v.value for k, v in (a.resources or {}).items()},"
        "'set_resources': {r: {k: v.value for k, v in d.items()} for r, d in (a.set_resources or {}).items()},"
        "'groups': a.groups}))"
    )
    result = subprocess.run([sys.executable, "-c", code, *args], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.splitlines()[-1])


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_the_workflow_profile_does_not_override_the_cluster_profile():
    """profiles/default is read on every run and overrides --profile: its local cores and gpu=1 must
    not reach a cluster run (one GPU job at a time, threads capped at the login node's cores)."""
    local = _resolved("-n")
    assert local["cores"] == os.cpu_count() and local["resources"] == {"gpu": 1}  # cores: all
    cluster = _resolved("-n", "--profile", "profiles/slurm")
    assert cluster["cores"] == 64 and cluster["resources"] == {"gpu": 64}
    assert cluster["set_resources"]["bench_base"] == {"mem_mb": 32000}  # runtime: the time model's (Snakefile)
    assert cluster["groups"]["update"] == cluster["groups"]["update_gather"] == "train"
    assert {cluster["groups"][r] for r in ("propose", "verify", "solve", "grade")} == {"generate"}


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_slurm_profile_dry_run_requests_gpus_memory_and_runtime(tmp_path):
    import yaml

    from populora.config import load_params
    from workflow.dag import scope_items
    from workflow.time_model import runtime_minutes

    params = load_params(REPO / "params.yaml")
    cuda = params.model_copy(update={"model": params.model.model_copy(update={"device": "cuda"})})
    profile = yaml.safe_load((REPO / "profiles" / "slurm" / "config.yaml").read_text())
    output = _snakemake_dry("--profile", "profiles/slurm", device="cuda", tmp_path=tmp_path)  # a GPU cluster
    blocks = _blocks(output)
    for stage in STAGES:
        block = blocks[stage.name]
        if stage.local:
            continue
        resources = re.search(r"resources: (.*)", block).group(1)
        wanted = profile["set-resources"][stage.name]  # every cluster stage's memory sized in the profile
        runtimes = {runtime_minutes(stage.name, cuda, item) for item in scope_items(stage.scope, cuda).values()}
        runtime = int(re.search(r"\bruntime=(\d+)", resources).group(1))  # from the time model, not the profile
        assert f"mem_mb={wanted['mem_mb']}," in resources and runtime in runtimes, (stage.name, runtime, runtimes)
        assert bool(re.search(r"\bgpu=[1-9]", resources)) == bool(stage.gpu), stage.name
        threads = re.search(r"threads: (\d+)", block)
        expected = profile["set-threads"].get(stage.name) or (params.verify.workers if stage.threads else 1)
        assert (int(threads.group(1)) if threads else 1) == expected, stage.name
    assert "Group job generate" in output and "Group job train" in output
    assert not any(s.local and s.gpu for s in STAGES)


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_small_cpu_rules_are_local_rules():
    code = (
        "from pathlib import Path; from snakemake.api import SnakemakeApi;"
        "from snakemake.settings.types import OutputSettings, ResourceSettings\n"
        "with SnakemakeApi(OutputSettings()) as api:\n"
        "    wf = api.workflow(resource_settings=ResourceSettings(cores=1), snakefile=Path('Snakefile'),"
        " workdir=Path('.'))._workflow\n"
        "    print(' '.join(sorted(wf._localrules)))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert set(result.stdout.split()) == {s.name for s in STAGES if s.local}
    assert {s.name for s in STAGES if s.local} >= {"pair", "reward", "bench_summary", "report"}


def test_a_one_arm_run_gives_its_training_chain_every_core_it_asks_for_and_the_benchmarks_one(monkeypatch):
    """model.cpu_threads: the training chain's model stages (Snakemake threads and the stage's own torch threads, the
    same count under DVC) take it; the benchmarks stay on one thread, the warm start on every core."""
    from populora.config import load_params
    from populora.lm.device import pin_cpu_threads

    params = load_params(REPO / "params.yaml")
    two = params.model_copy(update={"model": params.model.model_copy(update={"cpu_threads": 2})})
    chain = {s.name for s in STAGES if s.chain}
    assert chain == {"heldout_pool", "propose", "solve", "update", "heldout"}
    for stage in STAGES:
        if stage.gpu and not stage.alone:
            assert stage.thread_count(two) == (2 if stage.name in chain else CPU_MODEL_THREADS), stage.name
            assert "model.cpu_threads" in stage.params or stage.name not in chain, stage.name  # it changes the bytes
    processes = two.model_copy(update={"update": two.update.model_copy(update={"processes": 2})})
    assert next(s for s in STAGES if s.name == "update").thread_count(processes) == 4
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert pin_cpu_threads(two, chain=True) == 2 and os.environ["OMP_NUM_THREADS"] == "2"
    monkeypatch.delenv("OMP_NUM_THREADS")
    assert pin_cpu_threads(two) == CPU_MODEL_THREADS  # a benchmark
    assert pin_cpu_threads(two, chain=True) is None  # the engine (or the user) chose already: left as it is


def _update_jobs(output: str) -> dict[tuple[str, str], int]:
    """(arm, part) -> threads of each update job in a dry run's output."""
    jobs = {}
    for block in re.split(r"\n(?=[ \t]*(?:local)?rule \w+:)", output):
        if re.match(r"[ \t]*rule update:", block):
            wildcards = dict(re.findall(r"(\w+)=(\w+)", re.search(r"wildcards: (.*)", block).group(1)))
            threads = re.search(r"threads: (\d+)", block)
            jobs[wildcards["arm"], wildcards["part"]] = int(threads.group(1)) if threads else 1
    return jobs


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_an_arms_update_jobs_share_the_chains_threads_when_they_run_side_by_side(tmp_path):
    """dag.update_side_by_side: 2 with model.cpu_threads = 2: the population's four update jobs (2T-2S) take one
    thread each, so Snakemake runs two at once on --cores 2; the baseline's one job with an adapter keeps both, as
    do the other chain stages; the default (1) gives every update job both threads."""
    changes = {"model": {"cpu_threads": 2}}
    two = _update_jobs(
        _snakemake_dry(
            "--cores", "2", tmp_path=tmp_path / "two", changes={**changes, "dag": {"update_side_by_side": 2}}
        )
    )
    assert {job: n for job, n in two.items() if job[0] == "population"} == {("population", p): 1 for p in "0123"}
    assert two["baseline", "0"] == 2
    one = _update_jobs(_snakemake_dry("--cores", "2", tmp_path=tmp_path / "one", changes=changes))
    assert {job: n for job, n in one.items() if job[0] == "population"} == {("population", p): 2 for p in "0123"}


def test_update_side_by_side_is_capped_by_the_jobs_with_an_adapter_and_the_threads(monkeypatch):
    """A number of jobs side by side, within the jobs that train an adapter and the chain's threads. The update
    stage's threads (Snakemake's and its own torch threads under DVC) follow it; the other chain stages keep
    model.cpu_threads."""
    from populora.config import load_params
    from populora.core.topology import update_side_by_side
    from populora.lm.device import pin_cpu_threads

    params = load_params(REPO / "params.yaml")

    def with_(side=2, threads=2, teachers=2, students=2, jobs=4):
        return params.model_copy(
            update={
                "model": params.model.model_copy(update={"cpu_threads": threads}),
                "population": params.population.model_copy(update={"teachers": teachers, "students": students}),
                "dag": params.dag.model_copy(update={"update_jobs": jobs, "update_side_by_side": side}),
            }
        )

    assert params.dag.update_side_by_side == 1  # the default: measured no faster side by side on 2 cores
    assert update_side_by_side(with_(), "population") == 2  # 2T-2S: four jobs, two at a time
    assert update_side_by_side(with_(teachers=1, students=1), "population") == 2
    assert update_side_by_side(with_(), "baseline") == 1  # one adapter
    assert update_side_by_side(with_(threads=1), "population") == 1  # nothing to share out
    assert update_side_by_side(with_(jobs=1), "population") == 1  # one job trains all four
    assert update_side_by_side(with_(side=4, threads=8, teachers=4, students=4, jobs=8), "population") == 4
    assert update_side_by_side(with_(side=3), "population") == 2  # capped by the threads
    assert update_side_by_side(with_(side=1), "population") == 1
    update = next(s for s in STAGES if s.name == "update")
    propose = next(s for s in STAGES if s.name == "propose")
    assert update.thread_count(with_(), "population") == 1 and update.thread_count(with_(), "baseline") == 2
    assert update.thread_count(with_(threads=3), "population") == 1  # 3 // 2: a thread is not split
    assert update.thread_count(with_(side=1), "population") == 2
    assert propose.thread_count(with_(), "population") == 2
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert pin_cpu_threads(with_(), chain=True, side_by_side=2) == 1 and os.environ["OMP_NUM_THREADS"] == "1"


def test_update_side_by_side_refuses_a_count_that_is_not_one(tmp_path):
    from populora.config import ParamsError, parse_params

    for bad in (0, -1, True, 2.0, "2", "auto"):
        with pytest.raises(ParamsError, match=r"dag.update_side_by_side: expected a whole number.*Fix: Use"):
            parse_params({"dag": {"update_side_by_side": bad}})
    assert parse_params({"dag": {"update_side_by_side": 2}}).dag.update_side_by_side == 2


def test_an_update_job_under_dvc_takes_its_share_and_says_how_to_keep_every_thread(tmp_path, monkeypatch, capfd):
    """No engine set OMP_NUM_THREADS (DVC runs one stage at a time): a 2T-2S update job with dag.update_side_by_side: 2
    still takes its share (the threads it gets under Snakemake) and its log names the key that gives it every
    thread; with OMP_NUM_THREADS set (Snakemake, scripts/study.sh) nothing is pinned, nothing said."""
    import yaml

    from populora.core.topology import update_side_by_side

    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw["model"]["cpu_threads"] = 2
    raw["dag"]["update_side_by_side"] = 2
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw))
    parser = _common.stage_parser("test", arm=False, gen=False)
    args = parser.parse_args(["--params", str(params), "--claim-gpu"])
    population = lambda p: update_side_by_side(p, "population")  # noqa: E731
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    _common.setup(args, "update", claim=False, chain=True, side_by_side=population)
    assert os.environ["OMP_NUM_THREADS"] == "1"
    assert "1 of model.cpu_threads = 2 threads" in capfd.readouterr().err  # the stage logs to stderr
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    _common.setup(args, "update", claim=False, chain=True, side_by_side=population)
    assert os.environ["OMP_NUM_THREADS"] == "2" and "side by side" not in capfd.readouterr().err
