"""Containment tests for populora.sandbox: the hostile suite (tests/hostile_cases.py), then one
property per test.

    .venv/bin/python -m pytest tests/test_sandbox.py -q

Tests of the root-only layers (jail, uid drop, namespaces) skip when not run as root; the same suite
as an ordinary user is tests/test_sandbox_unprivileged.py, the CPU-time limit under load
tests/test_sandbox_cpu_limit.py.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from populora.sandbox import (
    LAYERS,
    SKIP_ENV,
    Call,
    Job,
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    describe_missing,
    parse_result,
    wall_backstop,
)

sys.path.insert(0, str(Path(__file__).parent))
from hostile_cases import HOSTILE_CASES, outcome

ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not ROOT, reason="the jail, uid drop and namespaces need root")
PORTABLE = {"time", "memory", "recursion", "output", "stdin", "crash"}  # hold without root too


@pytest.fixture(scope="module")
def box():
    with Sandbox(workers=2, limits=limits(timeout_s=1.5, memory_mb=256)) as sandbox:
        yield sandbox


def limits(**overrides) -> Limits:
    # a short wall-clock backstop: the suite's sleepers would otherwise wait for the default (5 x 1.5 s)
    return Limits(
        **{"timeout_s": 1.5, "memory_mb": 256, "max_output_chars": 10_000, "wall_timeout_s": 3.0, **overrides}
    )


def run_f(box: Sandbox, program: str, arguments: str = "0", **kwargs) -> RunResult:
    return box.run(Job(program, (Call(f"f({arguments})"),)), **kwargs)


def sandbox_processes(box: Sandbox) -> list[int]:
    """Pids of live processes running under the sandbox's private uids."""
    uids = {str(uid) for uid in box._uids}
    found = []
    for entry in Path("/proc").iterdir():
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        uid_line = next((line for line in status.splitlines() if line.startswith("Uid:")), "")
        if uids & set(uid_line.split()[1:]):
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def hostile_runs(box):
    """Submit the whole suite at once (the timeouts overlap), each test then reads its result."""
    return {c.name: box.submit(Job(c.program, (Call(f"f({c.input})"),))) for c in HOSTILE_CASES}


@pytest.mark.parametrize("case", HOSTILE_CASES, ids=[c.name for c in HOSTILE_CASES])
def test_hostile_case(hostile_runs, case):
    if not ROOT and case.contains not in PORTABLE:
        pytest.skip("needs the root-only layers")
    run = hostile_runs[case.name].result()
    assert outcome(run) in case.expect, (run.detail, run.calls)


def test_hostile_suite_is_large_and_covers_every_class():
    assert len(HOSTILE_CASES) >= 30
    assert len({c.name for c in HOSTILE_CASES}) == len(HOSTILE_CASES)
    assert {"time", "memory", "output", "files", "processes", "network", "environment", "crash"} <= {
        c.contains for c in HOSTILE_CASES
    }


# The cases the suite lets end in `ok:1`: the program returned, and the harness around it must have lived on
# to report the whole job, the zygote that forked it must still serve the next job, and a job running
# beside it on the other zygote must be untouched. Each case runs with every layer, and with seccomp off
# (kill(-1) then returns 1: as root the child holds a private uid, so it can reach nothing else).
SURVIVAL = ("alarm_storm_in_harness", "kill_everything")
NEIGHBOUR = "import time\ndef f(x):\n    time.sleep(0.6)\n    return x\n"
NEXT = "def f(x):\n    return sum(range(x))\n"


def _case(name: str):
    return next(c for c in HOSTILE_CASES if c.name == name)


def _lives_on(box: Sandbox, case) -> None:
    """The hostile job on zygote 0 (group 0) while a job sleeps on zygote 1 (group 1), then the next job on
    zygote 0."""
    zygotes = [z.proc.pid for z in box._zygotes]
    beside = box.submit(Job(NEIGHBOUR, (Call("f(7)"),)), group=1)
    time.sleep(0.2)  # the neighbour is running when the hostile job starts
    run = box.run(Job(case.program, (Call(f"f({case.input})"), Call("len('ab')"))), group=0)
    assert outcome(run) in case.expect, (run.detail, run.calls)
    if outcome(run) == "ok:1":  # the harness survived the program: it ran and reported the job's next call
        assert run.status == "ok" and len(run.calls) == 2 and run.calls[1].status in ("ok", "exception"), run
    after = box.run(Job(NEXT, (Call("f(10)"),)), group=0)
    assert outcome(after) == "ok:45", f"the next job on the same zygote: {after}"
    assert outcome(beside.result()) == "ok:7", f"the job beside it: {beside.result()}"
    assert [z.proc.pid for z in box._zygotes] == zygotes, "a zygote died under the hostile job (the pool restarted it)"


@needs_root
@pytest.mark.parametrize("skip", [(), ("seccomp",)], ids=["every_layer", "no_seccomp"])
@pytest.mark.parametrize("name", SURVIVAL)
def test_the_harness_survives_and_the_next_job_runs(name, skip):
    with Sandbox(workers=2, limits=limits(), skip_layers=frozenset(skip)) as sandbox:
        assert sandbox.layers["uid_drop"], "kill(-1) without seccomp is only safe under a private uid"
        for _ in range(2):
            _lives_on(sandbox, _case(name))


@needs_root
def test_the_survival_check_fails_when_zygotes_share_a_uid(monkeypatch):
    """The broken copy: one private uid for both zygotes' children. Without seccomp kill(-1) still returns 1
    (the case's accepted `ok:1`), but it kills the job beside it."""
    import itertools

    from populora.sandbox import pool

    monkeypatch.setattr(pool, "_slot_counter", itertools.repeat(0))
    with Sandbox(workers=2, limits=limits(), skip_layers=frozenset({"seccomp"})) as sandbox:
        assert sandbox.layers["uid_drop"] and len(set(sandbox._uids)) == 1
        with pytest.raises(AssertionError, match="the job beside it"):
            _lives_on(sandbox, _case("kill_everything"))


@needs_root
def test_the_survival_check_fails_when_the_zygote_runs_the_program_itself(monkeypatch, tmp_path):
    """The broken copy: a zygote that runs each job in its own process instead of a forked child. The alarm
    storm then hits the zygote: `crash` or `exception:E`, both outcomes the suite accepts, but the zygote dies.
    Only the alarm storm runs on this copy (a program run as root outside any child could reach anything)."""
    from populora.sandbox import pool

    source = Path(pool._ZYGOTE_SCRIPT)
    text = source.read_text()
    call = "result = _supervise(request, caps, workroot, uid, devnull, seq)"
    assert call in text
    (tmp_path / "zygote.py").write_text(text.replace(call, "result = _execute(request)"))
    (tmp_path / "jail.py").write_text((source.parent / "jail.py").read_text())
    monkeypatch.setattr(pool, "_ZYGOTE_SCRIPT", str(tmp_path / "zygote.py"))
    storm = _case("alarm_storm_in_harness")
    assert "kill" not in storm.program and "fork" not in storm.program
    with Sandbox(workers=2, limits=limits()) as sandbox:
        with pytest.raises(AssertionError):
            _lives_on(sandbox, storm)


@needs_root
def test_every_containment_layer_is_active(box):
    assert set(LAYERS) == {"net_namespace", "mount_namespace", "fs_jail", "uid_drop", "ipc_namespace", "seccomp"}
    assert box.layers == dict.fromkeys(sorted(LAYERS), True), box.capabilities
    assert box.capabilities["mode"] == "root"
    assert describe_missing(box.capabilities) == ""


def test_config_names_the_same_layers():
    """verify.required_layers accepts exactly LAYERS (the config spells them out to stay import-light)."""
    import typing

    from populora.config import VerifySection

    annotation = VerifySection.model_fields["required_layers"].annotation
    assert typing.get_args(typing.get_args(annotation)[0]) == LAYERS
    assert VerifySection(required_layers="all").required_layers == LAYERS
    assert set(VerifySection().required_layers) == set(LAYERS) - {"uid_drop"}


@needs_root
def test_skipped_layers_are_really_off_and_named(monkeypatch):
    monkeypatch.setenv(SKIP_ENV, "uid_drop, fs_jail")
    with Sandbox(workers=2, limits=limits()) as sandbox:
        assert [k for k, v in sandbox.layers.items() if not v] == ["fs_jail", "uid_drop"]
        message = describe_missing(sandbox.capabilities)
        assert "fs_jail: off. Fix:" in message and "uid_drop: off. Fix: run as root" in message
        # really off: the child keeps uid 0 and sees the host's file system
        run = run_f(sandbox, "import os\ndef f(a):\n    return os.getuid(), os.path.isdir('/proc/1')")
        assert run.calls[0].repr == "(0, True)"
    monkeypatch.setenv(SKIP_ENV, "seccomp,teleport")
    with pytest.raises(SandboxError, match="teleport"):
        Sandbox(workers=2, limits=limits())


# A checkout (and so its venv) may live anywhere, the temp directory and the home directory
# included: the jail must still build, and show nothing beside the bound Python installation.
JAIL_PROBE = textwrap.dedent("""\
    import json, sys
    sys.path.insert(0, sys.argv[2])
    from hostile_cases import HOSTILE_CASES
    from populora.sandbox import Call, Job, Limits, Sandbox
    with Sandbox(workers=2, limits=Limits(timeout_s=1.5, memory_mb=256, max_output_chars=10_000)) as box:
        futures = {c.name: box.submit(Job(c.program, (Call(f"f({c.input})"),))) for c in HOSTILE_CASES}
        program = "from dataclasses import dataclass\\n@dataclass\\nclass P:\\n    x: int\\ndef f(a):\\n    return P(a)"
        benign = box.run(Job(program, (Call("f(1)"),))).calls[0].repr
        print(json.dumps({"prefix": sys.prefix, "layers": box.layers, "capabilities": box.capabilities,
                          "benign": benign, "outcomes": {n: future.result().status for n, future in futures.items()},
                          "calls": {n: [vars(c) for c in future.result().calls] for n, future in futures.items()}}))
    """)


@pytest.fixture(params=["tempdir", "home"])
def venv_elsewhere(request):
    """A venv (of the interpreter behind this one) created under the temp or the home directory."""
    import shutil
    import tempfile

    parent = tempfile.gettempdir() if request.param == "tempdir" else str(Path.home())
    where = Path(tempfile.mkdtemp(prefix=".populora-sbx-venv-", dir=parent))
    try:
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run(
            [base, "-m", "venv", "--without-pip", "--system-site-packages", str(where / "venv")],
            check=True,
            capture_output=True,
            timeout=120,
        )
        yield where / "venv"
    finally:
        shutil.rmtree(where, ignore_errors=True)


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
@needs_root
def test_every_layer_from_a_venv_under_tmp_or_home(venv_elsewhere):
    repo = Path(__file__).resolve().parents[1]
    result = subprocess.run(
        [str(venv_elsewhere / "bin" / "python"), "-c", JAIL_PROBE, "x", str(repo / "tests")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd="/",
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(repo)},
    )
    assert result.returncode == 0, result.stderr
    report = __import__("json").loads(result.stdout)
    assert report["prefix"].startswith(str(venv_elsewhere.parent)), report["prefix"]
    assert report["layers"] == dict.fromkeys(sorted(LAYERS), True), report["capabilities"]
    assert report["benign"] == "P(x=1)"
    from hostile_cases import HOSTILE_CASES as cases

    for case in cases:
        run = RunResult(
            status=report["outcomes"][case.name],
            calls=[
                __import__("populora.sandbox", fromlist=["CallResult"]).CallResult(**c)
                for c in report["calls"][case.name]
            ],
        )
        assert outcome(run) in case.expect, (case.name, run)


@needs_root
def test_secrets_beside_the_checkout_are_invisible(tmp_path):
    """Files in the home directory, the temp directory and the checkout (beside its .venv) are out
    of reach, whatever the listing of those directories happens to be on this machine."""
    import tempfile

    repo = Path(__file__).resolve().parents[1]
    secrets = []
    for parent in (Path.home(), Path(tempfile.gettempdir()), repo):
        folder = Path(tempfile.mkdtemp(prefix=".populora-secret-", dir=parent))
        (folder / "secret.txt").write_text("populora-secret-1c9e")
        secrets.append(folder)
    try:
        program = textwrap.dedent("""\
            import os
            def f(paths):
                seen = []
                for path in paths:
                    for probe in (lambda: open(path + '/secret.txt').read(), lambda: os.listdir(path)):
                        try:
                            seen.append(probe())
                        except OSError:
                            pass
                return seen
            """)
        with Sandbox(workers=2, limits=limits()) as sandbox:
            run = run_f(sandbox, program, repr([str(p) for p in secrets]))
        assert run.ok and run.calls[0].repr == "[]", run
    finally:
        import shutil

        for folder in secrets:
            shutil.rmtree(folder, ignore_errors=True)


def test_result_is_the_repr(box):
    run = run_f(box, "def f(a, b=2):\n    return {'sum': a + b, 'items': [a, b]}", "1, b=3")
    assert run.ok and run.calls[0].repr == "{'sum': 4, 'items': [1, 3]}"


def test_each_call_gets_fresh_globals(box):
    program = "count = 0\ndef f(a):\n    global count\n    count += 1\n    return count"
    run = box.run(Job(program, (Call("f(1)"), Call("f(2)"))))
    assert [c.repr for c in run.calls] == ["1", "1"]


def test_exception_is_structured(box):
    call = run_f(box, "def f(a):\n    return {}[a]", "'k'").calls[0]
    assert (call.status, call.exc_type, call.exc_message) == ("exception", "KeyError", "'k'")


def test_syntax_error_and_missing_entry(box):
    assert run_f(box, "def f(:\n").status == "syntax"
    assert run_f(box, "def g(a):\n    return a").calls[0].status == "no_entry"


def test_expect_compares_values_in_the_child(box):
    run = box.run(Job("def f(a):\n    return a", (Call("f(1)", expect="1.0"), Call("f(1)", expect="2"))))
    assert [c.equal for c in run.calls] == [True, False]


def test_roundtrip_flag(box):
    program = "class A:\n    pass\ndef f(a):\n    return [float('nan'), A(), (1, 'x')][a]"
    calls = tuple(Call(f"f({i})") for i in range(3))
    run = box.run(Job(program, calls, roundtrip=True))
    assert [c.roundtrip for c in run.calls] == [False, False, True]


def test_timeout_kills_promptly():
    with Sandbox(workers=2, limits=limits(timeout_s=0.5)) as sandbox:
        start = time.monotonic()
        run = run_f(sandbox, "def f(a):\n    while True:\n        pass")
        assert run.status == "timeout" and time.monotonic() - start < 2.5
        assert "of CPU time" in run.detail, run.detail


def test_timeout_is_cpu_time_and_the_wall_clock_a_backstop():
    """`timeout_s` is CPU time: a program using 0.6 s of CPU passes a 1 s limit however long it
    waits for a core; one that sleeps uses none and is ended by the wall-clock backstop."""
    assert wall_backstop(2.0) == 10.0 and wall_backstop(0.25) == 3.25
    assert Limits(timeout_s=2.0, memory_mb=256, max_output_chars=10).wall_limit_s == 10.0
    spin = (
        "import time\ndef f(seconds):\n    start = time.process_time()\n"
        "    while time.process_time() - start < seconds:\n        pass\n    return seconds"
    )
    with Sandbox(workers=2, limits=limits(timeout_s=1.0, wall_timeout_s=2.0)) as sandbox:
        assert outcome(run_f(sandbox, spin, "0.6")) == "ok:0.6"
        spun = run_f(sandbox, spin, "5")
        assert spun.status == "timeout" and "of CPU time (limit 1 s)" in spun.detail, spun.detail
        start = time.monotonic()
        slept = run_f(sandbox, "import time\ndef f(a):\n    time.sleep(60)")
        assert slept.status == "timeout" and "2 s wall clock (the backstop" in slept.detail, slept.detail
        assert 1.9 < time.monotonic() - start < 4


def test_stdout_is_counted_not_kept(box):
    run = run_f(box, "def f(a):\n    print('x' * 999)\n    return 1")
    assert run.ok and run.stdout_chars == 1000


def test_hash_seed_differs_between_groups(box):
    program = "def f(a):\n    return hash(a)"
    assert run_f(box, program, "'abc'", group=0).calls[0].repr != run_f(box, program, "'abc'", group=1).calls[0].repr


@needs_root
def test_no_connection_reaches_a_local_listener(box):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(1.0)
        port = listener.getsockname()[1]
        program = (
            "import socket\ndef f(port):\n    s = socket.socket()\n    s.settimeout(1)\n"
            "    s.connect(('127.0.0.1', port))\n    return 'connected'"
        )
        call = run_f(box, program, str(port)).calls[0]
        assert call.status == "exception", call
        with pytest.raises(TimeoutError):
            listener.accept()


@needs_root
def test_files_outside_the_private_dir_are_untouched(box, tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("original")
    program = textwrap.dedent("""\
        import os
        def f(path, sibling):
            attempts = {'write': lambda: open(path, 'w').write('pwned'), 'delete': lambda: os.remove(path),
                        'create': lambda: open(sibling, 'w').write('x'), 'shell': lambda: os.system(f'rm {path}')}
            done = []
            for name, act in attempts.items():
                try:
                    act()
                    done.append(name)
                except OSError:
                    pass
            return done
        """)
    run = run_f(box, program, f"{str(victim)!r}, {str(tmp_path / 'created')!r}")
    assert run.ok and run.calls[0].repr in ("[]", "['shell']")  # os.system "succeeds" without a shell
    assert victim.read_text() == "original"
    assert not (tmp_path / "created").exists()
    assert sorted(os.listdir(tmp_path)) == ["victim.txt"]


@needs_root
def test_forked_daemon_never_writes(box, tmp_path):
    target = tmp_path / "daemon_was_here"
    program = (
        "import os, time\ndef f(path):\n    if os.fork() == 0:\n        os.setsid()\n        time.sleep(1.5)\n"
        "        open(path, 'w').write('x')\n        os._exit(0)\n    return 'forked'"
    )
    run = run_f(box, program, repr(str(target)))
    assert outcome(run) == "exception:BlockingIOError"
    time.sleep(2.0)
    assert not target.exists()
    assert sandbox_processes(box) == []


@needs_root
def test_no_sandbox_process_outlives_its_check(box):
    programs = (
        "import os\ndef f(a):\n    os.fork()",
        "def f(a):\n    while True:\n        pass",
        "import os, signal\ndef f(a):\n    os.kill(os.getpid(), signal.SIGSTOP)",
    )
    box.map([Job(program, (Call("f(0)"),)) for program in programs])
    assert sandbox_processes(box) == []


def test_environment_secret_is_not_readable(monkeypatch):
    secret = "populora-secret-7f3a9c"
    monkeypatch.setenv("POPULORA_TEST_SECRET", secret)
    program = textwrap.dedent("""\
        import os
        def f(a):
            seen = [repr(dict(os.environ))]
            pids = [p for p in os.listdir('/proc') if p.isdigit()] if os.path.isdir('/proc') else []
            for pid in [os.getppid(), 1, *pids]:
                try:
                    seen.append(open(f'/proc/{pid}/environ', errors='replace').read())
                except OSError:
                    pass
            return '\\n'.join(seen)
        """)
    with Sandbox(workers=2, limits=limits(timeout_s=5)) as sandbox:
        run = run_f(sandbox, program)
    assert run.ok and secret not in run.calls[0].repr
    assert "POPULORA_TEST_SECRET" not in run.calls[0].repr


def test_monkey_patches_do_not_leak_to_the_next_check(box):
    patch = (
        "import builtins, json, os\ndef f(a):\n    builtins.len = lambda x: 42\n    json.MARK = 1\n"
        "    os.environ['LEAK'] = '1'\n    open('leak', 'w').write('x')\n    return len([])"
    )
    assert run_f(box, patch, group=0).calls[0].repr == "42"
    probe = (
        "import json, os\ndef f(a):\n    return len([1, 2, 3]), hasattr(json, 'MARK'), 'LEAK' in os.environ, "
        "os.path.exists('leak')"
    )
    assert run_f(box, probe, group=0).calls[0].repr == "(3, False, False, False)"


def test_program_that_kills_its_parent_hurts_nobody(box):
    zygotes = [z.proc.pid for z in box._zygotes]
    for body in (
        "os.kill(os.getppid(), 9)",
        "os.killpg(os.getpgid(os.getppid()), 9)",
        "os.kill(-1, 9)",
        "os.kill(0, 9)",
    ):
        run_f(box, f"import os\ndef f(a):\n    {body}\n    return 1")
    assert [z.proc.pid for z in box._zygotes] == zygotes
    assert all(z.proc.poll() is None for z in box._zygotes)
    assert run_f(box, "def f(a):\n    return a", "5").calls[0].repr == "5"


def test_a_dead_zygote_is_replaced(box):
    zygote = box._zygotes[1]
    os.kill(zygote.proc.pid, 9)
    zygote.proc.wait()
    assert run_f(box, "def f(a):\n    return a", "7", group=1).calls[0].repr == "7"


def test_malformed_results_are_rejected():
    with pytest.raises(ValueError):
        parse_result({"status": "ok", "calls": []}, 1)
    with pytest.raises(ValueError):
        parse_result({"status": "ok", "calls": [{"status": "ok", "repr": 5}]}, 1)
    with pytest.raises(ValueError):
        parse_result({"status": "pwned"}, 0)


def test_many_jobs_in_parallel(box):
    jobs = [Job("def f(a):\n    return a * 2", (Call(f"f({i})"),)) for i in range(200)]
    start = time.monotonic()
    results = box.map(jobs)
    assert [r.calls[0].repr for r in results] == [str(2 * i) for i in range(200)]
    assert time.monotonic() - start < 20


def test_closed_sandbox_refuses_jobs():
    sandbox = Sandbox(workers=2, limits=limits())
    sandbox.close()
    sandbox.close()
    with pytest.raises(SandboxError):
        sandbox.submit(Job("def f(a):\n    return a", (Call("f(1)"),)))
