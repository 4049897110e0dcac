"""The live history's plumbing for the generation stages that feed it (checkpoint, heldout): their flags
and the call that records a generation (populora/report/live.py). Apart from _common.py so that only
those stages depend on the live-history code (DVC reruns a stage when a module it imports changes)."""

from __future__ import annotations

import argparse
import logging


def add_live_flags(parser: argparse.ArgumentParser) -> None:
    """The live files a generation stage updates as it finishes (workflow/dag.py `side`; populora/report/live.py)."""
    parser.add_argument("--history", required=True, help="the arm's live history (one row per generation)")
    parser.add_argument("--steps", required=True, help="the arm's optimizer-step table")
    parser.add_argument("--progress", required=True, help="the run's progress.json (last generation per arm)")
    parser.add_argument("--tracking", required=True, help="the trackers' folder (tracking.report_to)")


def record_live(
    args: argparse.Namespace, tracking, log: logging.Logger, row: dict, *, drop_later: bool = False
) -> None:
    """Merge one generation's row into the arm's live history and send it to the trackers. The live
    view never costs a finished generation: a failure there is logged as a warning, the stage goes on."""
    from populora.report.live import record_generation
    from populora.report.trackers import Trackers

    try:
        trackers = None
        if tracking.report_to:  # params.tracking
            trackers = Trackers(tracking.report_to, args.tracking, args.arm, project=tracking.project)
        rows = record_generation(
            row,
            arm=args.arm,
            history=args.history,
            steps=args.steps,
            progress_file=args.progress,
            drop_later=drop_later,
            trackers=trackers,
        )
    except Exception as error:  # noqa: BLE001 (a tracker's failure, a full disk: logged, the stage's outputs stand)
        log.warning("live history not updated (%s: %s)", type(error).__name__, error)
        return
    log.info("live history: %d generation(s) in %s", len(rows), args.history)
