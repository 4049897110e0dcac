"""The held-out curve of one run against the base (populora/report/heldout_curve.py)."""

from __future__ import annotations

import json

import pytest

from populora.report.heldout_curve import curve_rows, main, render


def _doc():
    ids = [f"heldout-code_o-{i:03d}" for i in range(4)] + [f"heldout-code_i-{i:03d}" for i in range(4)]
    base = {t: 0 for t in ids} | {"heldout-code_i-000": 1}
    later = dict(base) | {"heldout-code_i-001": 1, "heldout-code_i-002": 1, "heldout-code_i-000": 0}
    return {
        "base": base,
        "generations": [{"student0": dict(base)}, {"student0": later}],
        "roles": {"students": ["student0"]},
    }


def test_rows_pair_each_generation_with_the_base_task_by_task():
    base, same, later = curve_rows(_doc())
    assert base["generation"] == "base" and base["accuracy"] == pytest.approx(1 / 8)
    assert base["code_i.accuracy"] == pytest.approx(1 / 4) and base["code_o.accuracy"] == 0
    assert same["minus_base"] == 0 and same["mcnemar"]["student0"] == {"first_only": 0, "second_only": 0, "p": 1.0}
    assert later["accuracy"] == pytest.approx(2 / 8) and later["minus_base"] == pytest.approx(1 / 8)
    assert later["mcnemar"]["student0"]["first_only"] == 2 and later["mcnemar"]["student0"]["second_only"] == 1
    assert later["minus_base_low"] <= later["minus_base"] <= later["minus_base_high"]


def test_a_generation_not_scored_is_left_out():
    """heldout.every: an empty table is a generation the pool did not score, not a student at 0%."""
    doc = _doc()
    doc["generations"].insert(0, {})
    rows = curve_rows(doc)
    assert [row["generation"] for row in rows] == ["base", 1, 2]
    assert rows[1:] == [{**row, "generation": row["generation"] + 1} for row in curve_rows(_doc())[1:]]


def test_cli_prints_the_table_and_refuses_a_run_without_a_pool(tmp_path, capsys):
    path = tmp_path / "heldout_verdicts.json"
    path.write_text(json.dumps(_doc()))
    assert main([str(path), "--json", str(tmp_path / "rows.json")]) == 0
    out = capsys.readouterr().out
    assert out.strip() == render(curve_rows(_doc())) and "student0: 2 / 1" in out
    assert len(json.loads((tmp_path / "rows.json").read_text())) == 3
    path.write_text(json.dumps({"base": {}, "generations": []}))
    with pytest.raises(SystemExit):
        main([str(path)])


def test_a_child_is_its_own_point_beside_its_parents():
    from populora.report.heldout_curve import born_rows

    base = {"heldout-code_i-000": 0, "heldout-code_i-001": 1}
    doc = {
        "base": base,
        "roles": {"students": ["s0", "s1"]},
        "generations": [{"s0": {"heldout-code_i-000": 1, "heldout-code_i-001": 1}, "s1": {"heldout-code_i-001": 1}}],
        "members": [{"s0": "population/s0@g000", "s1": "population/s1@g000"}],
        "born": [
            {
                "s1": {
                    "member": "population/s1@g002",
                    "operator": "layerwise",
                    "parents": ["population/s0@g000", "population/s1@g000"],
                    "verdicts": {"heldout-code_i-000": 1},
                }
            }
        ],
    }
    (row,) = born_rows(doc)
    assert row["slot"] == "s1" and row["accuracy"] == 0.5 and row["parents"] == {"s0": 1.0, "s1": 0.5}
    assert row["differs_from_first_parent"] == 1
    assert born_rows({**doc, "born": []}) == []  # runs made before children were scored
