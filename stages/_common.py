"""Shared plumbing for stage command lines: arguments, params, logging, the GPU claim
(`populora.lm.gpus`) and the device check (`populora.lm.device`).

Every stage is `python -m stages.<name> --params params.yaml [--arm A --gen G] --<input> PATH ...
--<output> PATH --log PATH`, each flag named after what it holds (`--proposals`, `--trained`);
paths always arrive as arguments (see workflow/dag.py).
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import cast

from populora.config import Params, ParamsError, load_params
from populora.core.declared import DeclaredParams, record_reads
from populora.lm.device import pin_cpu_threads
from populora.lm.gpus import claim_gpu


def stage_parser(description: str, *, arm: bool = True, gen: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--params", default="params.yaml", help="validated params file")
    if arm:
        parser.add_argument("--arm", required=True, choices=["population", "baseline"], help="experiment arm")
    if gen:
        parser.add_argument("--gen", required=True, type=int, help="generation number (0-based)")
    parser.add_argument("--log", default=None, help="also write this stage's log here")
    parser.add_argument(
        "--claim-gpu",
        action="store_true",
        help="claim a free GPU before any model loads (workflow/dag.py passes it to the stages it "
        "declares with a gpu; see populora.lm.gpus)",
    )
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
        level=logging.INFO,
        handlers=handlers,
        force=True,
        format=f"%(asctime)s {stage}{' ' + where if where else ''} %(levelname)s %(message)s",
    )
    _log_uncaught(logging.getLogger(stage))
    return logging.getLogger(stage)


def setup(
    args: argparse.Namespace,
    stage: str,
    *,
    claim: bool = True,
    chain: bool = False,
    alone: bool = False,
    side_by_side: Callable[[Params], int] | None = None,
) -> tuple[Params, logging.Logger]:
    """Configure logging (stderr + --log file), claim a GPU when the DAG says so (`--claim-gpu`; unless
    `claim` is false: the stage claims its own, see stages/update.py), load params and check that the
    device they ask for is here (`require_device`), failing fast with a clear message; the params come limited to
    what the stage's DAG entry declares (`declared`; `stage` names the entry). A model stage on
    the CPU gets the threads the DAG gives it under either engine (`pin_cpu_threads`: `chain`, a job of the training
    chain, model.cpu_threads, shared out among the jobs that run `side_by_side`, a function of the params; `alone`,
    every core; else one)."""
    configure_logging(args, stage)
    if getattr(args, "claim_gpu", False) and claim:
        claim_gpu(logging.getLogger(stage))
    try:
        params = declared(load_params(args.params), stage)
    except ParamsError as error:
        logging.getLogger(stage).error("%s", error)
        raise SystemExit(2) from None
    if getattr(args, "claim_gpu", False):
        # how many jobs share the threads: asked only where no engine chose the count (DVC, a stage run by hand)
        threads = pin_cpu_threads(
            params, chain=chain, alone=alone, side_by_side=lambda: side_by_side(params) if side_by_side else 1
        )
        if threads is not None and side_by_side and (shared := side_by_side(params)) > 1:
            logging.getLogger(stage).info(
                "%d of model.cpu_threads = %d threads: Snakemake runs %d such jobs side by side "
                "(dag.update_side_by_side); an engine that runs one stage at a time (DVC) leaves cores idle, "
                "set dag.update_side_by_side: 1 there (the default) or OMP_NUM_THREADS",
                threads,
                params.model.cpu_threads,
                shared,
            )
    if getattr(args, "claim_gpu", False) and claim:
        require_device(params, logging.getLogger(stage), stage)
    return params, logging.getLogger(stage)


def declared(params: Params, stage: str) -> Params:
    """`params` as the DAG stage `stage` may read them: the keys its entry in workflow/dag.py declares, which
    both engines watch (populora.core.declared); a read of any other fails at once, naming the stage and the fix."""
    from workflow.dag import stage_named  # the declaration, not stage code: workflow.dag.NOT_STAGE_CODE

    view = DeclaredParams(params, stage_named(stage).params, stage)
    record_reads(view)  # with $POPULORA_PARAM_READS (a test's pipeline run): which declared keys the stage used
    return cast(Params, view)


def require_device(params: Params, log: logging.Logger, stage: str) -> None:
    """Stop (exit code 2) before any model loads when `model.device: cuda` finds no CUDA here, or the
    vLLM engine of a sampling stage is not vLLM's CUDA build (`populora.lm.device`). Call it after
    `claim_gpu`: torch must not touch CUDA before CUDA_VISIBLE_DEVICES names the job's devices."""
    from populora.lm.device import DeviceError, check_device

    try:
        check_device(params, samples=stage in ("propose", "solve", "bench", "bench_base"))
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


@contextmanager
def timed(log: logging.Logger, what: str):
    start = time.perf_counter()
    yield
    log.info("%s took %.1f s", what, time.perf_counter() - start)
