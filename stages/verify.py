"""Stage verify: run every proposed program in the sandbox; mark it valid (with gold outputs) or say why not.

    python -m stages.verify --proposals results/population/gen000/proposals.jsonl \
        --out results/population/gen000/tasks.jsonl [--params params.yaml] [--timeout 5] [--workers 2]

Input rows: {"task_id", "type", "program", "inputs", "message", ...}; output rows: the same fields plus
"valid", "reason" (see populora.verifier.VERIFY_REASONS), "outputs" (repr per input) and "reason_detail".
One output row per input line, in order; a line that is not a JSON object becomes {"row": ...,
"valid": false, "reason": "malformed_row"}. Limits come from the flags, else from the `verify`
section of --params, else the library defaults. The DAG also passes --arm/--gen/--log.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections import Counter
from pathlib import Path

from populora.io import write_jsonl
from populora.verifier import verify_rows

LIMIT_FLAGS = {"timeout": "timeout_s", "memory_mb": "memory_mb", "max_output_chars": "max_output_chars",
               "workers": "workers"}


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output JSONL")
    parser.add_argument("--params", default=None, help="params.yaml; its `verify` section sets the defaults")
    parser.add_argument("--arm", default=None, help="experiment arm (logging only)")
    parser.add_argument("--gen", default=None, help="generation (logging only)")
    parser.add_argument("--log", default=None, help="also write the log here")
    parser.add_argument("--timeout", type=float, default=None, help="wall-clock seconds per execution (5)")
    parser.add_argument("--memory-mb", type=int, default=None, help="address-space limit per execution (512)")
    parser.add_argument("--max-output-chars", type=int, default=None, help="longest accepted repr (10000)")
    parser.add_argument("--workers", type=int, default=None, help="sandbox zygote processes, at least 2 (2)")


def setup(args: argparse.Namespace, stage: str) -> tuple[dict, logging.Logger]:
    """Logging to stderr (+ --log) and the sandbox keyword arguments from flags/params."""
    handlers: list[logging.Handler] = [logging.StreamHandler(sys.stderr)]
    if args.log:
        Path(args.log).parent.mkdir(parents=True, exist_ok=True)
        handlers.append(logging.FileHandler(args.log, mode="w"))
    where = " ".join(f"{k}={getattr(args, k)}" for k in ("arm", "gen") if getattr(args, k) is not None)
    logging.basicConfig(level=logging.INFO, handlers=handlers, force=True,
                        format=f"%(asctime)s {stage}{' ' + where if where else ''} %(levelname)s %(message)s")
    kwargs: dict = {}
    if args.params:
        from populora.config import load_params  # only when asked: the contract works without params
        verify = load_params(args.params).verify
        kwargs = {key: getattr(verify, key) for key in LIMIT_FLAGS.values() if hasattr(verify, key)}
    for flag, key in LIMIT_FLAGS.items():
        if getattr(args, flag) is not None:
            kwargs[key] = getattr(args, flag)
    return kwargs, logging.getLogger(stage)


def read_rows(path: str) -> list:
    """Every non-blank line, parsed; a line that is not JSON is kept as its text (-> malformed_row)."""
    rows: list = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError:
                    rows.append(line.rstrip("\n"))
    return rows


def progress_bar(total: int, what: str):
    """A tqdm callback (silent when stderr is not a terminal)."""
    from tqdm import tqdm
    bar = tqdm(total=total, desc=what, unit="row", disable=None, file=sys.stderr)
    return bar, bar.update


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", required=True, help="input JSONL of proposals")
    add_common_args(parser)
    args = parser.parse_args(argv)
    kwargs, log = setup(args, "verify")
    rows = read_rows(args.proposals)
    start = time.perf_counter()
    bar, update = progress_bar(len(rows), "verify")
    with bar:
        out = verify_rows(rows, progress=update, **kwargs)
    elapsed = time.perf_counter() - start
    write_jsonl(args.out, out)
    valid = sum(row["valid"] for row in out)
    reasons = Counter(row["reason"] for row in out if not row["valid"])
    log.info("%d proposals, %d valid (%.0f%%) in %.1f s (%.0f rows/s); invalid: %s", len(out), valid,
             100 * valid / max(1, len(out)), elapsed, len(out) / max(elapsed, 1e-9), dict(reasons.most_common()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
