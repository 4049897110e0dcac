"""Stage update: one update job of an arm and generation: LoRA-only REINFORCE of each of its adapters on its own rollouts.

    python -m stages.update --params params.yaml --arm population --gen 0 --part 0 --base-model results/base_model \
        --state results/population/init --rollouts results/population/gen000/rollouts.jsonl \
        --trained results/population/gen000/update/0

Job `--part k` of the `dag.update_jobs` (J) jobs of an arm and generation trains the arm's adapters
k, k+J, k+2J, ... (teachers, then students; `populora.core.topology.update_part_slots`): one adapter
per job when J is at least the arm's size, so N GPUs train N adapters at once; the results do not
depend on J (`populora.rl.update_job`). It writes, per adapter, adapters/<slot>/,
optimizer/<slot>.safetensors and its entry of update_stats.json; `stages.update_gather` links the
parts into the generation's trained/ folder. A job left without an adapter (the baseline has one)
writes an empty part at once, before torch is imported or a GPU claimed. The base model's weights
are frozen; each adapter is trained on its own forward passes (PEFT refuses mixed-adapter batches in
training mode). With `update.processes: N > 1` this stage re-launches itself through `accelerate
launch` with N processes (one GPU each, claimed together), whose gradients are summed before each
optimizer step (`populora.rl.update.reinforce_steps`; tests/test_update_jobs.py runs 2 CPU
processes).
"""

from __future__ import annotations

import os
import socket
import sys

from populora.core.io import replace_dir, staging_dir, write_json
from populora.core.state import UPDATE_STATS
from populora.core.topology import update_part_slots, update_side_by_side
from populora.lm.gpus import claim_gpu, keep_gpu_claims_across_exec
from populora.rl.update_job import train_job
from stages._common import require_device, setup, stage_parser

LAUNCHED = "LOCAL_RANK"  # set by torchrun / accelerate launch in each process it starts


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def relaunch(argv: list[str], processes: int, mixed_precision: str) -> None:
    """Replace this process by `accelerate launch` running this stage in `processes` processes
    (same arguments; a free port each time, so concurrent jobs on one node do not collide)."""
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--multi_gpu",
        "--num_processes",
        str(processes),
        "--num_machines",
        "1",
        "--mixed_precision",
        mixed_precision,
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(_free_port()),
        "-m",
        "stages.update",
        *argv,
    ]
    keep_gpu_claims_across_exec()  # the device locks live on in the launcher
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, command)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = stage_parser(__doc__.splitlines()[0])
    parser.add_argument("--part", required=True, type=int, help="which of the dag.update_jobs jobs this is (0-based)")
    for flag in ("--base-model", "--state", "--rollouts", "--trained"):
        parser.add_argument(flag, required=True)
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0"))
    if rank:
        args.log = None  # the first process writes the log file; the others log to stderr
    params, log = setup(
        args, "update", claim=False, chain=True, side_by_side=lambda params: update_side_by_side(params, args.arm)
    )
    if not 0 <= args.part < params.dag.update_jobs:
        log.error(
            "--part %d is not one of the dag.update_jobs = %d jobs (0 to %d). Fix: re-render dvc.yaml "
            "(python -m workflow.render_dvc) after changing dag.update_jobs",
            args.part,
            params.dag.update_jobs,
            params.dag.update_jobs - 1,
        )
        return 2
    slots = update_part_slots(params, args.arm, args.part)
    if not slots:
        tmp = staging_dir(args.trained)
        write_json(tmp / UPDATE_STATS, {})
        replace_dir(tmp, args.trained)
        log.info(
            "update job %d of %d: %s has no adapter for it; empty part written",
            args.part,
            params.dag.update_jobs,
            args.arm,
        )
        return 0
    processes = params.update.processes
    if processes > 1 and LAUNCHED not in os.environ:
        if args.claim_gpu:
            claim_gpu(log, count=processes)  # the N devices of this job, before the processes start
            require_device(params, log, "update")
        log.info("launching %d processes for %s", processes, ", ".join(slots))
        relaunch(argv, processes, params.update.mixed_precision or "no")
    if args.claim_gpu:
        claim_gpu(log)
        require_device(params, log, "update")  # model.device: cuda with no CUDA here stops before the base loads
    train_job(
        params,
        arm=args.arm,
        gen=args.gen,
        part=args.part,
        slots=slots,
        base_model=args.base_model,
        state=args.state,
        rollouts_file=args.rollouts,
        trained=args.trained,
        log=log,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
