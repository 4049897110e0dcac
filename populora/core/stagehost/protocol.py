"""What the stand-in and the host share: the variables that name them, what a stage must share with the host to
be run by it (interpreter, options, load-time environment, where the preloaded libraries load from), and the
messages between them (a length-prefixed JSON object; the request carries the stand-in's standard descriptors).

    .venv/bin/python -m pytest tests/test_stagehost.py -q
"""

from __future__ import annotations

import json
import os
import signal
import socket
import struct
import sys

SOCKET_ENV = "POPULORA_STAGE_HOST"
USAGE_DIR_ENV = "POPULORA_STAGE_USAGE_DIR"  # where a stand-in writes its hosted stage's resource use
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
