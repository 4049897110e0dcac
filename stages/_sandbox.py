"""Shared plumbing of the two sandbox stages, verify and grade: their common flags, the `verify`
config section, the sandbox pool, input rows and the progress bar.

Kept apart from stages/_common.py on purpose: DVC's code dependencies follow imports
(workflow.dag.code_deps), and every stage imports _common; only these two stages should depend
on the verifier and the sandbox.
"""

from __future__ import annotations

import argparse
import json
import logging

from populora.config import ParamsError, VerifySection, load_params
from populora.core.progress import Progress
from populora.sandbox import Sandbox
from populora.verifier import IsolationError, open_sandbox, verify_config
from stages._common import configure_logging, declared

REFUSED = 3  # exit code: a layer named in verify.required_layers is off
LIMIT_FLAGS = {
    "timeout": "timeout_s",
    "memory_mb": "memory_mb",
    "max_output_chars": "max_output_chars",
    "workers": "workers",
}


def add_common_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, help="output JSONL")
    parser.add_argument(
        "--params",
        default=None,
        help="params.yaml; its `verify` section configures the sandbox (default: its defaults)",
    )
    parser.add_argument("--arm", default=None, help="experiment arm (logging only)")
    parser.add_argument("--gen", default=None, help="generation (logging only)")
    parser.add_argument("--log", default=None, help="also write the log here")
    for flag, key in LIMIT_FLAGS.items():
        parser.add_argument(
            f"--{flag.replace('_', '-')}",
            type=VerifySection.model_fields[key].annotation,
            default=None,
            help=f"overrides verify.{key}",
        )


def setup(args: argparse.Namespace, stage: str) -> tuple[VerifySection, logging.Logger]:
    """The stage's logger (as every stage's) and the `verify` config section (params, then flag
    overrides); --params is optional here, so this stage runs on its own too."""
    log = configure_logging(args, stage)
    overrides = {key: getattr(args, flag) for flag, key in LIMIT_FLAGS.items() if getattr(args, flag) is not None}
    try:
        config = declared(load_params(args.params), stage).verify if args.params else None
        return verify_config(config, **overrides), log
    except (ParamsError, ValueError) as error:  # a bad params file or override: named, exit 2
        log.error("%s", error)
        raise SystemExit(2) from None


def start_sandbox(config: VerifySection, log: logging.Logger) -> Sandbox | None:
    """The stage's pool, its layers logged; None (the refusal logged) when a required layer is off."""
    try:
        return open_sandbox(config, log)
    except IsolationError as error:
        log.error("%s", error)
        return None


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


def progress_bar(total: int, what: str, unit: str = "rows"):
    """(the loop's progress, its callback): a bar on a terminal, else a log line through the stage's
    logger every 30 s and a final one (`populora.core.progress`)."""
    progress = Progress(total, what, unit=unit, log=logging.getLogger(what))
    return progress, progress.update
