"""A stage host: one process that has imported torch, transformers and PEFT once, and forks a copy of
itself for each stage (`python -m stages.<name>`) instead of every stage importing them again.

A model stage spends ~7 s of CPU starting Python on the 2-core EPYC (torch 2.3 s, transformers' auto
classes 4.1 s, PEFT 7.5 s: docs/measurements.md), which is most of a tiny pipeline's job in the tests
and ~7 s of each model stage of a real run. With a host running and `POPULORA_STAGE_HOST` naming its
socket, `python -m stages.<name> ...` hands its argv, working directory, environment and its standard
input, output and error (the file descriptors themselves) to the host from `stages/__init__.py`, before
any of those imports, and exits as the stage exits: the same code, or killed by the same signal.

    python -m populora stage-host serve --socket /tmp/stages.sock &     # then, in the engines' environment:
    export POPULORA_STAGE_HOST=/tmp/stages.sock

What stays as it was: the engine still starts a process per stage and sees its exit (the stand-in waits
for the stage); signals the stand-in gets (SIGINT, SIGTERM, SIGHUP, ...) go on to the stage, and a
stand-in killed outright (SIGKILL) takes the stage and what it started with it; the stage runs in the
caller's directory with the caller's environment, sys.path and thread count (`OMP_NUM_THREADS`, set
with torch.set_num_threads and threadpoolctl, since torch has read it already). The project's own code
(`populora`, `stages`, `workflow`) is never imported in the host: each stage imports it from its own
directory, so a clone or a test's copy of the project runs its own code.

When the host cannot stand for the process it says why on stderr and the stage runs as usual: no host at
the socket, another Python, virtual environment or interpreter options (`-O`, `-X ...`, `-W ...`), a sys.path
that would load one of those libraries from elsewhere, or an environment variable read when they load
(`HF_*`, `TORCH*`, `LD_*`, `PYTHON*` but PYTHONPATH, ...) set otherwise than in the host. Not carried over:
SIGSTOP/SIGCONT sent to the stand-in (a signal nobody can catch), and what an engine measures of the stage's
process: Snakemake's max RSS and CPU time describe the stand-in. So the host reports the stage's own (the kernel's, from wait4: peak resident
memory and CPU time, its children included), and where `POPULORA_STAGE_USAGE_DIR` is set (the Snakefile sets
it to the timings folder) the stand-in writes them to `<dir>/<stage>/<key>.usage.json`, named like the job's
`--log <...>/<stage>/<key>.log`, beside Snakemake's `<key>.tsv` (populora/report/timings.py prefers them).

A host lives as long as the process that started it: it exits within seconds of its parent's end (a
pipeline script, a test session), so none is left behind by a run that was killed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import select
import signal
import socket
import struct
import sys
import threading
from pathlib import Path

SOCKET_ENV = "POPULORA_STAGE_HOST"
USAGE_DIR_ENV = "POPULORA_STAGE_USAGE_DIR"  # where a stand-in writes its hosted stage's resource use
PARENT_POLL_S = 2.0  # how often a host checks that the process that started it is still there
PROJECT_PACKAGES = ("populora", "stages", "workflow", "tests", "perf")
PRELOAD = ("torch", "transformers", "transformers.modeling_utils", "peft", "safetensors.torch")
# variables read when the preloaded libraries load: a stage whose value differs from the host's runs on its own
LOAD_TIME_PREFIXES = (
    "PYTHON", "LD_", "KMP_", "GOMP_", "MKL_", "OPENBLAS_", "TORCH", "PYTORCH_", "CUDA_", "NCCL_", "HF_",
    "TRANSFORMERS_", "TOKENIZERS_", "PEFT_", "SAFETENSORS_", "XDG_CACHE_HOME",
)  # fmt: skip
# thread counts are set in the stage instead (engines set them per job: Snakemake to the job's threads)
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS",
                    "VECLIB_MAXIMUM_THREADS", "NUMEXPR_NUM_THREADS")  # fmt: skip
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)
HEADER = struct.Struct("!I")


def load_time_environment(environ) -> dict[str, str]:
    """The environment variables a stage must share with the host to be run by it. PYTHONPATH is not one of them:
    what matters of it, where each preloaded library would load from, is checked on the stage's sys.path
    (`shadowed`), so a test's project copy run with its own PYTHONPATH still gets a host."""
    return {
        key: value
        for key, value in environ.items()
        if key.startswith(LOAD_TIME_PREFIXES) and key not in (*THREAD_VARIABLES, "PYTHONPATH")
    }


def shadowed(path: list[str], preloaded) -> str | None:
    """Why the stage's sys.path would load one of the host's libraries from elsewhere (None where it would not)."""
    from importlib.machinery import PathFinder

    for name in sorted({name.split(".")[0] for name in preloaded}):
        spec = PathFinder.find_spec(name, path)
        loaded = sys.modules[name].__spec__
        here = loaded.origin if loaded else None
        if spec is None or spec.origin != here:
            return f"{name} would load from {spec.origin if spec else 'nowhere'} there, from {here} in the host"
    return None


def fingerprint(environ) -> dict:
    """What must be equal between a stage's process and the host: the interpreter, its options (`-O`, `-X dev`,
    `-W error`, ...: a stage started with options of its own runs with them, on its own) and load-time variables."""
    return {
        "executable": os.path.realpath(sys.executable),
        "prefix": sys.prefix,
        "version": sys.version,
        "options": repr((sys.flags, sys._xoptions, sys.warnoptions)),
        "environment": load_time_environment(environ),
    }


def mismatch(host: dict, stage: dict) -> str | None:
    """Why the host cannot run this stage (None when it can): the first difference, named."""
    for key in ("executable", "prefix", "version", "options"):
        if host[key] != stage[key]:
            return f"{key} differs (host {host[key]!r}, stage {stage[key]!r})"
    host_env, stage_env = host["environment"], stage["environment"]
    for name in sorted({*host_env, *stage_env} - set(host.get("set_while_loading", ()))):
        if host_env.get(name) != stage_env.get(name):
            return f"{name} differs (host {host_env.get(name)!r}, stage {stage_env.get(name)!r})"
    return None


def other_user(conn: socket.socket) -> str | None:
    """Why a caller is not served for who it is (None for this process's own user and group): a host never runs a
    stage with rights its caller lacks."""
    _pid, uid, gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
    if (uid, gid) != (os.getuid(), os.getgid()):
        return f"the caller runs as uid {uid} gid {gid}, the host as uid {os.getuid()} gid {os.getgid()}"
    return None


def module_of(orig_argv: list[str]) -> str | None:
    """The module a `python [options] -m MODULE args` command line runs, or None."""
    index = 1
    while index < len(orig_argv) - 1:
        arg = orig_argv[index]
        if arg == "-m":
            return orig_argv[index + 1]
        if not arg.startswith("-") or arg == "-c":
            return None
        index += 2 if arg in ("-X", "-W") else 1  # the interpreter's options that take the next argument
    return None


def send_message(conn: socket.socket, message: dict, fds: list[int] | None = None) -> None:
    data = json.dumps(message).encode()
    payload = HEADER.pack(len(data)) + data
    sent = socket.send_fds(conn, [payload], fds) if fds else conn.send(payload)
    conn.sendall(payload[sent:])


def receive_request(conn: socket.socket) -> tuple[dict | None, list[int]]:
    """The host's side: the one message a stand-in sends (None where it closed first) and the descriptors with it."""
    data, fds, _flags, _addr = socket.recv_fds(conn, 1 << 16, 3)
    while len(data) < HEADER.size or len(data) < HEADER.size + HEADER.unpack_from(data)[0]:
        more = conn.recv(1 << 16)
        if not more:
            return None, fds
        data += more
    (length,) = HEADER.unpack_from(data)
    return json.loads(data[HEADER.size : HEADER.size + length]), fds


def read_message(reader) -> dict | None:
    """The stand-in's side: the next message from a buffered reader of the connection (the stage's pid and its end
    may arrive in one read), or None where the host closed first."""
    header = reader.read(HEADER.size)
    if len(header) < HEADER.size:
        return None
    (length,) = HEADER.unpack(header)
    body = reader.read(length)
    return json.loads(body) if len(body) == length else None


# --- the stage's side: `stages/__init__.py` calls delegate() before anything heavy is imported ---


def delegate() -> None:
    """Run this `python -m stages.<name>` process's stage in the host and exit as it does; return (the
    stage then runs here) where no host can run it."""
    path = os.environ.get(SOCKET_ENV)
    module = module_of(list(getattr(sys, "orig_argv", [])))
    usage = usage_file(sys.argv, os.environ) if module else None
    if usage:  # an earlier run's figures never stand for this one, hosted or not
        usage.unlink(missing_ok=True)
    if not path or not module:
        return
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        conn.connect(path)
    except OSError as error:
        print(f"stage host at {path} not reached ({error}): the stage runs in its own process", file=sys.stderr)
        return
    request = {
        "module": module,
        "argv": sys.argv,
        "cwd": os.getcwd(),
        "environ": dict(os.environ),
        "path": sys.path,
        "umask": _umask(),
        "fingerprint": fingerprint(os.environ),
    }
    send_message(conn, request, fds=[0, 1, 2])
    reader = conn.makefile("rb")
    reply = read_message(reader)
    if reply is None or "refused" in reply:
        why = reply["refused"] if reply else "it closed the connection"
        print(f"stage host at {path} cannot run it: {why}; the stage runs in its own process", file=sys.stderr)
        return
    stage_pid = reply["pid"]

    def forward(signum, _frame):
        try:
            os.kill(stage_pid, signum)
        except ProcessLookupError:
            pass

    for signum in FORWARDED:
        signal.signal(signum, forward)
    result = read_message(reader)  # a forwarded signal interrupts the read, which goes on (PEP 475)
    if result is None:
        print(f"stage host at {path} went away while the stage ran", file=sys.stderr)
        os._exit(1)
    if usage and "usage" in result:
        write_usage(usage, result["usage"])
    exit_like(result)


def usage_file(argv: list[str], environ) -> Path | None:
    """Where this stage's resource use goes: `<POPULORA_STAGE_USAGE_DIR>/<stage>/<key>.usage.json` for a stage
    run with `--log <...>/<stage>/<key>.log` (None without either)."""
    folder = environ.get(USAGE_DIR_ENV)
    log = next((argv[i + 1] for i, arg in enumerate(argv[:-1]) if arg == "--log"), None)
    if not folder or not log:
        return None
    return Path(folder) / Path(log).parent.name / f"{Path(log).stem}.usage.json"


def write_usage(path: Path, usage: dict) -> None:
    """Write the hosted stage's figures atomically; a failure is said, never the stage's failure. (Not
    populora.core.io.write_json: its write points belong to the stages the kill test stops, not to stand-ins.)"""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.{os.getpid()}")
        partial.write_text(json.dumps(usage) + "\n")
        os.replace(partial, path)
    except OSError as error:
        print(f"the stage's resource use not written to {path}: {error}", file=sys.stderr)


def usage_of(rusage) -> dict:
    """The figures of a finished stage (os.wait4's resource usage: the stage and the children it waited for)."""
    return {
        "max_rss_mib": round(rusage.ru_maxrss / 1024, 1),  # Linux counts it in KiB
        "cpu_s": round(rusage.ru_utime + rusage.ru_stime, 3),
        "user_s": round(rusage.ru_utime, 3),
        "system_s": round(rusage.ru_stime, 3),
    }


def exit_like(result: dict) -> None:
    """End this process the way the stage ended: its exit code, or the signal that killed it."""
    sys.stdout.flush()
    sys.stderr.flush()
    if "signal" in result:
        signum = result["signal"]
        if signum not in (signal.SIGKILL, signal.SIGSTOP):  # the two no process can catch
            signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        os._exit(128 + signum)  # a signal this process ignores by design (never reached for SIGKILL)
    os._exit(result["exit"])


# --- the host's side ---


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


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


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


if __name__ == "__main__":
    raise SystemExit(main())
