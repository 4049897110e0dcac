"""Per-job timings in the report: Snakemake's `benchmark:` files, one TSV per job
(`<folder>/<stage>/<key>.tsv`, the paths set in workflow/dag.py), summed per stage.

Snakemake writes a header and one row per job (more with `repeat()`): `s` is the wall time in
seconds and `max_rss` the largest resident set size in MiB that it sampled (at 0.5 s, then every
30 s, so a lower bound of the peak; `NA`, or 0.00, when the job ended before the first sample). DVC writes
no such files: a run under DVC has no per-job timings.

A job run in the stage host (populora/core/stagehost/) leaves `<key>.usage.json` beside its TSV: the stage's
own peak resident memory and CPU time from the kernel, where Snakemake could only sample the stand-in that
waited for it. Its peak replaces the sampled one.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from statistics import median

NO_TIMINGS = "No per-job timings (run under Snakemake for them)."
TIMINGS_NOTE = (
    "Wall time of each job as Snakemake recorded it (`benchmark:`); the total adds the jobs up, "
    "whether they ran one after the other or side by side, so it is not the run's elapsed time. "
    "Max RSS is the largest resident memory Snakemake sampled (at 0.5 s, then every 30 s: a lower "
    "bound of the peak; - when every job ended before the first sample), or the kernel's peak of the "
    "stage's process where the stage host ran it. A job is timed when it ends, so a `report` row, if "
    "any, is an earlier report's."
)


def _parsed(value: str | None) -> float | None:
    if value is None:
        return None
    try:
        return float(value)
    except (TypeError, ValueError):  # Snakemake writes NA for a value it has not sampled
        return None


def parse_benchmark(text: str) -> dict[str, float | None]:
    """One job's benchmark TSV -> {"s": wall seconds (the mean over repeats), "max_rss": MiB or None}."""
    rows = list(csv.DictReader(io.StringIO(text), delimiter="\t"))
    walls = [s for row in rows if (s := _parsed(row.get("s"))) is not None]
    if not walls:
        raise ValueError("no row with a wall time (column s)")
    # 0.00 where the job's process had already ended when sampled (a job under a second): not a measurement
    rss = [r for row in rows if (r := _parsed(row.get("max_rss"))) is not None and r > 0]
    return {"s": sum(walls) / len(walls), "max_rss": max(rss) if rss else None}


def stage_timings(jobs: dict[str, list[dict[str, float | None]]]) -> list[dict]:
    """Stage -> its jobs' parsed timings  ->  one row per stage, the longest total first: jobs, total
    and median wall seconds, max RSS (MiB, None when never sampled); the last row sums every stage."""

    def row(name: str, timings: list[dict]) -> dict:
        walls = [t["s"] for t in timings]
        rss = [t["max_rss"] for t in timings if t["max_rss"] is not None]
        return {
            "stage": name,
            "jobs": len(timings),
            "total_s": sum(walls),
            "median_s": median(walls),
            "max_rss_mib": max(rss) if rss else None,
        }

    rows = sorted(
        (row(name, timings) for name, timings in jobs.items() if timings), key=lambda r: (-r["total_s"], r["stage"])
    )
    if rows:
        rows.append(row("all stages", [t for timings in jobs.values() for t in timings]))
    return rows


def read_timings(folder: str | Path | None) -> dict[str, list[dict[str, float | None]]]:
    """Every `<folder>/<stage>/<key>.tsv`, parsed: stage -> its jobs' timings. An absent folder (a
    DVC run) or an unreadable file (a job killed mid-write) gives nothing for it."""
    jobs: dict[str, list[dict]] = {}
    if folder is None or not Path(folder).is_dir():
        return jobs
    for path in sorted(Path(folder).glob("*/*.tsv")):
        try:
            job = parse_benchmark(path.read_text())
        except (OSError, ValueError):
            continue
        jobs.setdefault(path.parent.name, []).append(with_host_usage(job, path.with_suffix(".usage.json")))
    return jobs


def with_host_usage(job: dict[str, float | None], usage_file: Path) -> dict[str, float | None]:
    """A job's timings with the stage host's peak memory of its stage, where the host ran it (a stand-in's
    sampled figure describes the stand-in); as they were where there is no readable usage file."""
    try:
        peak = json.loads(usage_file.read_text())["max_rss_mib"]
    except (OSError, ValueError, KeyError, TypeError):
        return job
    return {**job, "max_rss": float(peak)} if isinstance(peak, (int, float)) and peak > 0 else job


def timings_table(rows: list[dict]) -> str:
    """Markdown of `stage_timings` rows, or the sentence saying there are none."""
    if not rows:
        return NO_TIMINGS
    lines = ["| stage | jobs | total wall s | median wall s | max RSS MiB |", "|---|---|---|---|---|"]
    for r in rows:
        name = f"**{r['stage']}**" if r is rows[-1] else f"`{r['stage']}`"
        rss = "-" if r["max_rss_mib"] is None else f"{r['max_rss_mib']:.0f}"
        lines.append(f"| {name} | {r['jobs']} | {r['total_s']:.1f} | {r['median_s']:.1f} | {rss} |")
    return "\n".join(lines)
