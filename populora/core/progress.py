"""Progress of a long loop: a tqdm bar on a terminal, throttled plain log lines anywhere else.

    with Progress(len(rows), "verify", unit="rows", log=log) as progress:
        for row in rows:
            ...
            progress.update()            # or progress.update(k, note="step 2/4")

Where stderr is a terminal, a tqdm bar is drawn (and cleared when the loop ends). Anywhere else (a
stage's log file, SLURM's output file, a pipe) nothing is redrawn: the loop logs a plain line
through `log` (the caller's logger; stages route every logger to stderr and their --log file, tagged
with the stage) at most once every `every_s` seconds, and one final line when it ends, e.g.

    solve: 40/64 steps (62%), 12.3 s elapsed, ~7 s left
    solve: 64/64 steps (100%) in 19.8 s

never a carriage return. The final line is logged on a terminal too, so the log file always says
how long each loop took. Environment overrides: `POPULORA_PROGRESS` = `bar` | `log` | `off` (the
mode; default: `bar` on a terminal, else `log`) and `POPULORA_PROGRESS_S` (seconds between lines,
default 30). Safe to update from several threads (the sandbox pools call back from theirs).
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from typing import Literal

MODES = ("bar", "log", "off")
DEFAULT_EVERY_S = 30.0


def stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced by an object without isatty, or closed
        return False


def progress_mode() -> str:
    """`bar` on a terminal, else `log`; POPULORA_PROGRESS overrides."""
    wanted = os.environ.get("POPULORA_PROGRESS", "").strip().lower()
    if wanted in MODES:
        return wanted
    return "bar" if stderr_is_terminal() else "log"


def progress_every_s() -> float:
    try:
        return max(0.0, float(os.environ.get("POPULORA_PROGRESS_S", DEFAULT_EVERY_S)))
    except ValueError:
        return DEFAULT_EVERY_S


def duration(seconds: float, *, tenths: bool = True) -> str:
    """12.3 s (12 s without `tenths`), 4 min 05 s, 2 h 03 min."""
    if seconds < 60:
        return f"{seconds:.1f} s" if tenths else f"{round(seconds)} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


class Progress:
    """One loop's progress (see the module docstring). `total` None: a count without percentage.
    `initial` counts work done before (e.g. kept from an earlier attempt): it shows in the count but
    not in the rate the time left is estimated from. `enabled=False` (a process other than the
    first, say) reports nothing."""

    def __init__(
        self,
        total: int | None,
        desc: str,
        *,
        unit: str = "items",
        log: logging.Logger | None = None,
        every_s: float | None = None,
        mode: str | None = None,
        initial: int = 0,
        enabled: bool = True,
        clock=time.monotonic,
    ):
        self.total, self.desc, self.unit = total, desc, unit
        self.log = log or logging.getLogger("populora.progress")
        self.every_s = progress_every_s() if every_s is None else every_s
        self.mode = "off" if not enabled else (mode or progress_mode())
        if self.mode not in MODES:
            raise ValueError(f"progress mode must be one of {MODES}, got {self.mode!r}")
        self.n = self.initial = initial
        self.note: str | None = None
        self.lines = 0  # log lines written so far (the final one included)
        self._clock = clock
        self._start = self._last = clock()
        self._lock = threading.Lock()
        self._closed = False
        self._bar = None
        if self.mode == "bar":
            from tqdm import tqdm

            self._bar = tqdm(
                total=total,
                desc=desc,
                unit=f" {unit}",
                initial=initial,
                leave=False,
                file=sys.stderr,
                disable=False,
                dynamic_ncols=True,
            )

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, kind, error, traceback) -> Literal[False]:
        self.close(failed=kind is not None)
        return False

    def update(self, n: int = 1, note: str | None = None) -> None:
        """`n` more units done; `note` (e.g. "step 2/4") is shown beside the count from now on."""
        with self._lock:
            if self._closed:
                return
            self.n += n
            if note is not None:
                self.note = note
            if self._bar is not None:
                if note is not None:
                    self._bar.set_postfix_str(note, refresh=False)
                self._bar.update(n)
            elif self.mode == "log":
                now = self._clock()
                if now - self._last >= self.every_s:
                    self._last = now
                    self._emit(self.line(now))

    def close(self, failed: bool = False) -> None:
        """End the loop: clear the bar, log the final line (`failed`: it says where the loop stopped)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._bar is not None:
                self._bar.close()
            if self.mode != "off":
                self._emit(self.line(self._clock(), final=True, failed=failed))

    def line(self, now: float, *, final: bool = False, failed: bool = False) -> str:
        elapsed = now - self._start
        count = f"{self.n}/{self.total}" if self.total is not None else f"{self.n}"
        text = f"{self.desc}: {count} {self.unit}"
        if self.total:
            text += f" ({100 * self.n // self.total}%)"
        if failed:
            text += f", stopped after {duration(elapsed)}"
        elif final:
            text += f" in {duration(elapsed)}"
        else:
            text += f", {duration(elapsed)} elapsed"
            done = self.n - self.initial
            if self.total is not None and done > 0 and elapsed > 0:
                text += f", ~{duration(max(0, self.total - self.n) * elapsed / done, tenths=False)} left"
        return text + (f"; {self.note}" if self.note else "")

    def _emit(self, text: str) -> None:
        self.lines += 1
        self.log.info("%s", text)
