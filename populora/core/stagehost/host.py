"""The host's side of the stage host: import torch, transformers and PEFT once, listen at a Unix socket, and fork a
handler for each stand-in that connects; the handler checks the stage can run here, forks it as the caller's
process (descriptors, directory, environment, sys.path, threads), and reports its end and resource use.

    python -m populora stage-host serve --socket /tmp/stages.sock
"""

from __future__ import annotations

import argparse
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
from pathlib import Path

from populora.core.stagehost.protocol import (
    FORWARDED,
    PRELOAD,
    PROJECT_PACKAGES,
    SOCKET_ENV,
    THREAD_VARIABLES,
    fingerprint,
    mismatch,
    receive_request,
    send_message,
    shadowed,
)

PARENT_POLL_S = 2.0  # how often a host checks that the process that started it is still there


def serve(path: str, preload: tuple[str, ...] = PRELOAD) -> None:
    """Import `preload`, listen at `path`, and fork a handler for each stage that connects."""
    for name in THREAD_VARIABLES:  # the host's own thread default must be torch's, not a caller's choice
        os.environ.pop(name, None)
    environ_at_start = dict(os.environ)  # what the libraries see when they load
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    Path(path).unlink(missing_ok=True)
    listener.bind(path)
    listener.listen(64)  # from here a stage waits for the host (its imports) rather than importing on its own
    import importlib

    for name in preload:
        importlib.import_module(name)
    default_threads = _threads() if "torch" in sys.modules else None
    host = fingerprint(environ_at_start)
    # what they set while loading (transformers sets TORCHINDUCTOR_CACHE_DIR) is theirs, not an input: a caller whose
    # environment has it (a process that imported them) and one without it are both served
    host["set_while_loading"] = sorted(
        name for name in {*environ_at_start, *os.environ} if environ_at_start.get(name) != os.environ.get(name)
    )
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # handlers are reaped by the kernel
    parent = os.getppid()
    print(f"stage host {os.getpid()} at {path}: {', '.join(preload) or 'nothing'} imported", flush=True)
    while True:
        ready, _, _ = select.select([listener], [], [], PARENT_POLL_S)
        if os.getppid() != parent:  # its starter is gone (a stage in flight goes on in its handler)
            Path(path).unlink(missing_ok=True)
            return
        if not ready:
            continue
        conn, _ = listener.accept()
        if os.fork() == 0:
            listener.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            try:
                handle(conn, host, preload, default_threads)
            finally:
                os._exit(0)
        conn.close()


def handle(conn: socket.socket, host: dict, preloaded: tuple[str, ...], default_threads: int | None) -> None:
    """One stage: check it can run here, fork it, report its end; kill it if its stand-in dies first."""
    request, fds = receive_request(conn)
    if request is None or len(fds) != 3:
        return
    why = other_user(conn) or mismatch(host, request["fingerprint"]) or shadowed(request["path"], preloaded)
    if why:
        send_message(conn, {"refused": why})
        return
    pid = os.fork()
    if pid == 0:
        conn.close()
        try:
            run_stage(request, fds, default_threads)
        except BaseException:  # noqa: BLE001 - the host's failure to set the stage up, said on the stage's stderr
            import traceback

            traceback.print_exc()
            os._exit(1)
    for fd in fds:
        os.close(fd)
    send_message(conn, {"pid": pid})
    stage_done = os.pidfd_open(pid)
    ready, _, _ = select.select([conn.fileno(), stage_done], [], [])
    if stage_done not in ready:  # the stand-in sends nothing: readable means it is gone (killed outright)
        try:
            os.killpg(pid, signal.SIGKILL)  # and the stage goes with it, and what it started
        except ProcessLookupError:  # it ended at the same moment
            pass
    _, status, rusage = os.wait4(pid, 0)
    if os.WIFSIGNALED(status):
        result: dict = {"signal": os.WTERMSIG(status)}
    else:
        result = {"exit": os.waitstatus_to_exitcode(status)}
    result["usage"] = usage_of(rusage)
    try:
        send_message(conn, result)
    except OSError:
        pass


def other_user(conn: socket.socket) -> str | None:
    """Why a caller is not served for who it is (None for this process's own user and group): a host never runs a
    stage with rights its caller lacks."""
    _pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if (uid, gid) != (os.getuid(), os.getgid()):
        return f"the caller runs as uid {uid} gid {gid}, the host as uid {os.getuid()} gid {os.getgid()}"
    return None


def usage_of(rusage) -> dict:
    """The figures of a finished stage (os.wait4's resource usage: the stage and the children it waited for)."""
    return {
        "max_rss_mib": round(rusage.ru_maxrss / 1024, 1),  # Linux counts it in KiB
        "cpu_s": round(rusage.ru_utime + rusage.ru_stime, 3),
        "user_s": round(rusage.ru_utime, 3),
        "system_s": round(rusage.ru_stime, 3),
    }


def run_stage(request: dict, fds: list[int], default_threads: int | None) -> None:
    """In the forked stage: become the caller's process (its descriptors, directory, environment, path,
    threads), run the module as __main__, and exit as Python would."""
    os.setsid()  # its own group: the stand-in forwards signals, a terminal's Ctrl-C reaches the stand-in only
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    for signum in FORWARDED:
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["environ"])
    os.environ.pop(SOCKET_ENV, None)  # the stage's own `python -m stages.*` children run as usual
    sys.path[:] = request["path"]
    sys.argv[:] = request["argv"]
    for name in [name for name in sys.modules if name.split(".")[0] in PROJECT_PACKAGES]:
        del sys.modules[name]
    sys.path_importer_cache.clear()
    import importlib

    importlib.invalidate_caches()
    _reopen_standard_streams()
    random.seed()  # a fresh process's state, not the host's (tempfile and uuid reseed themselves)
    _set_threads(request["environ"], default_threads)
    code = _run_main(request["module"])
    os._exit(code)


def _run_main(module: str) -> int:
    import atexit
    import runpy

    code = 0
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SystemExit as stop:
        code = _exit_code(stop.code)
    except KeyboardInterrupt:
        sys.excepthook(*sys.exc_info())  # as Python reports it: a stage's own hook (its log file) included
        _shut_threads_down()
        atexit._run_exitfuncs()
        _flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)  # as Python ends on an uncaught KeyboardInterrupt
    except BaseException:  # noqa: BLE001 - the stage's uncaught error: its traceback and exit 1, as Python does
        sys.excepthook(*sys.exc_info())  # a stage's own hook writes it to its log file too
        code = 1
    _shut_threads_down()
    atexit._run_exitfuncs()
    _flush()
    return code


def _shut_threads_down() -> None:
    """What Python's own exit does before atexit's functions: threading's exit hooks, where
    concurrent.futures shuts its worker pools down, then the join of every non-daemon thread. Without it a
    stage that keeps a pool for its life (the bench stages' spawned checker) waits forever in
    multiprocessing's atexit join of the idle worker, and a non-daemon thread's work is cut off."""
    shutdown = getattr(threading, "_shutdown", None)  # CPython's private hook, the one its exit calls
    if shutdown is not None:
        shutdown()


def _exit_code(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass


def _reopen_standard_streams() -> None:
    """Python's own choice of buffering for the caller's descriptors (line-buffered on a terminal)."""
    import io

    unbuffered = bool(os.environ.get("PYTHONUNBUFFERED"))

    def text(fd: int, mode: str, like, *, line_buffering: bool) -> io.TextIOWrapper:
        raw = io.FileIO(fd, mode, closefd=False)
        buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
        encoding, errors = (like.encoding, like.errors) if like else ("utf-8", "strict")
        return io.TextIOWrapper(
            buffered, encoding=encoding, errors=errors, line_buffering=line_buffering, write_through=unbuffered
        )

    sys.stdin = text(0, "r", sys.__stdin__ or sys.stdin, line_buffering=False)
    sys.stdout = text(1, "w", sys.__stdout__ or sys.stdout, line_buffering=os.isatty(1))
    sys.stderr = text(2, "w", sys.__stderr__ or sys.stderr, line_buffering=True)


def _threads() -> int:
    return sys.modules["torch"].get_num_threads()


def _set_threads(environ: dict, default_threads: int | None) -> None:
    """The thread count the stage would have had: torch read OMP_NUM_THREADS when the host imported it."""
    if default_threads is None:
        return
    requested = environ.get("OMP_NUM_THREADS", "")
    threads = int(requested) if requested.isdigit() and int(requested) > 0 else default_threads
    sys.modules["torch"].set_num_threads(threads)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        return
    threadpool_limits(limits=threads, user_api="blas")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    serve_parser = sub.add_parser("serve", help="import the libraries once and run stages in forks of this process")
    serve_parser.add_argument("--socket", required=True, help="the Unix socket to listen at (POPULORA_STAGE_HOST)")
    serve_parser.add_argument(
        "--preload", default=",".join(PRELOAD), help="modules to import first, comma-separated ('' for none)"
    )
    args = parser.parse_args(argv)
    serve(args.socket, tuple(name for name in args.preload.split(",") if name))
    return 0
