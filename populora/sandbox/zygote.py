"""The zygote: a stdlib-only script that serves jobs over stdin/stdout, one JSON line each.

    python -s populora/sandbox/zygote.py '{"uid": 1000001, "skip": []}'     (started by the pool)

It imports the standard modules in _PRELOAD once, locks itself into the jail (jail.py, its sibling),
then for every request forks one short-lived child that locks itself down further, runs the
program with fresh globals and writes a JSON result into a pipe; the zygote supervises the child
(CPU time, a wall-clock backstop, result size), kills it with SIGKILL and deletes its scratch directory. Everything it
imports is copied by every fork, so it stays small. The pool imports this module too, for the
result protocol (RUN_STATUSES, CALL_STATUSES, valid_payload).
"""

from __future__ import annotations

import builtins
import json
import os
import select
import signal
import sys
import time

TYPE_CHECKING = False  # as in jail.py: typing.TYPE_CHECKING without importing typing
if TYPE_CHECKING or __package__:  # imported as populora.sandbox.zygote (by the pool: the protocol below)
    from populora.sandbox import jail
else:  # run as the zygote script: the sibling module, then this folder leaves sys.path
    import jail

    del sys.path[0]

RUN_STATUSES = ("ok", "syntax", "timeout", "memory", "crash", "output_too_large", "sandbox_error")
# The wall-clock backstop does not count the time a child waited for a CPU (its run-queue delay,
# /proc/<pid>/schedstat): on a busy machine a CPU-bound program is then stopped by its CPU time (or
# reaches its memory limit) exactly as on an idle one. WALL_CAP_FACTOR x the backstop is the absolute
# end, however starved the child is (and how long the pool waits for a zygote's answer).
WALL_CAP_FACTOR = 10.0
_proc_fd: int | None = None  # /proc, opened before the jail hides it (children close it: jail.lock_down)
CALL_STATUSES = ("ok", "exception", "no_entry", "output_too_large")

# Imported once in the zygote. Kept short on purpose: every loaded extension module adds mappings
# that each fork copies (this set: ~0.65 ms per fork+exit, the 30 common stdlib modules: ~1.2 ms);
# a program importing something else pays for that import itself.
_PRELOAD = (
    "bisect",
    "collections",
    "copy",
    "functools",
    "heapq",
    "itertools",
    "math",
    "operator",
    "re",
    "string",
    "typing",
)


def zygote_main(config_json: str) -> None:
    """Serve jobs over stdin/stdout (one JSON line each) until stdin closes."""
    for name in _PRELOAD:
        __import__(name)
    # The first call of the builtin compile() builds the interpreter's AST types (~1.5 ms); made
    # here, before any fork, it is not repeated in every child (importing this file's sibling
    # from a .pyc would otherwise leave it to them).
    compile("0", "<warm-up>", "eval")
    config = json.loads(config_json)
    global _proc_fd
    try:  # kept across the jail (pivot_root) to read children's run-queue delay; never inherited by them
        _proc_fd = os.open("/proc", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        _proc_fd = None
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
        caps, workroot, uid = jail.isolate_zygote(config)
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


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process `pid` so far (its process CPU clock; None if unreadable)."""
    try:
        return time.clock_gettime((~pid << 3) | 2)  # MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)
    except OSError:
        return None


def _run_delay(pid: int) -> float | None:
    """Seconds process `pid` has spent runnable but waiting for a CPU (None if unreadable)."""
    if _proc_fd is None:
        return None
    try:
        fd = os.open(f"{pid}/schedstat", os.O_RDONLY, dir_fd=_proc_fd)
        try:
            fields = os.read(fd, 200).split()
        finally:
            os.close(fd)
        return int(fields[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


def _collect(pid: int, read_fd: int, request: dict) -> dict:
    """Read the child's result (bounded), enforce the CPU-time limit and the wall-clock backstop
    with SIGKILL, reap it.

    The verdict "timeout" is decided by the child's CPU time (`timeout_s`), so a busy machine, which
    only stretches the wall clock, does not change it; `wall_timeout_s` (a multiple of it) ends
    programs that sleep or block without using CPU. The CPU clock is read only when the limit could
    have been reached: a single-threaded child uses at most as much CPU time as wall time passes.
    When the backstop comes, the time the child waited for a CPU is added to it (`_run_delay`), so a
    starved CPU-bound child is left to its CPU limit (or memory limit), never cut short by the load,
    up to WALL_CAP_FACTOR x the backstop."""
    cpu_limit = float(request["timeout_s"])
    wall_limit = float(request.get("wall_timeout_s") or cpu_limit)
    start = time.monotonic()
    wall_deadline, next_cpu_check = start + wall_limit, start + cpu_limit
    wall_cap, waited = start + WALL_CAP_FACTOR * wall_limit, 0.0
    max_bytes = len(request["calls"]) * (6 * int(request["max_output_chars"]) + 4096) + 65536
    chunks, size, killed_for, cpu_used = [], 0, None, None
    pidfd = os.pidfd_open(pid) if hasattr(os, "pidfd_open") else None
    poller = select.poll()
    poller.register(read_fd, select.POLLIN)
    if pidfd is not None:
        poller.register(pidfd, select.POLLIN)
    eof, exited = False, False
    while not (eof and exited):
        now = time.monotonic()
        if now >= wall_deadline:
            delay = _run_delay(pid)
            if delay is not None and delay > waited + 0.001 and now < wall_cap:
                waited = delay  # not the program's time: move the backstop by it
                wall_deadline = min(start + wall_limit + waited, wall_cap)
                continue
            killed_for = "wall"
            break
        if now >= next_cpu_check:
            used = _cpu_seconds(pid)
            if used is None and os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                used = 0.0  # exited (its result is being read): never a timeout
            cpu_used = now - start if used is None else used  # unreadable: the wall clock decides
            if cpu_used >= cpu_limit:
                killed_for = "timeout"
                break
            next_cpu_check = now + max(cpu_limit - cpu_used, 0.002)
        remaining = min(wall_deadline, next_cpu_check) - now
        if eof and pidfd is None:  # no pidfd: poll for exit without reaping (WNOWAIT)
            exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
            time.sleep(0 if exited else 0.001)
            continue
        for fd, _ in poller.poll(max(1, int(remaining * 1000 + 0.999))):
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
                poller.unregister(fd)  # the pidfd
        if size > max_bytes:
            killed_for = "output_too_large"
            break
    if killed_for == "wall":
        cpu_used = _cpu_seconds(pid)
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
        return {"status": "timeout", "detail": f"killed after {cpu_used:.2f} s of CPU time (limit {cpu_limit:g} s)"}
    if killed_for == "wall":
        cpu_text = "?" if cpu_used is None else f"{cpu_used:.2f}"
        return {
            "status": "timeout",
            "detail": f"killed after {wall_limit:g} s wall clock (the backstop; "
            f"{cpu_text} s of CPU time, limit {cpu_limit:g} s; "
            f"{waited:.2f} s waiting for a CPU not counted)",
        }
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
    if not valid_payload(result, len(request["calls"])):
        return {"status": "crash", "detail": f"exit code {code}, no valid result ({len(payload)} bytes)"}
    if code != 0:
        return {"status": "crash", "detail": f"exit code {code} after writing a result"}
    return result


CALL_FIELDS = {"status": str, "repr": str, "equal": bool, "roundtrip": bool, "exc_type": str, "exc_message": str}


def valid_payload(payload, n_calls: int) -> bool:
    """Is this child output a well-formed result (the parent re-checks it field by field)?"""
    if not isinstance(payload, dict) or payload.get("status") not in RUN_STATUSES:
        return False
    calls = payload.get("calls") or []
    if not isinstance(calls, list) or (payload["status"] == "ok" and len(calls) != n_calls):
        return False
    return all(
        isinstance(c, dict)
        and c.get("status") in CALL_STATUSES
        and all(c.get(k) is None or isinstance(c[k], t) for k, t in CALL_FIELDS.items())
        for c in calls
    )


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
    result: dict = {"status": "sandbox_error", "detail": "child setup failed"}
    try:
        jail.lock_down(request, caps, uid, write_fd, devnull, workdir)
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
            data = data[os.write(3, data) :]
    finally:
        _exit(0)


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
        result: dict = {"status": "ok", "repr": text}
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


if __name__ == "__main__":
    zygote_main(sys.argv[1])
