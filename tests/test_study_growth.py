"""populora.analysis.growth: per-step growth of sum ||B A||_F, children's first steps told apart."""

import json

from populora.analysis.growth import main, read_run, step_growth, summarize


def rows(norms: dict[str, list[float]]) -> list[dict]:
    gens = len(next(iter(norms.values())))
    return [
        {"generation": g, **{f"delta_norm.{slot}": values[g] for slot, values in norms.items()}} for g in range(gens)
    ]


def test_a_child_first_step_is_told_apart_from_a_replacement_and_a_plain_step():
    # student1 replaced after generation 1 (its norm there is the child's), trained at 2, replaced again after 3
    dyn = rows({"student0": [1.0, 2.0, 3.5, 4.0], "student1": [1.0, 2.1, 2.6, 0.9]})
    steps = step_growth(list(reversed(dyn)), {1: {"student1"}, 3: {"student1"}})
    by = {(s["generation"], s["slot"]): s for s in steps}
    assert by[(2, "student1")] == {
        "generation": 2,
        "slot": "student1",
        "norm": 2.6,
        "growth": 0.5,
        "after_birth": True,
        "replaced": False,
    }
    assert by[(1, "student1")]["replaced"] and not by[(1, "student1")]["after_birth"]
    assert by[(3, "student1")]["replaced"]
    assert by[(2, "student0")]["growth"] == 1.5 and by[(2, "student0")]["after_birth"] is False
    summary = summarize(steps)
    # replaced rows are not steps: student1's -1.7 at generation 3 is not counted anywhere
    assert summary["after_birth"] == {"n": 1, "median": 0.5, "min": 0.5}
    assert summary["other"]["n"] == 3 and summary["other"]["min"] == 0.5


def test_teachers_are_read_only_when_asked_and_runs_without_evolution_are_unknown():
    dyn = rows({"student0": [1.0, 2.0], "teacher0": [1.0, 5.0]})
    assert [s["slot"] for s in step_growth(dyn, None, "teachers")] == ["teacher0"]
    (step,) = step_growth(dyn, None)
    assert step["after_birth"] is None and step["replaced"] is None


def test_the_command_reads_a_committed_run(tmp_path, capsys):
    run = tmp_path / "2t2s-s0"
    (run / "dynamics" / "population").mkdir(parents=True)
    (run / "evolution").mkdir()
    (run / "dynamics" / "population" / "dynamics.json").write_text(
        json.dumps(rows({"student0": [1.0, 0.5, 2.0], "student1": [1.0, 2.0, 3.0]}))
    )
    (run / "evolution" / "gen001.json").write_text(json.dumps({"events": [{"slot": "student0"}]}))
    assert read_run(run)[1] == {1: {"student0"}}
    assert main([str(run), "--json", str(tmp_path / "g.json")]) == 0
    assert "child's first step" in capsys.readouterr().out
    out = json.loads((tmp_path / "g.json").read_text())
    assert out["summary"][f"{tmp_path.name}/2t2s-s0"]["after_birth"] == {"n": 1, "median": 1.5, "min": 1.5}
