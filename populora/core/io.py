"""Artifact I/O: atomic JSON/JSONL writes (temp file + rename), sorted keys, no pickles.

Every stage writes through these helpers, so an interrupted stage never leaves a half-written
artifact behind and Snakemake/DVC never mistake a partial file for a finished one:

* a file is written to a hidden temp file beside it, fsynced, then renamed over the target; on
  any error (a full disk included) the temp file is removed and the error propagates;
* a folder is filled in a hidden staging folder (`staging_dir`) and moved into place by
  `replace_dir`; staging folders a failed stage leaves behind are removed when the process
  exits, and those a killed stage (SIGKILL, power loss) left behind are removed by the next
  run of the same stage, so a rerun ends with exactly the artifacts of an uninterrupted run;
* a write that fails (a full disk) raises OSError naming the file it was writing (`naming`),
  where the OS and safetensors name none;
* artifacts get the permissions the umask gives (files 0o666 & ~umask, folders 0o777 & ~umask),
  not the owner-only modes of `mkstemp`/`mkdtemp`.

Readers fail with `ArtifactError`, naming the file and the fix, on truncated or corrupted JSON,
JSONL or safetensors files.

Fault injection (tests only; nothing happens unless the variable is set): every write passes
numbered *write points* (`write_point`): a temp file created, written and fsynced, renamed into
place; a staging folder created, filled (adapter weights, optimizer moments, links), moved into
place. With `POPULORA_KILL_AT=<stage>:<n>[:<word>]` the process of stage `<stage>` (`python -m
stages.<stage>`, the module's name), whose command line holds `<word>` when given, SIGKILLs itself at
its n-th write point (or, when `<n>` is a point's name such as `folder moved into place`, at the first
point of that name: a resumed bench job passes fewer points): a kill at a chosen moment of its writes,
reproducibly (tests/test_kill_stages.py).
`POPULORA_WRITE_LOG=<file>` appends one JSON line per write point passed (stage, n, point, path,
pid, command line, and `"kill": true` for the one that killed), so a test can list a stage's points
from a clean run.
"""

from __future__ import annotations

import atexit
import errno
import json
import os
import re
import shutil
import signal
import struct
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

KILL_ENV = "POPULORA_KILL_AT"  # <stage>:<n or point name>[:<word>]: SIGKILL there (see the docstring)
WRITE_LOG_ENV = "POPULORA_WRITE_LOG"  # a file: one JSON line per write point passed
_points = {"n": 0}


def _stage_name() -> str:
    """The running stage's module name (`python -m stages.update` -> `update`), else the script's."""
    return Path(sys.argv[0]).stem if sys.argv and sys.argv[0] else "?"


def write_point(point: str, path: str | Path) -> None:
    """A moment in a write where a test may kill this process (no-op unless KILL_ENV or WRITE_LOG_ENV is set)."""
    spec, log = os.environ.get(KILL_ENV), os.environ.get(WRITE_LOG_ENV)
    if not (spec or log):
        return
    _points["n"] += 1
    stage, n = _stage_name(), _points["n"]
    kill = False
    if spec:
        name, _, rest = spec.partition(":")
        at, _, word = rest.partition(":")
        here = int(at) == n if at.isdigit() else at == point  # the n-th point, or the first of that name
        kill = name == stage and here and (not word or word in " ".join(sys.argv))
    if log:
        entry = {
            "stage": stage,
            "n": n,
            "point": point,
            "path": str(path),
            "pid": os.getpid(),
            "kill": kill,
            "command": " ".join(sys.argv[1:]),
        }
        with open(log, "a", encoding="utf-8") as handle:  # O_APPEND: one line per write, whole
            handle.write(json.dumps(entry, sort_keys=True) + "\n")
    if kill:
        os.kill(os.getpid(), signal.SIGKILL)


FIX = "delete it and rerun the stage that writes it (snakemake reruns it by itself; dvc: dvc repro -f STAGE)"


class ArtifactError(RuntimeError):
    """An artifact is missing, truncated or corrupted; the message names the file and the fix."""


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def file_mode() -> int:
    return 0o666 & ~_umask()


def dir_mode() -> int:
    return 0o777 & ~_umask()


def apply_umask(root: str | Path) -> None:
    """Give `root` (a file, or a folder and everything in it) the modes the umask gives."""
    root = Path(root)
    fmode, dmode = file_mode(), dir_mode()
    if root.is_file():
        os.chmod(root, fmode)
        return
    os.chmod(root, dmode)
    for parent, dirs, files in os.walk(root):
        for name in dirs:
            os.chmod(os.path.join(parent, name), dmode)
        for name in files:
            path = os.path.join(parent, name)
            if not os.path.islink(path):
                os.chmod(path, fmode | (os.stat(path).st_mode & 0o111 & ~_umask()))


def _remove_stale(parent: Path, name: str) -> None:
    """Remove the temp files/staging folders of `name` a killed earlier run left in `parent`
    (`.NAME.XXXXXXXX.tmp` / `.NAME.XXXXXXXX.staging`, as made by tempfile below)."""
    if not parent.is_dir():
        return
    pattern = re.compile(rf"\.{re.escape(name)}\.[a-z0-9_]{{8}}\.(tmp|staging)")
    for stale in parent.iterdir():
        if pattern.fullmatch(stale.name):
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale, ignore_errors=True)
            else:
                stale.unlink(missing_ok=True)


@contextmanager
def naming(path: str | Path) -> Iterator[None]:
    """Re-raise an OSError that names no file (a write's ENOSPC, EIO: the OS leaves the file out) or
    safetensors' I/O error as OSError(errno, message, path): a failed stage then says which file."""
    try:
        yield
    except OSError as error:
        if error.filename is not None or error.errno is None:
            raise
        raise OSError(error.errno, error.strerror or str(error), str(path)) from error
    except Exception as error:
        if type(error).__name__ != "SafetensorError" or "I/O error" not in str(error):
            raise
        code = errno.ENOSPC if "os error 28" in str(error) else errno.EIO
        raise OSError(code, str(error), str(path)) from error


def _atomic_write(path: Path, fill) -> None:
    """`fill(handle)` writes the content into a binary temp file beside `path`, which is then renamed over it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path.parent, path.name)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        write_point("temp file created", path)
        with naming(path), os.fdopen(fd, "wb") as handle:
            fill(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, file_mode())
        write_point("temp file written", path)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    write_point("renamed into place", path)


def _atomic_write_text(path: Path, text: str) -> None:
    _atomic_write(path, lambda handle: handle.write(text.encode("utf-8")))


def write_figure(path: str | Path, fig, dpi: int = 110) -> None:
    """Save a matplotlib figure atomically, in the format its suffix names (`.png`)."""
    path = Path(path)
    _atomic_write(path, lambda handle: fig.savefig(handle, format=path.suffix.lstrip(".") or "png", dpi=dpi))


def write_text(path: str | Path, text: str) -> None:
    """Write a text file atomically (temp file + rename)."""
    _atomic_write_text(Path(path), text)


def write_json(path: str | Path, obj: Any) -> None:
    """Write `obj` as pretty JSON with sorted keys, atomically."""
    _atomic_write_text(Path(path), json.dumps(obj, indent=2, sort_keys=True, allow_nan=False) + "\n")


def read_json(path: str | Path) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ArtifactError(f"{path} is truncated or corrupted (not valid JSON: {error}). Fix: {FIX}.") from error


def _jsonl_line(row: dict) -> str:
    line = json.dumps(row, sort_keys=True, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (garbage text) has no UTF-8: JSON's \uXXXX escapes round-trip it
        line = json.dumps(row, sort_keys=True, ensure_ascii=True)
    return line + "\n"


def write_jsonl(path: str | Path, rows: Iterable[dict]) -> None:
    """Write one JSON object per line (sorted keys), atomically. Text is written as UTF-8 as it is;
    a row holding a lone surrogate (which has no UTF-8) is written with JSON escapes instead."""
    rows = list(rows)
    text = "".join(json.dumps(row, sort_keys=True, ensure_ascii=False) + "\n" for row in rows)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        text = "".join(_jsonl_line(row) for row in rows)
    _atomic_write_text(Path(path), text)


def iter_jsonl(path: str | Path) -> Iterator[dict]:
    with open(path, encoding="utf-8") as handle:
        for line_number, line in enumerate(handle, start=1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as error:
                    raise ArtifactError(
                        f"{path}:{line_number}: not valid JSON ({error}); the file is truncated or corrupted. Fix: {FIX}."
                    ) from error


def read_jsonl(path: str | Path) -> list[dict]:
    return list(iter_jsonl(path))


def check_safetensors(path: str | Path) -> Path:
    """Check that a .safetensors file is whole (header parses, data as long as the header says);
    raise ArtifactError naming the file and the fix otherwise. Cheap: reads the header only."""
    path = Path(path)
    if not path.is_file():
        raise ArtifactError(f"{path} is missing. Fix: rerun the stage that writes its folder.")
    size = path.stat().st_size
    try:
        with open(path, "rb") as handle:
            (header_len,) = struct.unpack("<Q", handle.read(8))
            if header_len > size - 8:
                raise ValueError(f"header of {header_len} bytes in a {size}-byte file")
            header = json.loads(handle.read(header_len))
        end = max((entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"), default=0)
        if 8 + header_len + end != size:
            raise ValueError(f"{size} bytes on disk, the header describes {8 + header_len + end}")
    except (struct.error, ValueError, KeyError, TypeError, IndexError, UnicodeDecodeError) as error:
        raise ArtifactError(f"{path} is truncated or corrupted ({error}). Fix: {FIX}.") from error
    return path


def load_safetensors(path: str | Path):
    """`safetensors.torch.load_file`, failing with ArtifactError (file + fix) on a damaged file."""
    from safetensors.torch import load_file

    check_safetensors(path)
    try:
        return load_file(str(path))
    except Exception as error:  # safetensors raises its own SafetensorError
        raise ArtifactError(f"{path} is corrupted ({error}). Fix: {FIX}.") from error


_PENDING: set[Path] = set()  # staging folders not yet moved into place by this process


def replace_dir(tmp: str | Path, dst: str | Path) -> None:
    """Move a finished staging folder into place, replacing any old `dst`."""
    tmp, dst = Path(tmp), Path(dst)
    apply_umask(tmp)
    write_point("staged folder filled", dst)
    if dst.exists():
        shutil.rmtree(dst)
        write_point("old folder removed", dst)
    os.replace(tmp, dst)
    _PENDING.discard(tmp)
    write_point("folder moved into place", dst)


def staging_dir(dst: str | Path) -> Path:
    """A fresh staging folder beside `dst`; fill it, then `replace_dir(tmp, dst)`.

    Staging folders an earlier, killed run left for the same `dst` are removed first; one this
    process does not move into place (the stage failed) is removed when the process exits."""
    dst = Path(dst)
    dst.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(dst.parent, dst.name)
    tmp = Path(tempfile.mkdtemp(dir=dst.parent, prefix=f".{dst.name}.", suffix=".staging"))
    _PENDING.add(tmp)
    write_point("staging folder created", dst)
    return tmp


def discard_pending() -> None:
    """Remove staging folders that were never moved into place (called at exit)."""
    for tmp in list(_PENDING):
        shutil.rmtree(tmp, ignore_errors=True)
        _PENDING.discard(tmp)


atexit.register(discard_pending)


def link_or_copy(src: str | Path, dst: str | Path) -> None:
    """Hard-link `src` to `dst` (same file system: no extra disk), else copy it. Safe because
    artifacts are never modified in place: every write replaces the file (see `_atomic_write_text`)."""
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        with naming(dst):
            shutil.copy2(src, dst)


def link_tree(src: str | Path, dst: str | Path) -> None:
    """`shutil.copytree` with hard links (see `link_or_copy`)."""
    shutil.copytree(src, dst, copy_function=link_or_copy)
    write_point("folder linked", dst)
