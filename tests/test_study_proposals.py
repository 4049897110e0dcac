"""The study analyser's reading of what the proposers wrote (`populora.analysis.proposals`): task complexity
and coverage by generation per control across seeds, their change from first to last generation, the
comparisons between controls, and their table and figure panels (issue 51)."""

from __future__ import annotations

import json

import pytest

from populora.analysis.__main__ import main
from populora.analysis.comparisons import group
from populora.analysis.figure import figure_panels
from populora.analysis.proposals import proposal_dynamics, proposal_tables
from populora.analysis.runs import empty_run
from populora.report import DYNAMICS_TABLE
from tests.test_study_runs import _run

# per control, the AST depth of each seed's valid code_o programs by generation: the single agent collapses, the
# population's teachers grow
DEPTH = {
    "baseline": [[6.0, 5.0, 4.0], [6.0, 4.5, 3.5], [5.5, 5.0, 3.5]],
    "2t2s": [[5.0, 6.0, 7.0], [5.5, 6.0, 7.5], [5.0, 6.5, 6.5]],
}


def _rows(control: str, seed: int) -> list[dict]:
    rows = []
    for g, depth in enumerate(DEPTH[control][seed]):
        coverage = 10 + (g + 1) * (4 if control == "2t2s" else 1) + seed
        rows.append(
            {
                "generation": g,
                "code_o.program.ast_depth": depth,
                "code_i.program.ast_depth": None if g == 1 else 4.0,
                "coverage.matched.distinct_programs": coverage,
                "coverage.distinct_programs": 2 * coverage,
            }
        )
    return rows


def _records() -> list[dict]:
    runs = []
    for control in DEPTH:
        for seed in range(3):
            arm = "baseline" if control == "baseline" else "population"
            runs.append({**empty_run(f"{control}-s{seed}", control, seed, arm, [], []), "rows": _rows(control, seed)})
    return runs


def test_complexity_and_coverage_per_control_and_generation_across_seeds():
    doc = proposal_dynamics(group(_records()), [("2t2s", "baseline")])
    assert doc["keys"] == [
        "code_o.program.ast_depth",
        "code_i.program.ast_depth",
        "coverage.matched.distinct_programs",
        "coverage.distinct_programs",
    ]  # keys no run recorded are left out
    base = doc["controls"]["baseline"]["code_o.program.ast_depth"]
    assert [p["mean"] for p in base] == pytest.approx([17.5 / 3, 14.5 / 3, 11 / 3], abs=1e-6) and base[0]["n"] == 3
    assert base[0]["low"] < base[0]["mean"] < base[0]["high"]
    # a generation where no seed recorded a value has no point; the others keep their seeds
    assert doc["controls"]["2t2s"]["code_i.program.ast_depth"][1] is None
    # change = last - first per seed: the single agent's tasks collapse, the teachers' grow, both intervals clear of 0
    assert doc["change"]["baseline"]["code_o.program.ast_depth"]["values"] == [-2.0, -2.5, -2.0]
    assert doc["change"]["baseline"]["code_o.program.ast_depth"]["high"] < 0
    assert doc["change"]["2t2s"]["code_o.program.ast_depth"]["low"] > 0
    assert doc["final"]["2t2s"]["coverage.matched.distinct_programs"]["values"] == [22.0, 23.0, 24.0]
    # between controls: Welch's interval over the seeds, of the last generation and of the change
    c = next(c for c in doc["comparisons"] if c["key"] == "code_o.program.ast_depth")
    assert (c["left"], c["right"]) == ("2t2s", "baseline")
    assert c["final"]["delta"] == pytest.approx(7.0 - 11 / 3, abs=1e-6) and c["change"]["delta"] == pytest.approx(
        5.5 / 3 + 6.5 / 3, abs=1e-6
    )
    assert c["change"]["low"] > 0
    assert doc["series"]["2t2s"]["code_o.program.ast_depth"][1] == [5.5, 6.0, 7.5]
    text = "\n".join(proposal_tables(doc))
    assert "## What the proposers wrote" in text and "| baseline | 5.83 [" in text
    assert "| 2t2s - baseline | code_o.program.ast_depth | +3.33 [" in text
    assert proposal_dynamics(group([{**r, "rows": []} for r in _records()])) == {} and proposal_tables({}) == []


def test_the_study_command_reports_them_in_a_table_and_two_figure_panels(tmp_path):
    root = tmp_path / "runs"
    for control in DEPTH:
        for seed in range(3):
            arm = "baseline" if control == "baseline" else "population"
            _run(root, control, seed, 0.3, arm=arm)
            (root / f"{control}-s{seed}" / "dynamics" / arm / DYNAMICS_TABLE).write_text(
                json.dumps(_rows(control, seed))
            )
    assert main([str(root), "--out", str(tmp_path / "out")]) == 0
    study = json.loads((tmp_path / "out" / "study.json").read_text())
    assert set(study["proposals"]["controls"]) == {"baseline", "2t2s"}
    assert figure_panels(study)[-2:] == ["task complexity", "coverage"]
    text = (tmp_path / "out" / "study.md").read_text()
    assert "**coverage, one adapter's proposals (distinct programs so far)**" in text
    assert (tmp_path / "out" / "study.png").stat().st_size > 0
