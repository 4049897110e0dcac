"""Parent side of the sandbox: the pool of zygote processes and the job/result types.

The zygotes run populora/sandbox/zygote.py as their own script (stdlib only); this module talks
to them over pipes, one JSON line per job and per result, and re-checks every result it reads.
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
from dataclasses import dataclass, field

from populora.sandbox.jail import LAYERS
from populora.sandbox.zygote import CALL_FIELDS, WALL_CAP_FACTOR, valid_payload

HASH_SEEDS = (1, 2)  # group 0, group 1
_UID_BASE = 1_000_000  # private uids: _UID_BASE + pid * 256 + n, never a real account
_slot_counter = itertools.count()


class SandboxError(RuntimeError):
    """The sandbox itself could not start (never raised for a program's behaviour)."""


_USERNS = (
    "run where unprivileged user namespaces are allowed (user.max_user_namespaces > 0; on Debian/Ubuntu "
    "kernels also kernel.unprivileged_userns_clone=1, on Ubuntu 23.10+ "
    "kernel.apparmor_restrict_unprivileged_userns=0; in a container: one that allows unshare(CLONE_NEWUSER)), "
    "or as root"
)
# How to get each layer back, for the messages of callers that require them (populora.verifier).
LAYER_FIXES = {
    "fs_jail": f"{_USERNS}; see jail_error",
    "ipc_namespace": _USERNS,
    "mount_namespace": _USERNS,
    "net_namespace": _USERNS,
    "seccomp": "run on Linux x86_64 or aarch64 with seccomp filters enabled (libc reachable through ctypes)",
    "uid_drop": "run as root (e.g. in a container, as uid 0): only root can run the checks under uids of their own "
    "(an ordinary user's checks keep that user's uid, without capabilities)",
}


def layer_report(capabilities: dict) -> dict[str, bool]:
    """{layer: active} for every containment layer in LAYERS (sorted)."""
    return {layer: bool(capabilities.get(layer)) for layer in LAYERS}


def missing_layers(capabilities: dict) -> list[str]:
    return [layer for layer, active in layer_report(capabilities).items() if not active]


def describe_missing(capabilities: dict, layers=None) -> str:
    """One line per missing layer (of `layers`; default: all) with its fix (empty when all are on)."""
    lines = [
        f"{layer}: off. Fix: {LAYER_FIXES[layer]}"
        for layer in missing_layers(capabilities)
        if layers is None or layer in layers
    ]
    if lines and capabilities.get("jail_error"):
        lines.append(f"(jail_error: {capabilities['jail_error']})")
    return "\n".join(lines)


def skip_from_env() -> frozenset[str]:
    """Layers named in $POPULORA_SANDBOX_SKIP (validated)."""
    names = frozenset(n.strip() for n in os.environ.get(SKIP_ENV, "").split(",") if n.strip())
    unknown = names - set(LAYERS)
    if unknown:
        raise SandboxError(f"{SKIP_ENV} names unknown layers {sorted(unknown)}; known: {', '.join(LAYERS)}")
    return names


WALL_FACTOR = 5.0  # the default wall-clock backstop: max(WALL_FACTOR x timeout_s, timeout_s + WALL_MIN_EXTRA_S)
WALL_MIN_EXTRA_S = 3.0


def wall_backstop(timeout_s: float) -> float:
    """The default wall-clock backstop for a CPU-time limit of `timeout_s` seconds."""
    return max(WALL_FACTOR * timeout_s, timeout_s + WALL_MIN_EXTRA_S)


@dataclass(frozen=True)
class Limits:
    """Per-job limits. No defaults for the first three: their one source is the `verify` section
    of the params (populora.config.VerifySection); populora.verifier builds Limits from it."""

    timeout_s: float  # CPU time (user + system) for one job (the program and all its calls) -> "timeout"
    memory_mb: int  # RLIMIT_AS of the child
    max_output_chars: int  # longest accepted repr of one result
    file_mb: int = 16  # private writable tmpfs and RLIMIT_FSIZE
    # wall clock for one job, the backstop for programs that sleep or block (also -> "timeout");
    # None: wall_backstop(timeout_s). A busy machine stretches the wall time, not the CPU time.
    wall_timeout_s: float | None = None

    @property
    def wall_limit_s(self) -> float:
        return self.wall_timeout_s if self.wall_timeout_s is not None else wall_backstop(self.timeout_s)


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


def parse_result(payload: dict, n_calls: int) -> RunResult:
    """A RunResult from a zygote/child JSON object, checked field by field (ValueError if malformed)."""
    if not valid_payload(payload, n_calls):
        raise ValueError("malformed result")
    calls = [CallResult(**{k: c.get(k) for k in CALL_FIELDS}) for c in payload.get("calls") or []]
    status, detail = payload["status"], payload.get("detail")
    return RunResult(
        status=status,
        calls=calls,
        detail=str(detail)[:500] if detail is not None else None,
        wall_s=float(payload.get("wall_s") or 0.0),
        stdout_chars=int(payload.get("stdout_chars") or 0),
    )


# ----------------------------------------------------------------------------- parent side

_ZYGOTE_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")
SKIP_ENV = "POPULORA_SANDBOX_SKIP"  # comma-separated layers to leave off (tests: a machine without them)


class _Zygote:
    """Parent-side handle of one zygote process: one JSON line out, one JSON line back."""

    def __init__(self, hash_seed: int, uid: int, skip: frozenset[str] = frozenset()):
        env = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "PYTHONHASHSEED": str(hash_seed),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        config = json.dumps({"uid": uid, "skip": sorted(skip)})
        self.proc = subprocess.Popen(
            [sys.executable, "-s", _ZYGOTE_SCRIPT, config],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd="/",
            start_new_session=True,
            close_fds=True,
        )
        self._buffer = b""
        hello = self._read_message(time.monotonic() + 60)
        if "capabilities" not in hello:
            self.kill()
            raise SandboxError(f"zygote failed to start: {hello.get('detail')}")
        self.capabilities: dict = hello["capabilities"]

    def _read_message(self, deadline: float) -> dict:
        assert self.proc.stdout is not None  # stdout=PIPE
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
        request = {
            "program": job.program,
            "calls": [[c.expr, c.expect] for c in job.calls],
            "entry": job.entry,
            "roundtrip": job.roundtrip,
            **vars(limits),
            "wall_timeout_s": limits.wall_limit_s,
        }
        assert self.proc.stdin is not None  # stdin=PIPE
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        # the zygote ends a check by WALL_CAP_FACTOR x its backstop at the latest (time spent waiting for a CPU)
        payload = self._read_message(time.monotonic() + WALL_CAP_FACTOR * limits.wall_limit_s + 30)
        return parse_result(payload, len(job.calls))

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()

    def close(self) -> None:
        assert self.proc.stdin is not None  # stdin=PIPE
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

    def __init__(self, workers: int, limits: Limits, skip_layers: frozenset[str] | None = None):
        """`skip_layers` (default: $POPULORA_SANDBOX_SKIP) leaves layers off on purpose, to test
        how callers behave on a machine without them; `capabilities` then reports them off."""
        self.limits = limits
        self.skip_layers = skip_from_env() if skip_layers is None else frozenset(skip_layers)
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
        first = self._zygotes[0]
        assert first is not None  # every slot started: no errors
        self.capabilities: dict = dict(first.capabilities)
        self.layers: dict[str, bool] = layer_report(self.capabilities)  # {layer: active}, every layer
        self._workers = [threading.Thread(target=self._work, args=(slot,), daemon=True) for slot in range(n_zygotes)]
        for thread in self._workers:
            thread.start()

    def _start_slot(self, slot: int, errors: list) -> None:
        try:
            self._zygotes[slot] = _Zygote(HASH_SEEDS[slot % 2], self._uids[slot], self.skip_layers)
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
        zygote = self._zygotes[slot]
        if zygote is not None:
            zygote.close()

    def _run_on(self, slot: int, job: Job) -> RunResult:
        limits = job.limits or self.limits
        try:
            zygote = self._zygotes[slot]
            if zygote is None or zygote.proc.poll() is not None:  # never started, or died while idle
                if zygote is not None:
                    zygote.kill()
                zygote = self._zygotes[slot] = _Zygote(HASH_SEEDS[slot % 2], self._uids[slot], self.skip_layers)
            return zygote.run(job, limits)
        except (EOFError, TimeoutError, OSError, ValueError, SandboxError) as error:
            # the zygote died, hung or spoke garbage: restart it for the next job
            broken = self._zygotes[slot]
            if broken is not None:
                broken.kill()
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
