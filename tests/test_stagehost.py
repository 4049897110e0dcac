"""The stage host (populora/core/stagehost/): a `python -m stages.<name>` handed to it behaves as the process
itself would, to its caller (exit code, death by signal, output on the caller's descriptors) and to the
stage (argv, directory, environment, umask, thread count, the project code of its own directory); and
where no host can run it, the stage runs in its own process, saying why.

    .venv/bin/python -m pytest tests/test_stagehost.py -q
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from populora.core import stagehost
from tests.conftest import REPO

PROBE = '''
"""A stage that does what its argv says."""
import os, sys, time
import populora
action, *rest = sys.argv[1:]
print("marker", getattr(populora, "MARKER", "host's"), "cwd", os.getcwd(), "argv0", sys.argv[0].endswith("probe.py"))
print("env", os.environ.get("PROBE_VALUE"), "host", os.environ.get("POPULORA_STAGE_HOST"), "umask", oct(os.umask(0)))
print("to stderr", file=sys.stderr)
sys.stdout.flush()
if action == "exit":
    sys.exit(int(rest[0]))
if action == "raise":
    raise ValueError("bad input")
if action == "kill":
    os.kill(os.getpid(), int(rest[0]))
if action == "sleep":
    open("stage.pid", "w").write(str(os.getpid()))
    time.sleep(60)
if action == "threads":
    import torch
    print("threads", torch.get_num_threads())
if action == "alloc":  # hold this many MiB resident for a moment, and spend some CPU
    block = bytearray(int(rest[0]) << 20)
    sum(block[::4096]) + sum(range(2_000_000))
'''


POOL_PROBE = '''
"""A stage that leaves a spawned worker pool open and a non-daemon thread running for exit to close, as
the bench stages leave evalplus's checker (populora/bench/evalplus.py)."""
import multiprocessing, sys, threading, time
from concurrent.futures import ProcessPoolExecutor


def write_late(path):
    time.sleep(0.5)
    open(path, "w").write("written")


if __name__ == "__main__":
    pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    print("pool", pool.submit(pow, 2, 5).result())
    threading.Thread(target=write_late, args=(sys.argv[1],)).start()
'''


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A copy of the project's entry points with a probe stage; its `populora` carries a marker the host's lacks."""
    root = tmp_path_factory.mktemp("hosted")
    (root / "stages").mkdir()
    (root / "populora").mkdir()
    shutil.copy(REPO / "stages" / "__init__.py", root / "stages" / "__init__.py")
    (root / "populora" / "core").mkdir()
    (root / "populora" / "core" / "__init__.py").write_text("")
    shutil.copytree(REPO / "populora" / "core" / "stagehost", root / "populora" / "core" / "stagehost")
    (root / "populora" / "__init__.py").write_text('MARKER = "own"\n')
    (root / "stages" / "probe.py").write_text(PROBE)
    (root / "stages" / "pool_probe.py").write_text(POOL_PROBE)
    return root


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    """A host that imported torch (to check thread counts), started from the repository, not the project."""
    socket_path = str(tmp_path_factory.mktemp("sock") / "stages.sock")
    process = subprocess.Popen(
        [sys.executable, "-m", "populora.core.stagehost", "serve", "--socket", socket_path, "--preload", "torch"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert "stage host" in process.stdout.readline()
    yield socket_path
    process.terminate()
    process.wait(timeout=10)


def run_probe(
    project: Path,
    socket_path: str | None,
    *args: str,
    umask: int = 0o027,
    module: str = "stages.probe",
    timeout: float = 60,
    **env,
) -> subprocess.CompletedProcess:
    environ = {**os.environ, "PROBE_VALUE": "seen", **env}
    environ.pop("POPULORA_STAGE_HOST", None)
    environ.pop("OMP_NUM_THREADS", None)
    if socket_path:
        environ["POPULORA_STAGE_HOST"] = socket_path
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=project,
        env={**environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=lambda: os.umask(umask),
    )


def test_hosted_stage_is_the_callers_process_to_both_sides(project, host):
    done = run_probe(project, host, "exit", "3")
    assert done.returncode == 3
    assert f"marker own cwd {project} argv0 True" in done.stdout  # its own directory's code, not the host's
    assert "env seen host None umask 0o27" in done.stdout  # the caller's environment and umask; no host inside
    assert done.stderr == "to stderr\n"  # the caller's own descriptors: nothing said about the host


def test_errors_and_signals_end_the_caller_as_they_end_the_stage(project, host):
    raised = run_probe(project, host, "raise")
    assert raised.returncode == 1 and "ValueError: bad input" in raised.stderr
    assert run_probe(project, host, "kill", str(int(signal.SIGKILL))).returncode == -signal.SIGKILL
    assert run_probe(project, host, "kill", str(int(signal.SIGINT))).returncode == -signal.SIGINT


@pytest.mark.parametrize("hosted", [True, False], ids=["hosted", "own process"])
def test_a_stage_ends_as_python_ends_pools_shut_down_and_threads_joined(project, host, tmp_path, hosted):
    """Python's exit runs threading's exit hooks (concurrent.futures shuts its pools down there) and joins
    non-daemon threads before atexit's functions. A hosted stage that skipped them waited forever on its idle
    worker: the README's main command hung in bench_together after its work. The own-process run is the control."""
    written = tmp_path / "late.txt"
    done = run_probe(project, host if hosted else None, str(written), module="stages.pool_probe", timeout=40)
    assert (done.returncode, done.stdout, done.stderr) == (0, "pool 32\n", "")
    assert written.read_text() == "written"  # the non-daemon thread finished before the process ended


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"


def _stage_pid(project: Path) -> int:
    for _ in range(200):
        if (project / "stage.pid").exists() and (project / "stage.pid").read_text():
            return int((project / "stage.pid").read_text())
        time.sleep(0.05)
    raise AssertionError("the stage never started")


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGKILL])
def test_a_signal_to_the_caller_reaches_the_stage_or_a_killed_caller_takes_it_along(project, host, sent):
    (project / "stage.pid").unlink(missing_ok=True)
    environ = {**os.environ, "POPULORA_STAGE_HOST": host}
    caller = subprocess.Popen([sys.executable, "-m", "stages.probe", "sleep"], cwd=project, env=environ)
    stage = _stage_pid(project)
    assert stage != caller.pid
    caller.send_signal(sent)
    assert caller.wait(timeout=10) == -sent
    for _ in range(100):
        if not _alive(stage):
            break
        time.sleep(0.05)
    assert not _alive(stage)


def test_thread_count_is_the_callers(project, host):
    default = run_probe(project, host, "threads").stdout.split("threads ")[1].strip()
    assert default == str(run_probe(project, None, "threads").stdout.split("threads ")[1].strip())
    assert "threads 1\n" in run_probe(project, host, "threads", OMP_NUM_THREADS="1").stdout


def test_stage_runs_on_its_own_where_no_host_can_run_it(project, host, tmp_path):
    mismatched = run_probe(project, host, "exit", "0", HF_HOME=str(tmp_path))
    assert mismatched.returncode == 0 and "marker own" in mismatched.stdout
    assert "cannot run it: HF_HOME differs" in mismatched.stderr
    absent = run_probe(project, str(tmp_path / "none.sock"), "exit", "4")
    assert absent.returncode == 4 and "not reached" in absent.stderr


def test_module_of_reads_the_interpreter_command_line():
    assert stagehost.module_of(["python", "-u", "-m", "stages.pair", "--params", "p"]) == "stages.pair"
    assert stagehost.module_of(["python", "script.py", "-m", "x"]) is None
    assert stagehost.module_of(["python", "-c", "pass"]) is None
    assert stagehost.module_of(["python", "-X", "importtime", "-W", "error", "-m", "stages.pair"]) == "stages.pair"


def test_a_stage_started_with_interpreter_options_of_its_own_runs_with_them_on_its_own(project, host):
    optimized = subprocess.run(
        [sys.executable, "-O", "-m", "stages.probe", "exit", "0"],
        cwd=project, env={**os.environ, "POPULORA_STAGE_HOST": host}, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert optimized.returncode == 0 and "marker own" in optimized.stdout
    assert "cannot run it: options differ" in optimized.stderr


def test_mismatch_names_the_first_difference_and_ignores_thread_counts():
    host = stagehost.fingerprint({"HF_HOME": "/a", "OMP_NUM_THREADS": "2", "HOME": "/root"})
    assert stagehost.mismatch(host, stagehost.fingerprint({"HF_HOME": "/a", "OMP_NUM_THREADS": "1"})) is None
    why = stagehost.mismatch(host, stagehost.fingerprint({"HF_HOME": "/b"}))
    assert why == "HF_HOME differs (host '/a', stage '/b')"
    assert "TORCH_HOME differs" in stagehost.mismatch(
        host, stagehost.fingerprint({"HF_HOME": "/a", "TORCH_HOME": "/t"})
    )


@pytest.mark.skipif(os.getuid() != 0, reason="needs root, to connect as another user")
def test_a_caller_of_another_user_is_refused():
    """The host would run the stage with its own rights: a caller of another user never gets them."""
    import socket
    import tempfile

    folder = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own folders are closed to other users
    folder.chmod(0o777)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(folder / "s.sock"))
    (folder / "s.sock").chmod(0o777)
    listener.listen(1)
    listener.settimeout(30)
    child = os.fork()
    if child == 0:  # pragma: no cover - the child only connects
        try:
            os.setgid(65534)
            os.setuid(65534)
            caller = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            caller.connect(str(folder / "s.sock"))
            caller.recv(1)
        finally:
            os._exit(0)
    try:
        conn, _ = listener.accept()
        assert stagehost.other_user(conn) == "the caller runs as uid 65534 gid 65534, the host as uid 0 gid 0"
        conn.close()
    finally:
        os.waitpid(child, 0)
        shutil.rmtree(folder)
    mine, _theirs = socket.socketpair(socket.AF_UNIX)
    assert stagehost.other_user(mine) is None


def test_a_path_that_would_load_a_library_from_elsewhere_is_named(tmp_path):
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "__init__.py").write_text("")
    import json

    assert stagehost.shadowed(sys.path, ["json.decoder"]) is None
    why = stagehost.shadowed([str(tmp_path), *sys.path], ["json.decoder"])
    assert why == f"json would load from {tmp_path}/json/__init__.py there, from {json.__spec__.origin} in the host"
    assert "PYTHONPATH" not in stagehost.load_time_environment({"PYTHONPATH": "/x", "PYTHONHASHSEED": "0"})


def test_the_stages_pid_and_its_end_arriving_in_one_read_are_two_messages():
    """A stage that ends at once: the host's two messages may reach the stand-in in one read; neither is lost."""
    import io
    import json

    data = [json.dumps(message).encode() for message in ({"pid": 5}, {"exit": 0})]
    reader = io.BytesIO(b"".join(stagehost.HEADER.pack(len(body)) + body for body in data))
    assert [stagehost.read_message(reader) for _ in range(3)] == [{"pid": 5}, {"exit": 0}, None]


def test_a_hosted_stage_leaves_its_own_peak_memory_and_cpu_time_beside_its_timings(project, host, tmp_path):
    """Snakemake samples the stand-in (~13 MiB); the host reports the stage's own figures from wait4, to
    `<POPULORA_STAGE_USAGE_DIR>/<stage>/<key>.usage.json` for `--log <...>/<stage>/<key>.log`."""
    import json

    timings = tmp_path / "timings"
    args = ("alloc", "300", "--log", "results/logs/probe/population-003.log")
    done = run_probe(project, host, *args, POPULORA_STAGE_USAGE_DIR=str(timings))
    assert done.returncode == 0, done.stderr
    usage = json.loads((timings / "probe" / "population-003.usage.json").read_text())
    assert usage["max_rss_mib"] > 300  # the block itself, and the stage's Python (torch preloaded) beside it
    assert usage["cpu_s"] > 0.05 and usage["cpu_s"] == pytest.approx(usage["user_s"] + usage["system_s"], abs=0.002)
    assert not list(timings.rglob(".*"))  # written atomically: no partial file left
    # run on its own (no host), the job's earlier figures go: they would stand for this run
    alone = run_probe(project, None, *args, POPULORA_STAGE_USAGE_DIR=str(timings))
    assert alone.returncode == 0 and not (timings / "probe" / "population-003.usage.json").exists()
    assert stagehost.usage_file(["-m", "--params", "p"], {"POPULORA_STAGE_USAGE_DIR": "t"}) is None  # no --log
    assert stagehost.usage_file(["-m", "--log", "l/s/k.log"], {}) is None  # not asked for


def test_a_host_ends_soon_after_the_process_that_started_it(tmp_path):
    """A pipeline script killed outright leaves no host behind: the host polls for its parent."""
    socket_path = tmp_path / "stages.sock"
    starter = subprocess.run(
        ["bash", "-c", f'{sys.executable} -m populora.core.stagehost serve --socket {socket_path} --preload "" '
         f"> {tmp_path}/host.log 2>&1 & echo $!; sleep 1"],
        cwd=REPO, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    host_pid = int(starter.stdout.split()[0])
    deadline = time.monotonic() + 4 * stagehost.PARENT_POLL_S + 5
    while _alive(host_pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _alive(host_pid), (tmp_path / "host.log").read_text()
    assert not socket_path.exists()


def test_what_the_libraries_set_while_loading_does_not_turn_the_callers_away(project, tmp_path):
    """transformers.modeling_utils sets TORCHINDUCTOR_CACHE_DIR when the host imports it: a caller started from the
    same environment as the host (run_pipeline.sh's, without it) must still be run there, not refused."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TORCHINDUCTOR") and k != "POPULORA_STAGE_HOST"}
    socket_path = str(tmp_path / "stages.sock")
    process = subprocess.Popen(
        [sys.executable, "-m", "populora.core.stagehost", "serve", "--socket", socket_path],
        cwd=REPO, env=environ, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert "transformers.modeling_utils" in process.stdout.readline()
        done = subprocess.run(
            [sys.executable, "-m", "stages.probe", "exit", "0"],
            cwd=project, env={**environ, "POPULORA_STAGE_HOST": socket_path}, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0 and done.stderr == "to stderr\n", done.stderr  # hosted: nothing said
        assert "marker own" in done.stdout
        # and a caller that has it, having imported those libraries itself (a pytest worker), is served too
        inherited = subprocess.run(
            [sys.executable, "-m", "stages.probe", "exit", "0"],
            cwd=project, capture_output=True, text=True, timeout=60,
            env={**environ, "POPULORA_STAGE_HOST": socket_path, "TORCHINDUCTOR_CACHE_DIR": "/tmp/torchinductor_x"},
        )  # fmt: skip
        assert inherited.returncode == 0 and inherited.stderr == "to stderr\n", inherited.stderr
    finally:
        process.terminate()
        process.wait(timeout=10)
