"""Shared plumbing for stage command lines: arguments, params, logging, GPU claims.

Every stage is `python -m stages.<name> --params params.yaml [--arm A --gen G] --<input> PATH ...
--<output> PATH --log PATH`, each flag named after what it holds (`--proposals`, `--trained`);
paths always arrive as arguments (see workflow/dag.py).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

from populora.config import Params, ParamsError, load_params


def stage_parser(description: str, *, arm: bool = True, gen: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default="params.yaml", help="validated params file")
    if arm:
        parser.add_argument("--arm", required=True, choices=["population", "baseline"], help="experiment arm")
    if gen:
        parser.add_argument("--gen", required=True, type=int, help="generation number (0-based)")
    parser.add_argument("--log", default=None, help="also write this stage's log here")
    parser.add_argument("--claim-gpu", action="store_true",
                        help="claim a free GPU before any model loads (workflow/dag.py passes it to the stages it "
                        "declares with a gpu; see claim_gpu)")
    return parser


def configure_logging(args: argparse.Namespace, stage: str) -> logging.Logger:
    """The stage's logger: stderr plus the --log file, lines tagged with the stage (and arm, gen);
    an uncaught exception's traceback goes through it too."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if args.log:
        Path(args.log).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(args.log, mode="w"))
    where = " ".join(f"{k}={getattr(args, k)}" for k in ("arm", "gen") if getattr(args, k, None) is not None)
    logging.basicConfig(
        level=logging.INFO, handlers=handlers, force=True,
        format=f"%(asctime)s {stage}{' ' + where if where else ''} %(levelname)s %(message)s",
    )
    _log_uncaught(logging.getLogger(stage))
    return logging.getLogger(stage)


def setup(args: argparse.Namespace, stage: str, *, claim: bool = True) -> tuple[Params, logging.Logger]:
    """Configure logging (stderr + --log file), claim a GPU when the DAG says so (`--claim-gpu`; unless
    `claim` is false: the stage claims its own, see stages/update.py), load params and check that the
    device they ask for is here (`require_device`), failing fast with a clear message."""
    configure_logging(args, stage)
    if getattr(args, "claim_gpu", False) and claim:
        claim_gpu(logging.getLogger(stage))
    try:
        params = load_params(args.params)
    except ParamsError as error:
        logging.getLogger(stage).error("%s", error)
        raise SystemExit(2) from None
    if getattr(args, "claim_gpu", False) and claim:
        require_device(params, logging.getLogger(stage), stage)
    return params, logging.getLogger(stage)


def require_device(params: Params, log: logging.Logger, stage: str) -> None:
    """Stop (exit code 2) before any model loads when `model.device: cuda` finds no CUDA here, or the
    vLLM engine of a sampling stage is not vLLM's CUDA build (`populora.lm.device`). Call it after
    `claim_gpu`: torch must not touch CUDA before CUDA_VISIBLE_DEVICES names the job's devices."""
    from populora.lm.device import DeviceError, check_device

    try:
        check_device(params, samples=stage in ("propose", "solve", "bench"))
    except DeviceError as error:
        log.error("%s", error)
        raise SystemExit(2) from None


def _log_uncaught(log: logging.Logger) -> None:
    """Send an uncaught exception's traceback through the stage's logger, so it lands in the
    --log file as well as on stderr (Snakemake and DVC keep only the log file per job)."""

    def hook(kind, error, traceback):
        if issubclass(kind, KeyboardInterrupt):
            sys.__excepthook__(kind, error, traceback)
            return
        log.critical("stage failed with an uncaught %s", kind.__name__, exc_info=(kind, error, traceback))
        for handler in log.root.handlers:
            handler.flush()

    sys.excepthook = hook


_CLAIMED: list = []  # open lock files: a device stays ours until this process exits


def visible_gpus() -> list[str]:
    """Devices GPU stages may share out: POPULORA_GPUS ("0,1,2,3"), else what nvidia-smi lists."""
    listed = os.environ.get("POPULORA_GPUS")
    if listed is not None:
        return [d.strip() for d in listed.split(",") if d.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=index", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout
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
        [f"populora-gpus-{os.getuid()}", *([f"slurm{os.environ['SLURM_JOB_ID']}"] if os.environ.get("SLURM_JOB_ID") else [])])
    lock_dir = Path(os.environ.get("POPULORA_GPU_LOCKS") or default_dir)
    lock_dir.mkdir(parents=True, exist_ok=True)
    waited = False
    while True:
        held: list[tuple[str, object]] = []
        for device in devices:
            handle = open(lock_dir / f"gpu{device}.lock", "a")  # noqa: SIM115  (held open on purpose)
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


@contextmanager
def timed(log: logging.Logger, what: str):
    start = time.perf_counter()
    yield
    log.info("%s took %.1f s", what, time.perf_counter() - start)

