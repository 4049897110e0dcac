"""Containment layer: run untrusted Python programs and return structured results.

    with Sandbox(workers=2, limits=Limits(timeout_s=2)) as box:
        result = box.run(Job("def f(a):\n    return a", (Call("f(1)"),)))
        result.status, result.calls[0].repr          # ("ok", "1")

Design. `Sandbox` starts `workers` (at least 2) long-lived *zygote* processes. Each zygote starts
with a clean environment, imports the standard modules once, and locks itself into fresh
namespaces; then, for every job, it forks one short-lived child which drops to a private uid,
runs the program with fresh globals and writes a JSON result into a pipe. The zygote supervises
the child (wall clock, result size), kills it with SIGKILL, and deletes its scratch directory.
Zygotes of group 0 and group 1 run with different hash seeds (PYTHONHASHSEED 1 and 2), so two
runs of one job in different groups expose programs that depend on set/dict hash order.

What is covered (when the process runs as root, as here; `Sandbox.capabilities` reports what
was actually set up, and the tests assert it):
  * CPU/wall time: RLIMIT_CPU and a wall-clock deadline enforced by the zygote with SIGKILL
    (signal handlers in the program cannot intercept it)            -> status "timeout".
  * Memory: RLIMIT_AS (`Limits.memory_mb`)                            -> status "memory".
  * Output floods: stdout/stderr go to a counting sink and fd 1/2 to /dev/null; reprs longer
    than `max_output_chars` are refused, never truncated; the result pipe is read up to a
    bound                                                             -> "output_too_large".
  * Files: every child sees a read-only jail (pivot_root into a tmpfs holding read-only binds of
    /usr, /etc, the Python installation and /dev/null, /dev/zero, /dev/urandom) with one
    writable directory, a private tmpfs of `file_mb` MiB; RLIMIT_FSIZE caps single files. The
    project tree, /root, /home, /tmp and /proc are not visible.
  * Processes: the child runs as a uid of its own (one per worker, no capabilities,
    no_new_privs, not dumpable) with RLIMIT_NPROC = 0, so it can neither fork, spawn threads,
    exec, nor signal or trace the zygote, the stage or other checks. Its session is killed
    after every check and PR_SET_PDEATHSIG kills it if the zygote dies.
  * Network: the zygote lives in an empty network namespace (no interfaces up, not even lo).
  * Environment: zygotes start with an empty environment (PATH, LANG and the hash seed only);
    /proc/<pid>/environ of other processes is unreadable to the child's uid.
  * Stdin reads /dev/null. Crashes (segfaults, aborts)                -> status "crash".
  * State between checks: each check is a fresh fork (monkey-patched builtins, module state,
    files and System V IPC objects die with it; the child gets its own IPC namespace).
  * Hostile results: a child that dies, writes garbage or floods the pipe gets a clean status.

What is not covered:
  * A program can lie about its *own* results (it runs in the process that reports them). The
    verifier therefore never sends a gold answer into a process that runs a solver's program.
  * Kernel exploits, CPU side channels, and resource use below the limits (a check may burn its
    full CPU and memory budget). Kernel keyrings of the worker uid are not cleared.
  * Without root (or without namespaces) the weaker fallbacks apply: a user+network namespace
    for the network when the kernel allows it, rlimits and a private working directory, but
    no uid drop and no read-only filesystem; `capabilities` says which layers are active.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import subprocess
import sys
import threading
import time
from collections import deque
from concurrent.futures import Future
from dataclasses import asdict, dataclass, field

RUN_STATUSES = ("ok", "syntax", "timeout", "memory", "crash", "output_too_large", "sandbox_error")
CALL_STATUSES = ("ok", "exception", "no_entry", "output_too_large")
HASH_SEEDS = (1, 2)  # group 0, group 1
_UID_BASE = 1_000_000  # private uids: _UID_BASE + pid * 256 + n, never a real account
_slot_counter = itertools.count()


class SandboxError(RuntimeError):
    """The sandbox itself could not start (never raised for a program's behaviour)."""


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 5.0  # wall clock for one job (the program and all its calls)
    memory_mb: int = 512  # RLIMIT_AS of the child
    max_output_chars: int = 10_000  # longest accepted repr of one result
    file_mb: int = 16  # private writable tmpfs and RLIMIT_FSIZE


@dataclass(frozen=True)
class Call:
    """One evaluation after `exec(program)` in fresh globals: `expr`, e.g. "f(1, 'a')".

    With `expect` set, the child reports `equal = (eval(expect) == eval(expr))` instead of a repr.
    """

    expr: str
    expect: str | None = None


@dataclass(frozen=True)
class Job:
    program: str
    calls: tuple[Call, ...]
    entry: str | None = "f"  # must be callable after exec, else the call's status is "no_entry"
    roundtrip: bool = False  # also report whether eval(repr(value)) == value
    limits: Limits | None = None  # None: the sandbox's defaults


@dataclass
class CallResult:
    status: str  # one of CALL_STATUSES
    repr: str | None = None
    equal: bool | None = None
    roundtrip: bool | None = None
    exc_type: str | None = None
    exc_message: str | None = None


@dataclass
class RunResult:
    status: str  # one of RUN_STATUSES
    calls: list[CallResult] = field(default_factory=list)
    detail: str | None = None
    wall_s: float = 0.0
    stdout_chars: int = 0

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _call_result(raw: object) -> CallResult:
    """Validate one call record from a child; anything off raises ValueError (-> crash)."""
    if not isinstance(raw, dict) or raw.get("status") not in CALL_STATUSES:
        raise ValueError("bad call record")
    out = CallResult(status=raw["status"])
    for key, kinds in (("repr", str), ("equal", bool), ("roundtrip", bool), ("exc_type", str), ("exc_message", str)):
        value = raw.get(key)
        if value is not None and not isinstance(value, kinds):
            raise ValueError(f"bad {key}")
        setattr(out, key, value)
    return out


def parse_result(payload: dict, n_calls: int) -> RunResult:
    """A RunResult from a zygote/child JSON object, checked field by field."""
    status = payload.get("status")
    if status not in RUN_STATUSES:
        raise ValueError(f"bad status {status!r}")
    calls = [_call_result(c) for c in payload.get("calls") or []]
    if status == "ok" and len(calls) != n_calls:
        raise ValueError(f"{len(calls)} call results for {n_calls} calls")
    detail = payload.get("detail")
    return RunResult(status=status, calls=calls, detail=str(detail)[:500] if detail is not None else None,
                     wall_s=float(payload.get("wall_s") or 0.0), stdout_chars=int(payload.get("stdout_chars") or 0))


# ----------------------------------------------------------------------------- parent side

_BOOT = (
    "import importlib.util, sys\n"
    "sys.path = [p for p in sys.path if p]\n"
    "spec = importlib.util.spec_from_file_location('_populora_zygote', sys.argv[1])\n"
    "mod = importlib.util.module_from_spec(spec)\n"
    "sys.modules[spec.name] = mod\n"
    "spec.loader.exec_module(mod)\n"
    "mod.zygote_main(sys.argv[2])\n"
)


class _Zygote:
    """Parent-side handle of one zygote process: one JSON line out, one JSON line back."""

    def __init__(self, hash_seed: int, uid: int):
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": str(hash_seed),
               "PYTHONDONTWRITEBYTECODE": "1"}
        config = json.dumps({"uid": uid})
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-c", _BOOT, os.path.abspath(__file__), config],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, cwd="/", start_new_session=True, close_fds=True,
        )
        self._buffer = b""
        hello = self._read_message(time.monotonic() + 60)
        if "capabilities" not in hello:
            self.kill()
            raise SandboxError(f"zygote failed to start: {hello.get('detail')}")
        self.capabilities: dict = hello["capabilities"]

    def _read_message(self, deadline: float) -> dict:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buffer:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError("zygote did not answer in time")
            ready, _, _ = select.select([fd], [], [], remaining)
            if ready:
                chunk = os.read(fd, 1 << 20)
                if not chunk:
                    raise EOFError(f"zygote exited (code {self.proc.poll()})")
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def run(self, job: Job, limits: Limits) -> RunResult:
        request = {"program": job.program, "calls": [[c.expr, c.expect] for c in job.calls], "entry": job.entry,
                   "roundtrip": job.roundtrip, **asdict(limits)}
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        payload = self._read_message(time.monotonic() + limits.timeout_s + 30)
        return parse_result(payload, len(job.calls))

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()


class Sandbox:
    """A reusable pool of zygotes. Create once, `submit`/`run`/`map` jobs, then `close()`.

    `group` routes a job to zygotes with hash seed HASH_SEEDS[group]; None means any zygote.
    Thread-safe; results come back as `RunResult`, never as exceptions.
    """

    def __init__(self, workers: int = 2, limits: Limits | None = None):
        self.limits = limits or Limits()
        self._cond = threading.Condition()
        self._queues: dict[int | None, deque] = {0: deque(), 1: deque(), None: deque()}
        self._closed = False
        n_zygotes = max(2, workers)
        self._uids = [_UID_BASE + (os.getpid() % 4_194_304) * 256 + next(_slot_counter) % 256 for _ in range(n_zygotes)]
        self._zygotes: list[_Zygote | None] = [None] * n_zygotes
        errors: list[BaseException] = []
        starters = [threading.Thread(target=self._start_slot, args=(slot, errors)) for slot in range(n_zygotes)]
        for thread in starters:
            thread.start()
        for thread in starters:
            thread.join()
        if errors:
            self.close()
            raise SandboxError(f"could not start the sandbox: {errors[0]}") from errors[0]
        self.capabilities: dict = dict(self._zygotes[0].capabilities)
        self._workers = [threading.Thread(target=self._work, args=(slot,), daemon=True) for slot in range(n_zygotes)]
        for thread in self._workers:
            thread.start()

    def _start_slot(self, slot: int, errors: list) -> None:
        try:
            self._zygotes[slot] = _Zygote(HASH_SEEDS[slot % 2], self._uids[slot])
        except BaseException as error:  # reported by the constructor
            errors.append(error)

    def submit(self, job: Job, group: int | None = None) -> Future:
        future: Future = Future()
        with self._cond:
            if self._closed:
                raise SandboxError("sandbox is closed")
            self._queues[group].append((job, future))
            self._cond.notify_all()
        return future

    def run(self, job: Job, group: int | None = None) -> RunResult:
        return self.submit(job, group).result()

    def map(self, jobs: list[Job], group: int | None = None) -> list[RunResult]:
        return [future.result() for future in [self.submit(job, group) for job in jobs]]

    def _take(self, group: int):
        with self._cond:
            while True:
                for queue in (self._queues[group], self._queues[None]):
                    if queue:
                        return queue.popleft()
                if self._closed:
                    return None
                self._cond.wait()

    def _work(self, slot: int) -> None:
        group = slot % 2
        while (item := self._take(group)) is not None:
            job, future = item
            if not future.set_running_or_notify_cancel():
                continue
            future.set_result(self._run_on(slot, job))
        if self._zygotes[slot] is not None:
            self._zygotes[slot].close()

    def _run_on(self, slot: int, job: Job) -> RunResult:
        limits = job.limits or self.limits
        try:
            if self._zygotes[slot] is None:
                self._zygotes[slot] = _Zygote(HASH_SEEDS[slot % 2], self._uids[slot])
            return self._zygotes[slot].run(job, limits)
        except (EOFError, TimeoutError, OSError, ValueError, SandboxError) as error:
            # the zygote died, hung or spoke garbage: restart it for the next job
            if self._zygotes[slot] is not None:
                self._zygotes[slot].kill()
                self._zygotes[slot] = None
            status = "crash" if isinstance(error, (EOFError, ValueError)) else "sandbox_error"
            return RunResult(status=status, detail=f"sandbox worker failed: {error}")

    def close(self) -> None:
        with self._cond:
            if self._closed:
                return
            self._closed = True
            pending = [item for queue in self._queues.values() for item in queue]
            for queue in self._queues.values():
                queue.clear()
            self._cond.notify_all()
        for _, future in pending:
            if future.set_running_or_notify_cancel():
                future.set_result(RunResult(status="sandbox_error", detail="sandbox closed"))
        for thread in getattr(self, "_workers", []):
            thread.join()
        for zygote in self._zygotes:
            if zygote is not None and zygote.proc.poll() is None:
                zygote.close()

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ----------------------------------------------------------------------------- zygote side
# Everything below runs inside the zygote (started by _BOOT) or its children; stdlib only.

