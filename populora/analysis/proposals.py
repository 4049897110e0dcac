"""What the proposers wrote, per control across seeds: the complexity of the valid proposed programs and
the problem-space coverage over generations (the paper's claim: the single agent's tasks collapse to
easy ones while the population's teachers' keep growing and their coverage keeps expanding).

Read from each run's dynamics rows (`dynamics.json`, `populora.rl.generation_metrics`): per
generation the mean AST depth, cyclomatic complexity, lines and distinct variables of the valid `code_o`
and `code_i` programs proposed (the population's teachers together, the single agent's own proposals),
and coverage (distinct normalised-AST programs so far: of every proposal, and of a seeded subsample of one
adapter's worth, `coverage.matched.*`, the compute-matched view; new programs per proposal). Per control
and generation: the mean over seeds with a 95% t-interval; the change from the first to the last
generation per seed (mean and interval: does it grow or collapse?); and between the controls of the
study's comparisons, Welch's interval over the seeds' last-generation values and over their changes.
Used by `populora.analysis.comparisons.summarize` (study.json `proposals`), tables and figure.
"""

from __future__ import annotations

from statistics import mean
from typing import Any

from populora.core.stats import is_finite_number, t_interval, welch_interval

COMPLEXITY = ("ast_depth", "cyclomatic_complexity", "loc", "distinct_variables")
COVERAGE = ("coverage.matched.distinct_programs", "coverage.distinct_programs", "coverage.new_per_proposal")
KEYS = (*(f"{t}.program.{m}" for t in ("code_o", "code_i") for m in COMPLEXITY), *COVERAGE)
TITLES = {
    **{f"{t}.program.{m}": f"{t} {m.replace('_', ' ')}" for t in ("code_o", "code_i") for m in COMPLEXITY},
    "coverage.matched.distinct_programs": "coverage, one adapter's proposals (distinct programs so far)",
    "coverage.distinct_programs": "coverage, every proposal (distinct programs so far)",
    "coverage.new_per_proposal": "new programs per proposal",
}


def series(run: dict, key: str) -> list[float | None]:
    """The run's `key` per generation (dynamics rows in generation order; None where not recorded)."""
    rows = sorted(run.get("rows") or [], key=lambda r: r.get("generation", 0))
    return [float(r[key]) if is_finite_number(r.get(key)) else None for r in rows]


def summary(values) -> dict | None:
    """n, mean, 95% t-interval (None with one value) and the values; None without any."""
    values = [float(v) for v in values if is_finite_number(v)]
    if not values:
        return None
    t = t_interval(values)
    return {
        "n": len(values),
        "mean": round(mean(values), 6),
        "low": t[1] if t else None,
        "high": t[2] if t else None,
        "values": [round(v, 6) for v in values],
    }


def change(values: list[float | None]) -> float | None:
    """Last minus first recorded value of one run (None with fewer than two)."""
    kept = [v for v in values if v is not None]
    return kept[-1] - kept[0] if len(kept) >= 2 else None


def proposal_dynamics(groups: dict[str, list[dict]], pairs=()) -> dict:
    """{"keys", "titles", "controls": {control: {key: [summary per generation]}}, "change": {control: {key:
    summary of last - first}}, "final": {control: {key: summary of the last generation}}, "comparisons": [...]}
    (see the module docstring); {} when no run recorded any of `KEYS`."""
    keys = [k for k in KEYS if any(v is not None for runs in groups.values() for r in runs for v in series(r, k))]
    if not keys:
        return {}
    out: dict[str, Any] = {
        "keys": keys,
        "titles": {k: TITLES[k] for k in keys},
        "controls": {},
        "change": {},
        "final": {},
        "series": {},
        "comparisons": [],
    }
    per_seed: dict[str, dict[str, dict[str, list[float]]]] = {}
    for control, runs in groups.items():
        gens = max((len(r.get("rows") or []) for r in runs), default=0)
        table = {k: [series(r, k) for r in runs] for k in keys}
        out["controls"][control] = {
            k: [summary(s[g] for s in table[k] if g < len(s)) for g in range(gens)] for k in keys
        }
        out["series"][control] = table  # per key, each seed's values by generation (the figure's thin lines)
        finals = {k: [next((v for v in reversed(s) if v is not None), None) for s in table[k]] for k in keys}
        changes = {k: [change(s) for s in table[k]] for k in keys}
        out["final"][control] = {k: summary(finals[k]) for k in keys}
        out["change"][control] = {k: summary(changes[k]) for k in keys}
        per_seed[control] = {
            "final": {k: [v for v in finals[k] if v is not None] for k in keys},
            "change": {k: [v for v in changes[k] if v is not None] for k in keys},
        }
    for left, right in [(a, b) for a, b in pairs if a in groups and b in groups]:
        for key in keys:
            entry = {"left": left, "right": right, "key": key}
            for what in ("final", "change"):
                a, b = per_seed[left][what][key], per_seed[right][what][key]
                entry[what] = (
                    {k: v for k, v in welch_interval(a, b).items() if k in ("delta", "low", "high", "mde")}
                    if len(a) >= 2 and len(b) >= 2
                    else None
                )
            out["comparisons"].append(entry)
    return out


def _fmt(entry: dict | None, digits: int = 2) -> str:
    if entry is None:
        return "-"
    if entry.get("low") is None:
        return f"{entry['mean']:.{digits}f} (n={entry['n']})"
    return f"{entry['mean']:.{digits}f} [{entry['low']:.{digits}f}, {entry['high']:.{digits}f}]"


def _diff(entry: dict | None, digits: int = 2) -> str:
    if entry is None:
        return "-"
    return f"{entry['delta']:+.{digits}f} [{entry['low']:+.{digits}f}, {entry['high']:+.{digits}f}]"


def proposal_tables(doc: dict) -> list[str]:
    """study.md's section: per key, each control's value per generation (mean [95% t-interval] over seeds)
    and its change from the first generation to the last; then the comparisons between controls."""
    if not doc:
        return []
    lines = [
        "## What the proposers wrote: complexity and coverage by generation",
        "",
        "Valid `code_o`/`code_i` programs proposed in each generation (the population's teachers together; the "
        "single agent's own proposals): mean over seeds [95% t-interval]; change = last generation - first, per "
        "seed. Coverage counts distinct normalised-AST programs so far; the one-adapter view is compute-matched.",
        "",
    ]
    for key in doc["keys"]:
        gens = max((len(v[key]) for v in doc["controls"].values()), default=0)
        lines += [
            f"**{doc['titles'][key]}** (`{key}`)",
            "",
            "| control | " + " | ".join(f"gen {g}" for g in range(gens)) + " | change |",
            "|---|" + "---|" * (gens + 1),
        ]
        for control, by_key in doc["controls"].items():
            cells = [_fmt(p) for p in by_key[key]] + ["-"] * (gens - len(by_key[key]))
            lines.append(f"| {control} | " + " | ".join(cells) + f" | {_fmt(doc['change'][control][key])} |")
        lines.append("")
    if doc["comparisons"]:
        lines += [
            "Between controls (Welch's 95% interval over the seeds): the last generation's value, and the change "
            "from the first generation to the last.",
            "",
            "| comparison | measure | last generation | change |",
            "|---|---|---|---|",
        ]
        for c in doc["comparisons"]:
            lines.append(f"| {c['left']} - {c['right']} | {c['key']} | {_diff(c['final'])} | {_diff(c['change'])} |")
        lines.append("")
    return lines


def plot_proposals(ax, doc: dict, keys: tuple[str, ...], colors: list[str], ylabel: str, title: str) -> None:
    """One figure panel: per control the mean over seeds of each of `keys` by generation (one line style
    per key), each seed's own line thin for the first key."""
    styles = ["-", "--", ":", "-."]
    for k, control in enumerate(doc["controls"]):
        color = colors[k % len(colors)]
        for s, key in enumerate(keys):
            points = doc["controls"][control].get(key) or []
            if not any(points):
                continue
            gens = [g for g, p in enumerate(points) if p]
            if s == 0:
                for values in doc["series"][control][key]:
                    xs = [g for g, v in enumerate(values) if v is not None]
                    ax.plot(xs, [values[g] for g in xs], color=color, lw=0.7, alpha=0.35)
            ax.plot(
                gens,
                [points[g]["mean"] for g in gens],
                color=color,
                ls=styles[s % len(styles)],
                lw=2,
                marker="o",
                ms=3,
                label=f"{control}" + (f", {key.split('.')[0]}" if len(keys) > 1 else ""),
            )
    ax.set_xlabel("generation")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, ncol=2)
