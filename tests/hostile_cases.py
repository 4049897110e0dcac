"""The hostile suite as data: programs that try to escape or abuse the sandbox, with the outcome
each must get. Used by tests/test_sandbox.py (run directly in the Sandbox, no static checks).

An outcome is the run status when the run failed ("timeout", "memory", "crash",
"output_too_large"), else the call status ("exception", "no_entry", "output_too_large"), else
"ok:<repr>" of f's value. `expect` lists the acceptable outcomes; "exception:<Type>" pins the
exception type. Each case's `contains` says which containment property it exercises.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HostileCase:
    name: str
    contains: str  # the containment class this case exercises
    program: str
    expect: frozenset[str]
    input: str = "0"


def case(name: str, contains: str, body: str, *expect: str, imports: str = "", helpers: str = "") -> HostileCase:
    lines = "\n".join("    " + line for line in body.strip("\n").splitlines())
    program = f"{imports}\n{helpers}\ndef f(x):\n{lines}\n".lstrip("\n")
    return HostileCase(name, contains, program, frozenset(expect))


HOSTILE_CASES: list[HostileCase] = [
    # ---- time: CPU and wall clock, signal handlers cannot save the program
    case("infinite_loop", "time", "while True:\n    pass", "timeout"),
    case("sleep_forever", "time", "time.sleep(1000)", "timeout", imports="import time"),
    case(
        "ignore_signals_then_loop",
        "time",
        "for s in (signal.SIGALRM, signal.SIGTERM, signal.SIGXCPU, signal.SIGINT):\n"
        "    signal.signal(s, signal.SIG_IGN)\nwhile True:\n    pass",
        "timeout",
        imports="import signal",
    ),
    case(
        "swallow_every_exception",
        "time",
        "while True:\n    try:\n        while True:\n            pass\n    except BaseException:\n        pass",
        "timeout",
    ),
    case("block_on_own_pipe", "time", "r, w = os.pipe()\nreturn os.read(r, 1)", "timeout", imports="import os"),
    case(
        "stop_itself",
        "time",
        "os.kill(os.getpid(), signal.SIGSTOP)\nreturn 1",
        "exception:PermissionError",
        "timeout",
        imports="import os, signal",
    ),
    case(
        "hostile_exception_str",
        "time",
        "raise E()",
        "timeout",
        helpers="class E(Exception):\n    def __str__(self):\n        while True:\n            pass\n",
    ),
    case("close_result_pipe_and_spin", "time", "os.close(3)\nwhile True:\n    pass", "timeout", imports="import os"),
    case(
        "alarm_storm_in_harness",
        "time",
        "signal.signal(signal.SIGALRM, h)\nsignal.setitimer(signal.ITIMER_REAL, 0.00001, 0.00001)\nreturn 1",
        "crash",
        "timeout",
        "exception:E",
        "ok:1",
        imports="import signal",
        helpers="class E(Exception):\n    pass\ndef h(*_):\n    raise E()\n",
    ),
    # ---- memory
    case("huge_list", "memory", "return len([0] * 10**9)", "memory"),
    # bytes(n) is calloc'ed (pages untouched): RLIMIT_AS trips just as fast, without seconds of page faults
    case("memory_growth", "memory", "chunks = []\nwhile True:\n    chunks.append(bytes(10**7))", "memory"),
    case(
        "memory_growth_touched",
        "memory",
        "chunks = []\nwhile True:\n    chunks.append(b'x' * 10**6)",
        "memory",
        "timeout",
    ),
    case("bytearray_bomb", "memory", "return len(bytearray(2**34))", "memory"),
    case(
        "unbounded_recursion",
        "recursion",
        "return g(0)",
        "exception:RecursionError",
        helpers="def g(n):\n    return g(n + 1)\n",
    ),
    case(
        "recursion_limit_lifted",
        "recursion",
        "sys.setrecursionlimit(10**8)\nreturn g(0)",
        "crash",
        "memory",
        "timeout",
        "exception:RecursionError",
        imports="import sys",
        helpers="def g(n):\n    return g(n + 1) + 1\n",
    ),
    # ---- output floods and hostile results
    case("stdout_flood", "output", "for _ in range(2000):\n    print('x' * 10**5)\nreturn 1", "ok:1"),
    case(
        "fd_flood",
        "output",
        "for _ in range(100):\n    os.write(1, b'x' * 10**6)\n    os.write(2, b'y' * 10**6)\nreturn 2",
        "ok:2",
        imports="import os",
    ),
    case("huge_repr", "output", "return 'x' * 10**6", "output_too_large"),
    case(
        "flood_result_pipe",
        "output",
        "while True:\n    os.write(3, b'x' * 65536)",
        "output_too_large",
        imports="import os",
    ),
    case("garbage_result", "output", "os.write(3, b'{not json')\nos._exit(0)", "crash", imports="import os"),
    case("close_result_pipe", "output", "os.close(3)\nreturn 1", "crash", imports="import os"),
    case(
        "repr_raises",
        "output",
        "return R()",
        "exception:ValueError",
        helpers="class R:\n    def __repr__(self):\n        raise ValueError('no repr')\n",
    ),
    # ---- stdin
    case("read_stdin_input", "stdin", "return input()", "exception:EOFError"),
    case(
        "read_stdin_fd", "stdin", "return sys.stdin.read() + os.read(0, 10).decode()", "ok:''", imports="import os, sys"
    ),
    # ---- filesystem: read-only jail, private writable directory, file-size limit
    case(
        "write_tmp",
        "files",
        "open('/tmp/pwned', 'w').write('x')",
        "exception:FileNotFoundError",
        "exception:OSError",
        "exception:PermissionError",
    ),
    case("write_root_dir", "files", "open('/pwned', 'w').write('x')", "exception:OSError", "exception:PermissionError"),
    case(
        "delete_system_file",
        "files",
        "os.remove('/etc/passwd')",
        "exception:OSError",
        "exception:PermissionError",
        imports="import os",
    ),
    case(
        "write_outside_jail",
        "files",
        "open('/root/populora_pwned', 'w').write('x')",
        "exception:FileNotFoundError",
        "exception:OSError",
        "exception:PermissionError",
    ),
    # home and temp directories show nothing but the path to the Python installation (bound read-only)
    case(
        "read_root_home",
        "files",
        """\
bound = set()
for prefix in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix):
    bound |= {prefix, os.path.realpath(prefix)}
def leads_to_python(path):
    return any(b == path or b.startswith(path + '/') for b in bound)
seen = []
for top in ('/root', '/home', '/tmp', os.path.expanduser('~')):
    for here, dirs, files in os.walk(top):
        if any(here == b or here.startswith(b + '/') for b in bound):
            dirs[:] = []
            continue
        seen += [os.path.join(here, name) for name in files + dirs if not leads_to_python(os.path.join(here, name))]
        dirs[:] = [d for d in dirs if leads_to_python(os.path.join(here, d))]
return sorted(set(seen))""",
        "ok:[]",
        imports="import os, sys",
    ),
    case("private_dir_is_writable", "files", "open('note', 'w').write('hi')\nreturn open('note').read()", "ok:'hi'"),
    case(
        "fill_disk",
        "files",
        "with open('big', 'wb') as h:\n    for _ in range(100):\n        h.write(b'x' * 10**6)",
        "exception:OSError",
    ),
    case("become_root", "files", "os.setuid(0)", "exception:PermissionError", imports="import os"),
    # ---- processes: no fork, no threads, no exec, no signalling others
    case("fork", "processes", "return os.fork()", "exception:BlockingIOError", imports="import os"),
    case(
        "fork_daemon",
        "processes",
        "if os.fork() == 0:\n    os.setsid()\n    time.sleep(2)\n    open('/tmp/daemon', 'w')\n    os._exit(0)\n"
        "return 1",
        "exception:BlockingIOError",
        imports="import os, time",
    ),
    case(
        "subprocess_run",
        "processes",
        "return subprocess.run(['echo', 'hi']).returncode",
        "exception:BlockingIOError",
        "exception:PermissionError",
        "exception:OSError",
        imports="import subprocess",
    ),
    case("os_system", "processes", "return os.system('echo pwned > /tmp/x')", "ok:-1", "ok:32512", imports="import os"),
    case(
        "posix_spawn",
        "processes",
        "return os.posix_spawn('/bin/true', ['true'], {})",
        "exception:BlockingIOError",
        "exception:PermissionError",
        imports="import os",
    ),
    case(
        "exec_shell",
        "processes",
        "os.execv('/bin/sh', ['sh', '-c', 'echo hi'])",
        "exception:PermissionError",
        imports="import os",
    ),
    case(
        "start_thread",
        "processes",
        "t = threading.Thread(target=print)\nt.start()\nreturn 1",
        "exception:RuntimeError",
        imports="import threading",
    ),
    case(
        "kill_parent",
        "processes",
        "os.kill(os.getppid(), signal.SIGKILL)",
        "exception:PermissionError",
        imports="import os, signal",
    ),
    case(
        "kill_everything",
        "processes",
        "os.kill(-1, signal.SIGKILL)\nreturn 1",
        "exception:PermissionError",
        "ok:1",
        imports="import os, signal",
    ),
    case(
        "kill_init", "processes", "os.kill(1, signal.SIGKILL)", "exception:PermissionError", imports="import os, signal"
    ),
    # ---- network: an empty network namespace
    case(
        "connect_localhost",
        "network",
        "socket.create_connection(('127.0.0.1', 22), timeout=1)",
        "exception:OSError",
        "exception:ConnectionRefusedError",
        imports="import socket",
    ),
    case(
        "connect_internet",
        "network",
        "socket.create_connection(('8.8.8.8', 53), timeout=1)",
        "exception:OSError",
        imports="import socket",
    ),
    case(
        "list_interfaces",
        "network",
        "return [name for _, name in socket.if_nameindex() if name != 'lo']",
        "ok:[]",
        imports="import socket",
    ),
    # ---- environment and other processes' secrets
    case(
        "read_environment",
        "environment",
        "return sorted(os.environ)",
        "ok:['LANG', 'MKL_NUM_THREADS', 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'PATH']",
        imports="import os",
    ),
    case(
        "read_proc_environ",
        "environment",
        "return open(f'/proc/{os.getppid()}/environ').read()",
        "exception:FileNotFoundError",
        "exception:PermissionError",
        imports="import os",
    ),
    # ---- crashes
    case("segfault_ctypes", "crash", "return ctypes.string_at(0)", "crash", imports="import ctypes"),
    case("segfault_read_null", "crash", "faulthandler._read_null()", "crash", imports="import faulthandler"),
    case("abort", "crash", "os.abort()", "crash", imports="import os"),
    case("hard_exit", "crash", "os._exit(3)", "crash", imports="import os"),
    case("sys_exit", "crash", "sys.exit(0)", "exception:SystemExit", imports="import sys"),
    # ---- evasion of static checks: contained anyway
    case(
        "import_via_builtins_getattr",
        "evasion",
        "imp = getattr(__builtins__, '__imp' + 'ort__')\nreturn imp('os').system('touch /tmp/x')",
        "ok:-1",
        "ok:32512",
    ),
    case(
        "subclasses_walk_to_os",
        "evasion",
        "for cls in getattr(object, '__subcl' + 'asses__')():\n"
        "    if cls.__name__ == '_wrap_close':\n"
        "        return getattr(cls.__init__, '__glo' + 'bals__')['system']('touch /tmp/x')\nreturn 'none'",
        "ok:-1",
        "ok:32512",
    ),
    case(
        "ptrace_attach",
        "processes",
        "libc = ctypes.CDLL(None, use_errno=True)\nreturn libc.ptrace(16, os.getppid(), 0, 0), ctypes.get_errno()",
        "ok:(-1, 1)",
        imports="import ctypes, os",
    ),
    case(
        "new_user_namespace",
        "processes",
        "libc = ctypes.CDLL(None, use_errno=True)\nreturn libc.unshare(0x10000000), ctypes.get_errno()",
        "ok:(-1, 1)",
        imports="import ctypes",
    ),
    case(
        "keyring_write",
        "state",
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "return libc.syscall(248, b'user', b'k', b'v', 1, -4), ctypes.get_errno()",
        "ok:(-1, 1)",
        imports="import ctypes",
    ),
]


def outcome(run) -> str:
    """One sandbox run as the verdict a case expects: the run's status, or its first call's
    (`ok:<repr>`, `exception:<type>`, `timeout`, ...). Used as root and as an ordinary user."""
    if run.status != "ok":
        return run.status
    call = run.calls[0]
    if call.status == "exception":
        return f"exception:{call.exc_type}"
    return f"ok:{call.repr}" if call.status == "ok" else call.status
