"""A real full disk (issue 50): stages write onto a small size-limited tmpfs that is full; the stage
fails with the file it was writing named in its error, leaves nothing half-written, and the same
command completes once space is freed, with the bytes of a run on a roomy disk.

    .venv/bin/python -m pytest tests/test_full_disk.py -m "" -q     (slow: -m "" selects it)

Two stages: `verify` (a JSONL artifact, through the atomic writer) and `update_gather` (a staged
folder whose adapters are copied in, since its update parts lie on another file system, so the copy
of an adapter's weights is what runs out of space). Mounting needs root (or CAP_SYS_ADMIN): where
`mount -t tmpfs` is refused, the tests skip with mount's message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO
from tests.seed_tasks import seed_rows

pytestmark = pytest.mark.slow  # stage subprocesses and sandboxes: CI's full lane, not the fast one
DISK_KB = 256


@pytest.fixture
def disk(tmp_path):
    """A DISK_KB tmpfs, mounted for the test and unmounted after it."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={DISK_KB}k,mode=0755", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root or CAP_SYS_ADMIN): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], capture_output=True)


def fill(disk: Path, leave: int = 0) -> Path:
    """Fill the disk with one file, up to the last byte or to `leave` bytes free; removing it frees the space."""
    filler = disk / "filler"
    with open(filler, "wb") as handle:
        try:
            while os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize > leave:
                handle.write(b"\0" * 4096)
                handle.flush()
        except OSError:
            pass
    return filler


def stage(module: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )


def entries(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*"))


def test_verify_on_a_full_disk_names_its_file_and_the_rerun_completes(disk, tmp_path):
    proposals = tmp_path / "proposals.jsonl"
    proposals.write_text("".join(json.dumps(row) + "\n" for row in seed_rows() * 20))
    roomy = stage("stages.verify", "--proposals", str(proposals), "--out", str(tmp_path / "tasks.jsonl"))
    assert roomy.returncode == 0, roomy.stderr[-2000:]
    out, log = disk / "tasks.jsonl", tmp_path / "verify.log"
    command = ("--proposals", str(proposals), "--out", str(out), "--log", str(log))
    filler = fill(disk)
    full = stage("stages.verify", *command)
    assert full.returncode != 0
    assert f"No space left on device: '{out}'" in full.stderr and f"'{out}'" in log.read_text()
    assert entries(disk) == ["filler"]  # no temp file left behind
    filler.unlink()
    again = stage("stages.verify", *command)
    assert again.returncode == 0, again.stderr[-2000:]
    assert entries(disk) == ["tasks.jsonl"] and out.read_bytes() == (tmp_path / "tasks.jsonl").read_bytes()


def test_update_gather_on_a_full_disk_names_its_file_and_the_rerun_completes(disk, tmp_path, tiny_params_dict):
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(tiny_params_dict))
    parts = tmp_path / "update"  # four update jobs of one adapter each (the default dag.update_jobs), on the roomy disk
    for part, slot in enumerate(["teacher0", "teacher1", "student0", "student1"]):
        adapter = parts / str(part) / "adapters" / slot
        adapter.mkdir(parents=True)
        (adapter / "adapter_config.json").write_text(json.dumps({"r": 4}))
        (adapter / "adapter_model.safetensors").write_bytes(os.urandom(40_000))
        (parts / str(part) / "update_stats.json").write_text(json.dumps({slot: {"steps": 1}}))

    def gather(out: Path, log: Path | None = None):
        return stage(
            "stages.update_gather",
            "--params",
            str(params),
            "--arm",
            "population",
            "--gen",
            "0",
            "--parts",
            str(parts),
            "--trained",
            str(out),
            *(("--log", str(log)) if log else ()),
        )

    roomy = gather(tmp_path / "trained")
    assert roomy.returncode == 0, roomy.stderr[-2000:]
    out = disk / "trained"
    filler = fill(disk, leave=60_000)  # room for one adapter, not for all four
    full = gather(out, tmp_path / "gather.log")
    assert full.returncode != 0
    named = [line for line in full.stderr.splitlines() if "No space left on device" in line]
    assert named and "adapter_model.safetensors'" in named[-1] and str(disk) in named[-1], full.stderr[-2000:]
    assert "No space left on device" in (tmp_path / "gather.log").read_text()
    assert entries(disk) == ["filler"]  # the staging folder went with the failed stage
    filler.unlink()
    again = gather(out)
    assert again.returncode == 0, again.stderr[-2000:]
    files = lambda root: {p: (root / p).read_bytes() for p in entries(root) if (root / p).is_file()}  # noqa: E731
    assert files(out) == files(tmp_path / "trained") and entries(disk) == [
        "trained",
        *(f"trained/{p}" for p in entries(out)),
    ]
