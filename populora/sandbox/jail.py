"""The jail: namespaces, the read-only file-system jail, uid drop, rlimits and seccomp (stdlib only).

Used by the zygote (populora/sandbox/zygote.py), which imports this file as a sibling module when it
runs as its own script. `isolate_zygote` locks the zygote into fresh namespaces and the jail once;
`lock_down` finishes the job in every forked child (rlimits, private uid, no_new_privs, seccomp).
What this does and does not cover is written at the front of populora/sandbox/__init__.py.
"""

from __future__ import annotations

import os
import resource
import sys

# typing.TYPE_CHECKING without importing typing, which the zygote does not need (type checkers go by the name)
TYPE_CHECKING = False
if TYPE_CHECKING:
    import ctypes  # at run time imported where it is used
    from typing import Any

LAYERS = ("fs_jail", "ipc_namespace", "mount_namespace", "net_namespace", "seccomp", "uid_drop")

_CLONE_NEWNS, _CLONE_NEWIPC, _CLONE_NEWUSER, _CLONE_NEWNET = 0x00020000, 0x08000000, 0x10000000, 0x40000000
_MS_RDONLY, _MS_NOSUID, _MS_NODEV, _MS_REMOUNT, _MS_BIND, _MS_REC, _MS_PRIVATE = 1, 2, 4, 32, 4096, 16384, 1 << 18
_MNT_DETACH = 2
_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_SET_NO_NEW_PRIVS = 1, 4, 38
_SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}
_JAIL = "/tmp"  # where the jail's tmpfs is mounted before pivot_root (exists on every Linux)
_JAIL_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
_JAIL_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")
# seccomp deny-list (EPERM): exec, tracing, keyrings, namespaces, mounts, kernel modules, bpf, io_uring,
# System V and POSIX message-queue IPC (objects that would outlive the check), signals to anyone, every
# change of uid/gid (the child's ids are fixed before the filter goes on: as root the private uid, in a
# user namespace the invoking user's; this also makes os.setuid(0) fail alike in both), and reaching
# into other processes by pidfd (pidfd_getfd, process_madvise).
_SECCOMP_DENY = {  # (audit arch, syscall numbers); the six at the end of the third line: kill, tkill, tgkill,
    # rt_(tg)sigqueueinfo, pidfd_send_signal -- a child never needs to signal anyone (not even itself: abort()
    # still crashes it); the fourth line: setuid, setgid, setreuid, setregid, setgroups, setresuid, setresgid,
    # setfsuid, setfsgid, pidfd_getfd, process_madvise
    "x86_64": (
        0xC000003E,
        (
            59,
            322,
            101,
            250,
            248,
            249,
            272,
            308,
            165,
            166,
            155,
            161,
            321,
            323,
            298,
            310,
            311,
            246,
            320,
            175,
            313,
            176,
            167,
            168,
            169,
            163,
            425,
            426,
            427,
            428,
            429,
            430,
            431,
            432,
            442,
            29,
            64,
            68,
            240,
            62,
            200,
            234,
            129,
            297,
            424,
            105,
            106,
            113,
            114,
            116,
            117,
            119,
            122,
            123,
            438,
            440,
        ),
    ),
    "aarch64": (
        0xC00000B7,
        (
            221,
            281,
            117,
            219,
            217,
            218,
            97,
            268,
            40,
            39,
            41,
            51,
            280,
            282,
            241,
            270,
            271,
            104,
            294,
            105,
            273,
            106,
            224,
            225,
            142,
            89,
            425,
            426,
            427,
            428,
            429,
            430,
            431,
            432,
            442,
            194,
            190,
            186,
            180,
            129,
            130,
            131,
            138,
            240,
            424,
            146,
            144,
            145,
            143,
            159,
            147,
            149,
            151,
            152,
            438,
            440,
        ),
    ),
}
_libc: ctypes.CDLL | None = None  # _load_libc; every caller below checks it was loaded


def _libc_call(name: str, *args) -> None:
    result = getattr(_libc, name)(*args)
    if result != 0:
        code = __import__("ctypes").get_errno()
        raise OSError(code, f"{name}{args[:2]}: {os.strerror(code)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    def enc(s: str | None) -> bytes | None:
        return None if s is None else s.encode()

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


_seccomp_fprog: tuple[Any, int, Any, Any] | None = None  # built once in the zygote; children only attach it


def _build_seccomp() -> None:
    """Compile the _SECCOMP_DENY filter: deny listed syscalls with EPERM, kill on a foreign ABI."""
    global _seccomp_fprog
    import ctypes
    import struct

    assert _libc is not None

    arch, denied = _SECCOMP_DENY[os.uname().machine]
    ld_abs, jeq, jge, ret = 0x20, 0x15, 0x35, 0x06
    n = len(denied)
    program = [
        (ld_abs, 0, 0, 4),
        (jeq, 1, 0, arch),
        (ret, 0, 0, 0x80000000),
        (ld_abs, 0, 0, 0),
        (jge, n + 1, 0, 0x40000000),
    ]  # x32 syscall numbers: denied
    program += [(jeq, n - i, 0, nr) for i, nr in enumerate(denied)]
    program += [(ret, 0, 0, 0x7FFF0000), (ret, 0, 0, 0x00050000 | 1)]  # allow / errno EPERM
    filters = ctypes.create_string_buffer(b"".join(struct.pack("HBBI", *ins) for ins in program))
    fprog = ctypes.create_string_buffer(struct.pack("HxxxxxxQ", len(program), ctypes.addressof(filters)))
    prctl = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, use_errno=True)(
        ("prctl", _libc)
    )
    _seccomp_fprog = (prctl, ctypes.addressof(fprog), fprog, filters)  # the buffers must stay alive


def install_seccomp() -> None:
    """Attach the filter to this process (needs no_new_privs first)."""
    if _seccomp_fprog is None:
        _build_seccomp()
    assert _seccomp_fprog is not None
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
    # Everything about the sources is read before the jail's tmpfs covers _JAIL: a source may live
    # under it (a checkout or venv in the temp directory), and is then reachable only by its handle.
    links = {p: os.readlink(p) for p in sources if os.path.islink(p)}
    handles = {p: os.open(p, os.O_PATH) for p in sources if p not in links}
    is_dir = {p: os.path.isdir(p) for p in handles}
    _mount("tmpfs", _JAIL, "tmpfs", _MS_NOSUID | _MS_NODEV, "size=8m,mode=0755")
    for path in sources:
        target = _JAIL + path
        os.makedirs(os.path.dirname(target), mode=0o755, exist_ok=True)
        if path in links:
            os.symlink(links[path], target)
            continue
        if is_dir[path]:
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
    assert _libc is not None  # a mount namespace: libc was loaded
    if _libc.syscall(_SYS_PIVOT_ROOT[os.uname().machine], b".", b".") != 0:
        raise OSError(__import__("ctypes").get_errno(), "pivot_root failed")
    _libc_call("umount2", b".", _MNT_DETACH)
    os.chdir("/")
    _mount(None, "/", None, _MS_BIND | _MS_REMOUNT | _MS_RDONLY | _MS_NOSUID | _MS_NODEV)
    return "/sbx"


def _enter_user_namespace(namespaces: int) -> bool:
    """unshare a user namespace with `namespaces` (which it owns); this process keeps its own uid and
    gid inside (an identity map of that one id, the only map an ordinary user may write), so a child
    that drops its capabilities is the invoking user again, and nobody's root even inside."""
    uid, gid = os.geteuid(), os.getegid()
    assert _libc is not None
    if _libc.unshare(_CLONE_NEWUSER | namespaces) != 0:
        return False
    for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{name}", "w") as handle:
            handle.write(text)
    return True


def _drop_capabilities() -> None:
    """capset(all zero): a child that is uid 0 of a user namespace keeps no capabilities in it."""
    import ctypes

    header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (ctypes.c_uint32 * 6)()
    assert _libc is not None
    if _libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def isolate_zygote(config: dict) -> tuple[dict, str, int | None]:
    """Enter namespaces and the jail; returns (capabilities, work root, uid for children)."""
    caps: dict[str, bool | str] = {
        "net_namespace": False,
        "mount_namespace": False,
        "fs_jail": False,
        "uid_drop": False,
        "ipc_namespace": False,
        "seccomp": False,
        "root": os.geteuid() == 0,
    }
    skip = set(config.get("skip") or ())  # layers left off on purpose (tests: a machine without them)
    try:
        _load_libc()
    except OSError as error:
        caps["error"] = f"no libc: {error}"
    flags = {"mount_namespace": _CLONE_NEWNS, "net_namespace": _CLONE_NEWNET, "ipc_namespace": _CLONE_NEWIPC}
    wanted = [layer for layer in flags if layer not in skip]
    namespaces = sum(flags[layer] for layer in wanted)
    if _libc is not None and caps["root"] and wanted:
        if _libc.unshare(namespaces) == 0:
            caps.update(dict.fromkeys(wanted, True))
        elif "net_namespace" in wanted and _libc.unshare(_CLONE_NEWNET) == 0:
            caps["net_namespace"] = True
    # an ordinary user (or root without CAP_SYS_ADMIN): a user namespace owns the others; this process
    # holds every capability inside it, over nothing but its own namespaces
    if _libc is not None and wanted and not any(caps[layer] for layer in wanted) and _enter_user_namespace(namespaces):
        caps.update(dict.fromkeys(wanted, True))
        caps["user_namespace"] = True
    workroot = None
    if caps["mount_namespace"] and "fs_jail" not in skip:
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
    if caps["root"] and uid is not None and "uid_drop" not in skip:

        def drop_uid() -> None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)

        caps["uid_drop"] = _probe_in_child(drop_uid)
    if _libc is not None and "seccomp" not in skip:
        if os.uname().machine in _SECCOMP_DENY:
            _build_seccomp()

        def attach_seccomp() -> None:
            _libc_call("prctl", _PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            install_seccomp()

        caps["seccomp"] = os.uname().machine in _SECCOMP_DENY and _probe_in_child(attach_seccomp)
    if _libc is not None:  # nothing (a child of the same uid, in a user namespace) may attach to the zygote
        _libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    caps["mode"] = (
        "user_namespace"
        if caps.get("user_namespace")
        else ("root" if any(caps[layer] for layer in flags) else "no_namespaces")
    )
    return caps, workroot, uid if caps["uid_drop"] else None


def lock_down(request: dict, caps: dict, uid: int | None, write_fd: int, devnull: int, workdir: str) -> None:
    os.setpgid(0, 0)  # own process group, killed after the check (setsid would cost ~1 ms: a new autogroup)
    if caps.get("ipc_namespace") and not caps.get("seccomp"):  # else IPC syscalls are denied outright
        _libc_call("unshare", _CLONE_NEWIPC)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.dup2(write_fd, 3)
    os.closerange(4, 1 << 16)  # the zygote's protocol pipes and everything else
    # No RLIMIT_CPU: arming it costs ~0.5 ms per check, and its whole-second granularity is too coarse;
    # the zygote reads this child's CPU clock instead (zygote._collect) and kills it at the CPU limit.
    memory = int(request["memory_mb"]) << 20
    file_bytes = int(request["file_mb"]) << 20
    for limit, value in (
        (resource.RLIMIT_AS, (memory, memory)),
        (resource.RLIMIT_FSIZE, (file_bytes, file_bytes)),
        (resource.RLIMIT_NOFILE, (64, 64)),
        (resource.RLIMIT_NPROC, (0, 0)),
        (resource.RLIMIT_CORE, (0, 0)),
        (resource.RLIMIT_MSGQUEUE, (0, 0)),
    ):
        resource.setrlimit(limit, value)
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
    if _libc is not None:
        for option, setting in ((_PR_SET_NO_NEW_PRIVS, 1), (_PR_SET_DUMPABLE, 0), (_PR_SET_PDEATHSIG, 9)):
            _libc_call("prctl", option, setting, 0, 0, 0)
        if caps.get("seccomp"):
            install_seccomp()
        if caps.get("user_namespace"):
            _drop_capabilities()
    os.chdir(workdir)  # environment, stdin and SIGXFSZ were set up once in the zygote
