"""The stage's side of the stage host: `stages/__init__.py` calls delegate() before anything heavy is imported, and
the `python -m stages.<name>` process stands in for its stage run in the host: it forwards the signals it gets,
writes the stage's resource use where asked, and exits as the stage did.

    .venv/bin/python -m pytest tests/test_stagehost.py -q
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path

from populora.core.stagehost.protocol import (
    FORWARDED,
    SOCKET_ENV,
    USAGE_DIR_ENV,
    fingerprint,
    module_of,
    read_message,
    send_message,
)


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


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
