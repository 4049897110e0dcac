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

Three modules: protocol (what stand-in and host share: the checks and the messages), standin (the
`python -m stages.<name>` process's side) and host (the server and the forked stage).
"""

from populora.core.stagehost.host import PARENT_POLL_S, handle, main, other_user, run_stage, serve, usage_of
from populora.core.stagehost.protocol import (
    FORWARDED,
    HEADER,
    LOAD_TIME_PREFIXES,
    PRELOAD,
    PROJECT_PACKAGES,
    SOCKET_ENV,
    THREAD_VARIABLES,
    USAGE_DIR_ENV,
    fingerprint,
    load_time_environment,
    mismatch,
    module_of,
    read_message,
    receive_request,
    send_message,
    shadowed,
)
from populora.core.stagehost.standin import delegate, exit_like, usage_file, write_usage

__all__ = [
    "FORWARDED", "HEADER", "LOAD_TIME_PREFIXES", "PARENT_POLL_S", "PRELOAD", "PROJECT_PACKAGES", "SOCKET_ENV",
    "THREAD_VARIABLES", "USAGE_DIR_ENV", "delegate", "exit_like", "fingerprint", "handle", "load_time_environment",
    "main", "mismatch", "module_of", "other_user", "read_message", "receive_request", "run_stage", "send_message",
    "serve", "shadowed", "usage_file", "usage_of", "write_usage",
]  # fmt: skip
