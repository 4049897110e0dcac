"""Share a node's GPUs out among the jobs that run on it: `claim_gpu` gives a GPU job devices nobody
else holds (an exclusive flock per device, kept until the process exits) and exports them as
CUDA_VISIBLE_DEVICES before torch touches CUDA. Snakemake's `--resources gpu=N` bounds how many GPU
jobs run at once; this decides which devices each gets. The stages call it through
`stages._common.setup` (`--claim-gpu`, passed by workflow/dag.py to the stages it declares with a
gpu) and `stages.update` (a multi-process job claims its N devices together). Beside it,
`populora.lm.device` checks that the devices claimed can run what the params ask for.
Tests: tests/test_gpu_slots.py.
"""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

_CLAIMED: list = []  # open lock files: a device stays ours until this process exits


def visible_gpus() -> list[str]:
    """Devices GPU stages may share out: POPULORA_GPUS ("0,1,2,3"), else what nvidia-smi lists."""
    listed = os.environ.get("POPULORA_GPUS")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True, text=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def claim_gpu(log: logging.Logger, *, poll_s: float = 2.0, count: int = 1) -> str | None:
    """Give this GPU job `count` devices of its own: the first devices nobody holds (an exclusive flock
    on <lock dir>/gpu<N>.lock each, kept until the process exits), exported as CUDA_VISIBLE_DEVICES
    before torch touches CUDA. Snakemake's `--resources gpu=N` bounds how many GPU jobs run at once;
    this decides which devices each one gets. The devices to share out: a CUDA_VISIBLE_DEVICES the
    caller set when it lists more than `count` (a SLURM allocation holding the GPUs of a group of
    jobs that run side by side), else POPULORA_GPUS ("0,1,2,3"), else what nvidia-smi lists. A
    CUDA_VISIBLE_DEVICES of at most `count` devices (SLURM's one GPU, a user's choice) is kept as is,
    and so are the devices of a process started by `accelerate launch`/torchrun (LOCAL_RANK set: its
    launcher claimed them). With no GPU it does nothing. Lock dir: POPULORA_GPU_LOCKS, else a per-user
    temp dir (per SLURM job inside one: there device numbers are the job's own)."""
    import fcntl

    given = os.environ.get("CUDA_VISIBLE_DEVICES")
    if "LOCAL_RANK" in os.environ:
        return given
    if given is not None:
        devices = [d.strip() for d in given.split(",") if d.strip()]
        if len(devices) <= count:
            return given
    else:
        devices = visible_gpus()
        if not devices:
            return None
    count = min(count, len(devices))
    default_dir = Path(tempfile.gettempdir()) / "-".join(
        [
            f"populora-gpus-{os.getuid()}",
            *([f"slurm{os.environ['SLURM_JOB_ID']}"] if os.environ.get("SLURM_JOB_ID") else []),
        ]
    )
    lock_dir = Path(os.environ.get("POPULORA_GPU_LOCKS") or default_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        held: list[tuple[str, io.TextIOWrapper]] = []
        for device in devices:
            handle = open(lock_dir / f"gpu{device}.lock", "a")  # held open on purpose
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.close()
                continue
            held.append((device, handle))
            if len(held) == count:
                break
        if len(held) == count:
            _CLAIMED.extend(handle for _, handle in held)
            claimed = ",".join(device for device, _ in held)
            os.environ["CUDA_VISIBLE_DEVICES"] = claimed
            log.info("running on GPU %s (CUDA_VISIBLE_DEVICES=%s)", claimed, claimed)
            return claimed
        for _, handle in held:  # not enough free: release the partial claim, wait, try again
            handle.close()
        if not waited:
            log.info("fewer than %d of the %d GPUs are free; waiting", count, len(devices))
            waited = True
        time.sleep(poll_s)


def keep_gpu_claims_across_exec() -> None:
    """Let the device locks this process holds survive an `os.exec*` (exec closes non-inheritable
    files): a stage that replaces itself by a launcher (`accelerate launch`) keeps its devices."""
    for handle in _CLAIMED:
        os.set_inheritable(handle.fileno(), True)
