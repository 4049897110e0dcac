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
  * Time: a wall-clock deadline enforced by the zygote with SIGKILL, which signal handlers in the
    program cannot intercept; a child cannot start threads, so its CPU time is bounded too
                                                                      -> status "timeout".
  * Memory: RLIMIT_AS (`Limits.memory_mb`)                            -> status "memory".
  * Output floods: stdout/stderr go to a counting sink and fd 1/2 to /dev/null; reprs longer
    than `max_output_chars` are refused, never truncated; the result pipe is read up to a
    bound                                                             -> "output_too_large".
  * Files: every child sees a read-only jail (pivot_root into a tmpfs holding read-only binds of
    /usr, /etc, the Python installation and /dev/null, /dev/zero, /dev/urandom) with one
    writable directory, a private tmpfs of `file_mb` MiB; RLIMIT_FSIZE caps single files. The
    project tree, /root, /home, /tmp and /proc are not visible.
  * Processes: the child runs as a uid of its own (one per worker, no capabilities,
    no_new_privs, not dumpable) with RLIMIT_NPROC = 0, so it can neither fork nor start threads,
    nor signal or trace the zygote, the stage or other checks. A seccomp filter denies exec,
    ptrace, keyrings, namespaces, mounts, bpf, io_uring and System V / POSIX-mqueue IPC with
    EPERM. Its process group is killed after every check, and PR_SET_PDEATHSIG kills it if the
    zygote dies.
  * Network: the zygote lives in an empty network namespace (no interfaces up, not even lo).
  * Environment: zygotes start with an empty environment; children see PATH, LANG and
    *_NUM_THREADS=1 (for numeric libraries) only, and /proc/<pid>/environ of other processes is
    out of reach (no /proc in the jail, other uids).
  * Stdin reads /dev/null. Crashes (segfaults, aborts)                -> status "crash".
  * State between checks: each check is a fresh fork (monkey-patched builtins, module state and
    files die with it; IPC objects cannot be created).
  * Hostile results: a child that dies, writes garbage or floods the pipe gets a clean status.

What is not covered:
  * A program can lie about its *own* results (it runs in the process that reports them). The
    verifier therefore never sends a gold answer into a process that runs a solver's program.
  * Kernel exploits, CPU side channels, and resource use below the limits (a check may burn its
    full time and memory budget). Reading the world-readable files inside the jail (the Python
    installation, /usr, /etc) is allowed.
  * Without root the layers degrade (`capabilities` says which are active). Where unprivileged
    user namespaces are allowed, a user namespace owns the network, mount and IPC namespaces and
    the same jail is built; children then keep the invoking user's uid (capabilities dropped),
    so the uid separation is gone, but the jail, seccomp (no signals, no ptrace) and the missing
    /proc still keep them off the user's files and processes. Where they are not allowed, only
    rlimits, seccomp and a private working directory remain: the program can then read and
    write whatever the invoking user can.

Zygote and child code live in this one stdlib-only file, which the zygote loads by path; that is
why it is longer than the other modules.
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


def parse_result(payload: dict, n_calls: int) -> RunResult:
    """A RunResult from a zygote/child JSON object, checked field by field (ValueError if malformed)."""
    if not _valid_payload(payload, n_calls):
        raise ValueError("malformed result")
    calls = [CallResult(**{k: c.get(k) for k in _CALL_FIELDS}) for c in payload.get("calls") or []]
    status, detail = payload["status"], payload.get("detail")
    return RunResult(status=status, calls=calls, detail=str(detail)[:500] if detail is not None else None,
                     wall_s=float(payload.get("wall_s") or 0.0), stdout_chars=int(payload.get("stdout_chars") or 0))


# ----------------------------------------------------------------------------- parent side

# split in two so that the full marker text occurs exactly once in this file: at the real marker
_ZYGOTE_MARKER = "# ==== zygote side" + ": the zygote process executes only the code below this line"
_BOOT = (  # runs the zygote half of this file (padded, so tracebacks keep the file's line numbers)
    "import sys\n"
    "sys.path = [p for p in sys.path if p]\n"
    "source = open(sys.argv[1], encoding='utf-8').read()\n"
    "head, _, tail = source.partition(sys.argv[2])\n"
    "tail = tail.partition('\\n')[2]\n"
    "namespace = {'__name__': '_populora_zygote'}\n"
    "exec(compile('\\n' * (head.count('\\n') + 1) + tail, sys.argv[1], 'exec'), namespace)\n"
    "namespace['zygote_main'](sys.argv[3])\n"
)


class _Zygote:
    """Parent-side handle of one zygote process: one JSON line out, one JSON line back."""

    def __init__(self, hash_seed: int, uid: int):
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": str(hash_seed),
               "PYTHONDONTWRITEBYTECODE": "1"}
        config = json.dumps({"uid": uid})
        self.proc = subprocess.Popen(
            [sys.executable, "-s", "-c", _BOOT, os.path.abspath(__file__), _ZYGOTE_MARKER, config],
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
                   "roundtrip": job.roundtrip, **vars(limits)}
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
            zygote = self._zygotes[slot]
            if zygote is None or zygote.proc.poll() is not None:  # never started, or died while idle
                if zygote is not None:
                    zygote.kill()
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


# ==== zygote side: the zygote process executes only the code below this line (see _BOOT) ====
# It is kept to a few stdlib imports: everything the zygote loads is copied by every fork.

import builtins  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import resource  # noqa: E402
import select  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

RUN_STATUSES = ("ok", "syntax", "timeout", "memory", "crash", "output_too_large", "sandbox_error")
CALL_STATUSES = ("ok", "exception", "no_entry", "output_too_large")


_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x08000000, 0x10000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 1, 4, 38
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_JAIL = "/tmp"  # where the jail's tmpfs is mounted before pivot_root (exists on every Linux)
_JAIL_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_JAIL_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
# Imported once in the zygote. Kept short on purpose: every loaded extension module adds mappings
# that each fork copies (this set: ~0.65 ms per fork+exit, the 30 common stdlib modules: ~1.2 ms);
# a program importing something else pays for that import itself.
_PRELOAD = ("bisect", "collections", "copy", "functools", "heapq", "itertools", "math", "operator", "re", "string",
            "typing")
# seccomp deny-list (EPERM): exec, tracing, keyrings, namespaces, mounts, kernel modules, bpf, io_uring,
# System V and POSIX message-queue IPC (objects that would outlive the check), signals to anyone.
_SECCOMP_DENY = {  # (audit arch, syscall numbers); the last six: kill, tkill, tgkill, rt_(tg)sigqueueinfo,
    # pidfd_send_signal -- a child never needs to signal anyone (not even itself: abort() still crashes it)
    "x86_64": (0xC000003E, (59, 322, 101, 250, 248, 249, 272, 308, 165, 166, 155, 161, 321, 323, 298, 310, 311,
                            246, 320, 175, 313, 176, 167, 168, 169, 163, 425, 426, 427, 428, 429, 430, 431, 432,
                            442, 29, 64, 68, 240, 62, 200, 234, 129, 297, 424)),
    "aarch64": (0xC00000B7, (221, 281, 117, 219, 217, 218, 97, 268, 40, 39, 41, 51, 280, 282, 241, 270, 271,
                             104, 294, 105, 273, 106, 224, 225, 142, 89, 425, 426, 427, 428, 429, 430, 431, 432,
                             442, 194, 190, 186, 180, 129, 130, 131, 138, 240, 424)),
}
_libc = None


def _libc_call(name: str, *args) -> None:
    result = getattr(_libc, name)(*args)
    if result != 0:
        code = __import__("ctypes").get_errno()
        raise OSError(code, f"{name}{args[:2]}: {os.strerror(code)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    enc = (lambda s: None if s is None else s.encode())
    _libc_call("mount", enc(source), enc(target), enc(fstype), flags, enc(data))


def _load_libc() -> None:
    global _libc
    import ctypes
    _libc = ctypes.CDLL(None, use_errno=True)
    _libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
    _libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
    _libc.unshare.argtypes = [ctypes.c_int]
    _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    _libc.syscall.restype = ctypes.c_long


_seccomp_fprog = None  # built once in the zygote; children only attach it


def _build_seccomp() -> None:
    """Compile the _SECCOMP_DENY filter: deny listed syscalls with EPERM, kill on a foreign ABI."""
    global _seccomp_fprog
    import ctypes
    import struct
    arch, denied = _SECCOMP_DENY[os.uname().machine]
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    n = len(denied)
    program = [(ld_abs, 0, 0, 4), (jeq, 1, 0, arch), (ret, 0, 0, 0x80000000), (ld_abs, 0, 0, 0),
               (jge, n + 1, 0, 0x40000000)]  # x32 syscall numbers: denied
    program += [(jeq, n - i, 0, nr) for i, nr in enumerate(denied)]
    program += [(ret, 0, 0, 0x7FFF0000), (ret, 0, 0, 0x00050000 | 1)]  # allow / errno EPERM
    filters = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in program))
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxQ", len(program), ctypes.addressof(filters)))
    prctl = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, use_errno=True)(
        ("prctl", _libc))
    _seccomp_fprog = (prctl, ctypes.addressof(fprog), fprog, filters)  # the buffers must stay alive


def _install_seccomp() -> None:
    """Attach the filter to this process (needs no_new_privs first)."""
    if _seccomp_fprog is None:
        _build_seccomp()
    prctl, address = _seccomp_fprog[:2]
    if prctl(22, 2, address) != 0:  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
        raise OSError(__import__("ctypes").get_errno(), "seccomp filter refused")


def _probe_in_child(action) -> bool:
    """Does `action` succeed in a throwaway fork (so the zygote itself is left unchanged)?"""
    pid = os.fork()
    if pid == 0:
        try:
            action()
            os._exit(0)
        except BaseException:
            os._exit(1)
    return os.waitpid(pid, 0)[1] == 0


def _jail_sources() -> list[str]:
    """Host paths the child needs: system dirs, the Python installation (venv and base), devices."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    prefixes |= {os.path.realpath(p) for p in prefixes}
    chosen: list[str] = []
    for path in sorted(set(_JAIL_DIRS) | prefixes | set(_JAIL_DEVICES), key=len):
        if os.path.lexists(path) and not any(path == c or path.startswith(c.rstrip("/") + "/") for c in chosen):
            chosen.append(path)
    return chosen


def _build_jail(work_mb: int) -> str:
    """pivot_root into a read-only tmpfs skeleton with read-only binds; returns the work dir."""
    sources = _jail_sources()
    links = {p: os.readlink(p) for p in sources if os.path.islink(p)}
    handles = {p: os.open(p, os.O_PATH) for p in sources if p not in links}  # opened before /tmp is covered
    _mount("tmpfs", _JAIL, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=8m,mode=0755")
    for path in sources:
        target = _JAIL + path
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if path in links:
            os.symlink(links[path], target)
            continue
        if os.path.isdir(path):
            os.makedirs(target, mode=0o755, exist_ok=True)
        else:
            open(target, "w").close()
        _mount(f"/proc/self/fd/{handles[path]}", target, None, _MS_BIND)
        device = path.startswith("/dev/")
        _mount(None, target, None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | (0 if device else _MS_NODEV))
        os.close(handles[path])
    os.mkdir(_JAIL + "/sbx", 0o711)
    _mount("tmpfs", _JAIL + "/sbx", "tmpfs", _MS_NOSUID | _MS_NODEV, f"size={work_mb}m,nr_inodes=4096,mode=0711")
    os.chdir(_JAIL)
    if _libc.syscall(_SYS_PIVOT_ROOT[os.uname().machine], b".", b".") != 0:
        raise OSError(__import__("ctypes").get_errno(), "pivot_root failed")
    _libc_call("umount2", b".", _MNT_DETACH)
    os.chdir("/")
    _mount(None, "/", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    return "/sbx"


def _enter_user_namespace(namespaces: int) -> bool:
    uid, gid = os.getuid(), os.getgid()
    if _libc.unshare(_CLONE_NEWUSER | namespaces) != 0:
        return False
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"), ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    return True


def _drop_capabilities() -> None:
    """capset(all zero): a child that is uid 0 of a user namespace keeps no capabilities in it."""
    import ctypes
    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    if _libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def _isolate_zygote(config: dict) -> tuple[dict, str, int | None]:
    """Enter namespaces and the jail; returns (capabilities, work root, uid for children)."""
    caps = {"net_namespace": False, "mount_namespace": False, "fs_jail": False, "uid_drop": False,
            "ipc_namespace": False, "root": os.geteuid() == 0}
    try:
        _load_libc()
    except OSError as error:
        caps["error"] = f"no libc: {error}"
    namespaces = _CLONE_NEWNS | _CLONE_NEWNET | _CLONE_NEWIPC
    if _libc is not None and caps["root"]:
        if _libc.unshare(namespaces) == 0:
            caps["net_namespace"] = caps["mount_namespace"] = caps["ipc_namespace"] = True
        elif _libc.unshare(_CLONE_NEWNET) == 0:
            caps["net_namespace"] = True
    elif _libc is not None and _enter_user_namespace(namespaces):
        # without root: a user namespace owns the others (this user is uid 0 inside, nobody else exists)
        caps["net_namespace"] = caps["mount_namespace"] = caps["ipc_namespace"] = caps["user_namespace"] = True
    workroot = None
    if caps["mount_namespace"]:
        try:
            _mount(None, "/", None, _MS_REC | _MS_PRIVATE)
            workroot = _build_jail(config.get("work_mb", 64))
            caps["fs_jail"] = True
        except (OSError, KeyError) as error:
            caps["jail_error"] = str(error)[:300]
    if workroot is None:
        import tempfile
        workroot = tempfile.mkdtemp(prefix="populora-sbx-")
        os.chmod(workroot, 0o711)
    uid = config.get("uid")
    if caps["root"] and uid is not None:
        caps["uid_drop"] = _probe_in_child(lambda: (os.setgroups([]), os.setgid(uid), os.setuid(uid)))
    if _libc is not None:
        if os.uname().machine in _SECCOMP_DENY:
            _build_seccomp()
        caps["seccomp"] = os.uname().machine in _SECCOMP_DENY and _probe_in_child(
            lambda: (_libc_call("prctl", _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), _install_seccomp()))
    return caps, workroot, uid if caps["uid_drop"] else None


def zygote_main(config_json: str) -> None:
    """Serve jobs over stdin/stdout (one JSON line each) until stdin closes."""
    for name in _PRELOAD:
        __import__(name)
    config = json.loads(config_json)
    # protocol on private fds; fd 0 becomes /dev/null and fd 1 stderr, so neither a stray print
    # nor a child (which inherits sys.stdin) can touch the protocol
    requests, out = os.fdopen(os.dup(0), "rb"), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    sys.stdin = open(0, closefd=False)
    sys.argv = ["<program>"]
    os.environ.clear()  # children inherit exactly this environment; one thread for numeric libraries,
    os.environ.update({"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"})  # which cannot start threads here
    os.environ.update({name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")})
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # oversize writes fail with EFBIG instead of killing
    os.umask(0o022)
    try:
        caps, workroot, uid = _isolate_zygote(config)
    except BaseException as error:  # report instead of dying silently
        out.write(json.dumps({"detail": f"isolation failed: {error!r}"}).encode() + b"\n")
        out.flush()
        return
    devnull = os.open("/dev/null", os.O_RDWR)
    import gc
    gc.freeze()  # the children's collector then leaves the zygote's objects (and their pages) alone
    out.write(json.dumps({"capabilities": caps}).encode() + b"\n")
    out.flush()
    for seq, line in enumerate(requests):
        request = json.loads(line)
        start = time.monotonic()
        result = _supervise(request, caps, workroot, uid, devnull, seq)
        result["wall_s"] = round(time.monotonic() - start, 6)
        out.write(json.dumps(result).encode() + b"\n")
        out.flush()
    if not caps["fs_jail"]:  # a work root on the host file system (the jail's tmpfs dies with the zygote)
        _remove_tree(workroot)


def _remove_tree(path: str) -> None:
    """Delete a directory tree without recursion or long paths (a child may nest thousands of
    directories); shutil is not imported because it loads compression modules into every fork."""
    stack = [os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)]
    try:
        while stack:
            fd, deeper = stack[-1], None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if not entry.is_dir(follow_symlinks=False):
                        os.unlink(entry.name, dir_fd=fd)
                        continue
                    try:
                        os.rmdir(entry.name, dir_fd=fd)
                    except OSError:  # not empty: descend, then rescan this level
                        deeper = os.open(entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                        break
            if deeper is None:
                os.close(stack.pop())
            else:
                stack.append(deeper)
        os.rmdir(path)
    finally:
        for fd in stack:
            os.close(fd)


def _supervise(request: dict, caps: dict, workroot: str, uid: int | None, devnull: int, seq: int) -> dict:
    """Fork one child for `request`, collect its result within the limits, clean up after it."""
    workdir = f"{workroot}/{seq}"
    os.mkdir(workdir, 0o700)
    if uid is not None:
        os.chown(workdir, uid, uid)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child never returns from here
        try:
            os.close(read_fd)
            _child_main(request, caps, uid, write_fd, devnull, workdir)
        finally:
            _exit(70)
    os.close(write_fd)
    try:
        return _collect(pid, read_fd, request)
    finally:
        os.close(read_fd)
        try:
            _remove_tree(workdir)
        except OSError:
            pass


def _collect(pid: int, read_fd: int, request: dict) -> dict:
    """Read the child's result (bounded), enforce the wall clock with SIGKILL, reap it."""
    timeout = float(request["timeout_s"])
    deadline = time.monotonic() + timeout
    max_bytes = len(request["calls"]) * (6 * int(request["max_output_chars"]) + 4096) + 65536
    chunks, size, killed_for = [], 0, None
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    poller = select.poll()
    poller.register(read_fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    eof, exited = False, False
    while not (eof and exited):
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            killed_for = "timeout"
            break
        if eof and pidfd is None:  # no pidfd: poll for exit without reaping (WNOWAIT)
            exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            time.sleep(0 if exited else 0.001)
            continue
        for fd, _ in poller.poll(max(1, int(remaining * 1000))):
            if fd == read_fd:
                chunk = os.read(read_fd, 65536)
                if not chunk:
                    eof = True
                    poller.unregister(read_fd)
                    continue
                size += len(chunk)
                chunks.append(chunk)
            else:
                exited = True
                poller.unregister(pidfd)
        if size > max_bytes:
            killed_for = "output_too_large"
            break
    if killed_for:
        os.kill(pid, 9)
    try:
        os.killpg(pid, 9)  # anything left in its process group; pid is not reused before the reap below
    except (ProcessLookupError, PermissionError):
        pass
    status = os.waitpid(pid, 0)[1]
    if pidfd is not None:
        os.close(pidfd)
    if killed_for == "timeout":
        return {"status": "timeout", "detail": f"killed after {timeout:g} s wall clock"}
    if killed_for:
        return {"status": "output_too_large", "detail": f"result larger than {max_bytes} bytes"}
    return _judge_exit(status, b"".join(chunks), request)


def _judge_exit(status: int, payload: bytes, request: dict) -> dict:
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == 24:  # SIGXCPU: only if a CPU limit was inherited from outside
            return {"status": "timeout", "detail": "CPU limit"}
        return {"status": "crash", "detail": f"killed by signal {sig}"}
    code = os.WEXITSTATUS(status)
    try:
        result = json.loads(payload)
    except ValueError:
        result = None
    if not _valid_payload(result, len(request["calls"])):
        return {"status": "crash", "detail": f"exit code {code}, no valid result ({len(payload)} bytes)"}
    if code != 0:
        return {"status": "crash", "detail": f"exit code {code} after writing a result"}
    return result


_CALL_FIELDS = {"status": str, "repr": str, "equal": bool, "roundtrip": bool, "exc_type": str, "exc_message": str}


def _valid_payload(payload, n_calls: int) -> bool:
    """Is this child output a well-formed result (the parent re-checks it field by field)?"""
    if not isinstance(payload, dict) or payload.get("status") not in RUN_STATUSES:
        return False
    calls = payload.get("calls") or []
    if not isinstance(calls, list) or (payload["status"] == "ok" and len(calls) != n_calls):
        return False
    return all(isinstance(c, dict) and c.get("status") in CALL_STATUSES and all(
        c.get(k) is None or isinstance(c[k], t) for k, t in _CALL_FIELDS.items()) for c in calls)


# ----------------------------------------------------------------------------- child side

class _CountingSink:
    """sys.stdout/sys.stderr of the child: counts characters, keeps none (floods cost nothing)."""

    def __init__(self) -> None:
        self.chars = 0

    def write(self, text) -> int:
        n = len(text) if isinstance(text, str) else 0
        self.chars += n
        return n

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


_exit = os._exit  # captured before any program runs: a program may replace os._exit in its process


def _child_main(request: dict, caps: dict, uid: int | None, write_fd: int, devnull: int, workdir: str) -> None:
    """Lock down this forked child, run the job, write one JSON result to fd 3 and _exit."""
    result = {"status": "sandbox_error", "detail": "child setup failed"}
    try:
        _lock_down(request, caps, uid, write_fd, devnull, workdir)
        result = {"status": "crash", "detail": "the program broke the harness"}  # e.g. a signal handler
        sink = _CountingSink()
        sys.stdout = sys.stderr = sink
        result = _execute(request)
        result["stdout_chars"] = sink.chars
    except BaseException:
        pass
    try:
        data = memoryview(json.dumps(result).encode())
        while data:
            data = data[os.write(3, data):]
    finally:
        _exit(0)


def _lock_down(request: dict, caps: dict, uid: int | None, write_fd: int, devnull: int, workdir: str) -> None:
    os.setpgid(0, 0)  # own process group, killed after the check (setsid would cost ~1 ms: a new autogroup)
    if caps.get("ipc_namespace") and not caps.get("seccomp"):  # else IPC syscalls are denied outright
        _libc_call("unshare", _CLONE_NEWIPC)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.dup2(write_fd, 3)
    os.closerange(4, 1 << 16)  # the zygote's protocol pipes and everything else
    # No RLIMIT_CPU: arming it costs ~0.5 ms per check, and a child that cannot start threads never
    # uses more CPU time than the wall-clock time after which the zygote kills it.
    memory = int(request["memory_mb"]) << 20
    file_bytes = int(request["file_mb"]) << 20
    for limit, value in ((resource.RLIMIT_AS, (memory, memory)), (resource.RLIMIT_FSIZE, (file_bytes, file_bytes)),
                         (resource.RLIMIT_NOFILE, (64, 64)), (resource.RLIMIT_NPROC, (0, 0)),
                         (resource.RLIMIT_CORE, (0, 0)), (resource.RLIMIT_MSGQUEUE, (0, 0))):
        resource.setrlimit(limit, value)
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if _libc is not None:
        for option, value in ((_PR_SET_NO_NEW_PRIVS, 1), (_PR_SET_DUMPABLE, 0), (_PR_SET_PDEATHSIG, 9)):
            _libc_call("prctl", option, value, 0, 0, 0)
        if caps.get("seccomp"):
            _install_seccomp()
        if caps.get("user_namespace"):
            _drop_capabilities()
    os.chdir(workdir)  # environment, stdin and SIGXFSZ were set up once in the zygote


class _OutOfMemory(Exception):
    pass


def _execute(request: dict) -> dict:
    """Compile once; for each call exec the program in fresh globals and evaluate the call."""
    limit = int(request["max_output_chars"])
    try:
        code = compile(request["program"], "<program>", "exec")
    except MemoryError:
        return {"status": "memory", "detail": "MemoryError while compiling"}
    except BaseException as error:
        return {"status": "syntax", "detail": f"{type(error).__name__}: {_text(error)}"}
    calls = []
    for expr, expect in request["calls"]:
        try:
            calls.append(_one_call(code, expr, expect, request["entry"], request["roundtrip"], limit))
        except (_OutOfMemory, MemoryError):  # memory is back once the frames have unwound
            return {"status": "memory", "calls": calls, "detail": "MemoryError"}
    return {"status": "ok", "calls": calls}


def _one_call(code, expr: str, expect: str | None, entry: str | None, roundtrip: bool, limit: int) -> dict:
    namespace = {"__name__": "__main__", "__builtins__": builtins}
    try:
        exec(code, namespace)
        if entry and not callable(namespace.get(entry)):
            return {"status": "no_entry"}
        value = eval(compile(expr, "<call>", "eval"), namespace)
        if expect is not None:
            expected = eval(compile(expect, "<expect>", "eval"), namespace)
            return {"status": "ok", "equal": _equal(expected, value)}
        text = repr(value)
        if not isinstance(text, str):
            raise TypeError("__repr__ returned a non-string")
        if len(text) > limit:
            return {"status": "output_too_large"}
        result = {"status": "ok", "repr": text}
        if roundtrip:
            result["roundtrip"] = _roundtrips(text, value, namespace)
        return result
    except MemoryError:
        raise _OutOfMemory from None
    except BaseException as error:  # SystemExit and KeyboardInterrupt are program behaviour too
        return {"status": "exception", "exc_type": type(error).__name__, "exc_message": _text(error)}


def _equal(a, b) -> bool:
    try:
        return bool(a == b)
    except BaseException:
        return False


def _roundtrips(text: str, value, namespace: dict) -> bool:
    """Does the repr evaluate back to an equal value in the program's namespace? (Plain eval: this
    is the sandboxed child; the verifier separately checks that the repr is a value expression.)"""
    try:
        return _equal(eval(text, namespace), value)
    except MemoryError:
        raise
    except BaseException:
        return False


def _text(error: BaseException) -> str:
    try:
        return str(error)[:300]
    except BaseException:
        return "<unprintable>"
