"""Stage verify: run every proposed program in the sandbox; mark it valid (with gold outputs) or say why not.

    python -m stages.verify --proposals results/population/gen000/proposals.jsonl \
        --out results/population/gen000/tasks.jsonl [--params params.yaml] [--isolation isolation.json]

Input rows: {"task_id", "type", "program", "inputs", "message", ...}; output rows: the same fields plus
"valid", "reason" (see populora.verifier.VERIFY_REASONS), "outputs" (repr per input) and "reason_detail".
One output row per input line, in order; a line that is not a JSON object becomes {"row": ...,
"valid": false, "reason": "malformed_row"}. The sandbox is configured by the `verify` section of
--params (without it: that section's defaults, which are params.yaml's); --timeout (CPU seconds per
program; the wall-clock backstop is verify.wall_timeout_s), --memory-mb, --max-output-chars and
--workers override single keys of it. The DAG also passes --arm/--gen/--log. With
`propose.reject_copyable` (or --reject-copyable) a valid code_o/code_i task whose output equals an
argument of its input becomes invalid with reason `copyable` (populora.tasks.tasks.mark_copyable).
With --heldout POOL (the held-out pool, stages.heldout_pool) a valid task whose program is a pool
program becomes invalid with reason `heldout` (populora.heldout.pool.mark_heldout): no pool task
is ever solved or trained on.

Isolation: the log names every sandbox layer, whether it is on, how the sandbox got them (as root,
in a user namespace, or neither) and which are required. With a layer of verify.required_layers off,
no program runs: the stage logs the missing layers with their fixes and exits with code 3; a layer
off that is not required is logged as a warning. The default requirement (every layer but
uid_drop) is met by an ordinary user where unprivileged user namespaces are allowed, and refused
on a node without them (no file-system jail, no network namespace). --isolation PATH writes
{"layers": {layer: bool}, "required": [layer, ...], "mode": "root" | "user_namespace" | "no_namespaces"}.
Snakemake declares this stage (and grade, init) with threads = verify.workers where the model runs on a
GPU, and 1 where it runs on the CPU (workflow/dag.py `Stage.thread_count`: there a ready job that needs
more cores than are free waits behind 1-thread model jobs; the sandbox's zygotes run for seconds).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

from populora.config import load_params
from populora.core.io import read_jsonl, write_json, write_jsonl
from populora.heldout.pool import mark_heldout
from populora.tasks.tasks import CODE_F_INPUTS, mark_copyable
from populora.verifier import isolation_report, verify_rows
from stages._common import declared
from stages._sandbox import REFUSED, add_common_args, progress_bar, read_rows, setup, start_sandbox


def code_f_inputs_of(args: argparse.Namespace) -> int:
    """How many inputs a code_f proposal must carry: --code-f-inputs, else params'
    `propose.code_f_inputs`, else the default (10)."""
    if args.code_f_inputs is not None:
        return args.code_f_inputs
    return declared(load_params(args.params), "verify").propose.code_f_inputs if args.params else CODE_F_INPUTS


def reject_copyable_of(args: argparse.Namespace) -> bool:
    """Whether copyable code_o/code_i tasks become invalid: --reject-copyable, else params'
    `propose.reject_copyable`, else no (AZR)."""
    if args.reject_copyable:
        return True
    return declared(load_params(args.params), "verify").propose.reject_copyable if args.params else False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", required=True, help="input JSONL of proposals")
    parser.add_argument(
        "--isolation", default=None, help='also write {"layers": {...}, "required": [...], "mode": ...} here'
    )
    parser.add_argument(
        "--code-f-inputs",
        type=int,
        default=None,
        help="inputs a code_f row must carry (default: params' propose.code_f_inputs, else 10)",
    )
    parser.add_argument(
        "--reject-copyable",
        action="store_true",
        help="mark code_o/code_i tasks whose output is an argument of the input invalid "
        "(reason copyable; default: params' propose.reject_copyable)",
    )
    parser.add_argument(
        "--heldout",
        default=None,
        help="the held-out pool (JSONL): tasks with one of its programs become invalid (reason heldout)",
    )
    add_common_args(parser)
    args = parser.parse_args(argv)
    config, log = setup(args, "verify")
    rows = read_rows(args.proposals)
    box = start_sandbox(config, log)
    if box is None:
        return REFUSED
    with box:
        if args.isolation:
            write_json(args.isolation, isolation_report(box, config))
        start = time.perf_counter()
        bar, update = progress_bar(len(rows), "verify", "proposals")
        with bar:
            out = verify_rows(rows, config, sandbox=box, progress=update, code_f_inputs=code_f_inputs_of(args))
        if reject_copyable_of(args):
            out = mark_copyable(out)
        if args.heldout:
            out = mark_heldout(out, read_jsonl(args.heldout))
        elapsed = time.perf_counter() - start
    write_jsonl(args.out, out)
    valid = sum(row["valid"] for row in out)
    reasons = Counter(row["reason"] for row in out if not row["valid"])
    log.info(
        "%d proposals, %d valid (%.0f%%) in %.1f s (%.0f rows/s); invalid: %s",
        len(out),
        valid,
        100 * valid / max(1, len(out)),
        elapsed,
        len(out) / max(elapsed, 1e-9),
        dict(reasons.most_common()),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
