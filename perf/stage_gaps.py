"""Seconds between a run's stages, when no stage runs: the engine's own time (issue 56).

Each stage log's first and last timestamp, in order of start; the gap before a stage is its first line's
time less the previous stage's last. With --lock, the time ruamel.yaml (DVC's parser) takes to load and
dump that dvc.lock, and its size; with --stamped too, the same for that lock as the code stamps make it (each
stage's source-file deps replaced by its module's one stamp, workflow/code_stamps.py): a projection of the
lock's cost from a run made before them, not a run.

    python perf/stage_gaps.py --logs results/logs --since "2026-11-29 03:28" --until "2026-11-29 04:02" --lock dvc.lock
    python perf/stage_gaps.py --logs results/logs --lock dvc.lock --stamped
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import re
import statistics
import time
from pathlib import Path

STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")


def spans(logs: Path) -> list[tuple[dt.datetime, dt.datetime, str]]:
    """(first, last, log) of every stage log with a timestamped line, by first."""
    out = []
    for path in logs.glob("*/*.log"):
        stamps = [m.group(1) for line in path.read_text(errors="replace").splitlines() if (m := STAMP.match(line))]
        if stamps:
            first, last = (dt.datetime.strptime(s, "%Y-%m-%d %H:%M:%S") for s in (stamps[0], stamps[-1]))
            out.append((first, last, path.relative_to(logs).as_posix()))
    return sorted(out)


def as_stamped(text: str) -> str:
    """A dvc.lock's text with each stage's `.py` deps replaced by one code stamp of its module (a stand-in
    hash and size), as a run with workflow/code_stamps.py writes it."""
    from ruamel.yaml import YAML

    yaml = YAML()
    data = yaml.load(text)
    for stage in data["stages"].values():
        words = str(stage.get("cmd", "")).split()
        if "-m" not in words[:-1] or "deps" not in stage:
            continue
        module = words[words.index("-m") + 1]
        kept = [dep for dep in stage["deps"] if not str(dep["path"]).endswith(".py")]
        stamp = {"path": f"results/.code/{module}.json", "hash": "md5", "md5": "0" * 32, "size": 4096}
        stage["deps"] = [stamp, *kept]
    out = io.StringIO()
    yaml.dump(data, out)
    return out.getvalue()


def lock_seconds(lock: Path, stamped: bool = False) -> dict:
    from ruamel.yaml import YAML

    text = lock.read_text()
    if stamped:
        text = as_stamped(text)
    yaml = YAML()
    start = time.process_time()
    data = yaml.load(text)
    loaded = time.process_time()
    yaml.dump(data, io.StringIO())
    dumped = time.process_time()
    stages = data["stages"]
    return {
        "stamped": stamped,
        "bytes": len(text.encode()),
        "stages": len(stages),
        "deps": sum(len(s.get("deps", [])) for s in stages.values()),
        "load_s": round(loaded - start, 2),
        "dump_s": round(dumped - loaded, 2),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, required=True)
    parser.add_argument("--since", type=dt.datetime.fromisoformat)
    parser.add_argument("--until", type=dt.datetime.fromisoformat)
    parser.add_argument("--lock", type=Path)
    parser.add_argument("--stamped", action="store_true", help="with --lock: also as the code stamps make it")
    args = parser.parse_args()
    rows = [
        r
        for r in spans(args.logs)
        if (args.since is None or r[0] >= args.since) and (args.until is None or r[0] <= args.until)
    ]
    gaps = [(b[0] - a[1]).total_seconds() for a, b in zip(rows, rows[1:])]
    if gaps:
        whole = (rows[-1][1] - rows[0][0]).total_seconds()
        print(
            f"{len(rows)} stages, gaps {sum(gaps):.0f} s of {whole:.0f} s ({sum(gaps) / whole:.0%}); "
            f"a gap: median {statistics.median(gaps):.0f} s, {min(gaps):.0f}-{max(gaps):.0f} s"
        )
    if args.lock:
        print(lock_seconds(args.lock))
        if args.stamped:
            print(lock_seconds(args.lock, stamped=True))


if __name__ == "__main__":
    main()
