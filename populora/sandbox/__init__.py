"""Containment layer: run untrusted Python programs and return structured results.

    with Sandbox(workers=2, limits=Limits(timeout_s=2, memory_mb=512, max_output_chars=2000)) as box:
        result = box.run(Job("def f(a):\n    return a", (Call("f(1)"),)))
        result.status, result.calls[0].repr          # ("ok", "1")

Design. `Sandbox` starts `workers` (at least 2) long-lived *zygote* processes. Each zygote starts
with a clean environment, imports the standard modules once, and locks itself into fresh
namespaces; then, for every job, it forks one short-lived child which drops its privileges, runs
the program with fresh globals and writes a JSON result into a pipe. The zygote supervises the
child (CPU time, a wall-clock backstop, result size), kills it with SIGKILL, and deletes its scratch
directory. Zygotes of group 0 and group 1 run with different hash seeds (PYTHONHASHSEED 1 and 2),
so two runs of one job in different groups expose programs that depend on set/dict hash order.

Two ways in. As root, the zygote unshares the namespaces itself and every child runs under a uid
of its own. As an ordinary user (or root without CAP_SYS_ADMIN), where unprivileged user namespaces
are allowed, the zygote first enters a user namespace that maps only its own uid and gid (the one
map an ordinary user may write) and holds every capability there, over its own namespaces only; it
builds the same namespaces and jail, and each child drops all capabilities, so it is the invoking
user again (not root, even inside). `Sandbox.capabilities["mode"]` says which: "root",
"user_namespace" or "no_namespaces" (neither worked).

What is covered, per layer (`Sandbox.layers` reports what was actually set up; the tests assert it,
tests/test_sandbox_unprivileged.py as an ordinary user too):
  * Time (no layer; always): the verdict "timeout" is decided by the child's CPU time (user +
    system, read from its process CPU clock by the zygote; `Limits.timeout_s`), so a busy machine
    does not change verdicts; a wall-clock backstop (`Limits.wall_timeout_s`, default
    max(5 x timeout_s, timeout_s + 3 s)) ends programs that sleep or block. The backstop does not
    count the time the child waited for a CPU (its run-queue delay, from /proc/<pid>/schedstat, which
    the zygote opens before the jail), so a starved CPU-bound program is still ended by its CPU time
    or its memory limit, as on an idle machine (up to 10 x the backstop; tests/test_sandbox_load.py).
    SIGKILL, which signal handlers cannot intercept; a child cannot start threads or processes. -> status "timeout".
  * Memory (always): RLIMIT_AS (`Limits.memory_mb`)                   -> status "memory".
  * Processes (always): RLIMIT_NPROC = 0, so a child can neither fork nor start threads; its
    process group is killed after every check.
  * Output floods (always): stdout/stderr go to a counting sink and fd 1/2 to /dev/null; reprs
    longer than `max_output_chars` are refused, never truncated; the result pipe is read up to a
    bound                                                             -> "output_too_large".
  * fs_jail (root; user namespace: the same): every child sees a read-only jail (pivot_root into a
    tmpfs holding read-only binds of /usr, /etc, the Python installation and /dev/null, /dev/zero,
    /dev/urandom) with one writable directory, a private tmpfs of `file_mb` MiB; RLIMIT_FSIZE caps
    single files. The project tree, /root, /home, /tmp and /proc are not visible, except for the
    read-only path of the Python installation itself (a venv inside a checkout under /tmp or the
    home directory shows that one path, nothing beside it). This holds from any checkout path.
  * mount_namespace (root; user namespace: the same): the jail's mounts are private to the zygote.
  * net_namespace (root; user namespace: the same): the zygote lives in an empty network namespace
    (no interfaces up, not even lo; abstract unix sockets of the host are out of reach).
  * ipc_namespace (root; user namespace: the same): System V / POSIX-mqueue objects are private
    (and seccomp refuses creating them).
  * seccomp (root; user namespace: the same; and without either): a filter denies with EPERM exec,
    ptrace, process_vm_readv/writev, pidfd_getfd, keyrings, namespaces, mounts, bpf, io_uring,
    System V / POSIX-mqueue IPC, every signal to anyone (kill, tgkill, pidfd_send_signal, ...) and
    every change of uid/gid (setuid, setgroups, ...). Children are no_new_privs, not dumpable, and
    die with the zygote (PR_SET_PDEATHSIG); the zygote is not dumpable either.
  * uid_drop (root only): each child runs under a uid of its own (one per worker, never a real
    account, no capabilities), so the kernel's uid checks too keep it from the zygote, the stage and
    the other checks, and RLIMIT_NPROC = 0 applies to that uid alone. An ordinary user cannot switch
    to another uid (a user namespace maps only the user's own uid without a setuid helper), so for
    an ordinary user this layer is honestly OFF: the child keeps the invoking user's uid and gid,
    with every capability dropped and no root mapped inside. What the separate uid would add is
    then provided by the other layers: the jail (no host files but read-only system ones, no /proc),
    the namespaces, and seccomp (no signals, no ptrace or pidfd_getfd, no uid changes); RLIMIT_NPROC
    = 0 still stops fork and threads (the user's own processes already count against it).
  * Environment (always): zygotes start with an empty environment; children see PATH, LANG and
    *_NUM_THREADS=1 (for numeric libraries) only, and /proc/<pid>/environ of other processes is
    out of reach (no /proc in the jail, other uids or seccomp).
  * Stdin reads /dev/null. Crashes (segfaults, aborts)                -> status "crash".
  * State between checks: each check is a fresh fork (monkey-patched builtins, module state and
    files die with it; IPC objects cannot be created).
  * Hostile results: a child that dies, writes garbage or floods the pipe gets a clean status.

What is not covered:
  * A program can lie about its *own* results (it runs in the process that reports them). The
    verifier therefore never sends a gold answer into a process that runs a solver's program.
  * Kernel exploits, CPU side channels, and resource use below the limits (a check may burn its
    full CPU time, wall-clock backstop and memory budget). Reading the world-readable files inside
    the jail (the Python installation, /usr, /etc) is allowed.
  * As an ordinary user, the kernel sees the children as that user (uid_drop off, above): a kernel
    path that checks only the uid and that none of the other layers closes would be open to them.
  * Where user namespaces are not allowed (and not root), only rlimits, seccomp and a private
    working directory remain: the program can then read and write whatever the invoking user can,
    and reach the network. The verifier's default requirement refuses such a node.

Layers. `Sandbox.layers` is {layer: active} for the six layers in LAYERS (fs_jail, ipc_namespace,
mount_namespace, net_namespace, seccomp, uid_drop); `describe_missing` names each missing one and
its fix. The sandbox itself runs with what it gets; callers decide whether that is enough:
populora.verifier refuses unless every layer named in `verify.required_layers` is on (default: all
but uid_drop, which an ordinary user meets where user namespaces are allowed). $POPULORA_SANDBOX_SKIP
(comma-separated layer names) leaves layers off on purpose, to test that refusal.

Modules, split by process:
  * pool.py   (the stage's process): Sandbox, the job and result types, the zygote handles.
  * zygote.py (each zygote, started as its own script; stdlib only): the job loop, the child's
              supervision and the child side (running the program, the result protocol).
  * jail.py   (imported by the zygote): namespaces, the file-system jail, uid drop, rlimits, seccomp.
"""

from populora.sandbox.jail import LAYERS
from populora.sandbox.pool import (
    HASH_SEEDS,
    LAYER_FIXES,
    SKIP_ENV,
    Call,
    CallResult,
    Job,
    Limits,
    RunResult,
    Sandbox,
    SandboxError,
    describe_missing,
    layer_report,
    missing_layers,
    parse_result,
    wall_backstop,
)
from populora.sandbox.zygote import CALL_STATUSES, RUN_STATUSES

__all__ = [
    "CALL_STATUSES",
    "HASH_SEEDS",
    "LAYERS",
    "LAYER_FIXES",
    "RUN_STATUSES",
    "SKIP_ENV",
    "Call",
    "CallResult",
    "Job",
    "Limits",
    "RunResult",
    "Sandbox",
    "SandboxError",
    "describe_missing",
    "layer_report",
    "missing_layers",
    "parse_result",
    "wall_backstop",
]
