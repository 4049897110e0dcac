"""The positive control's split by the best constant (populora/control/split.py) on a run folder written here."""

import json

import pytest

from populora.control.split import main, split_run


def _run_folder(tmp_path, golds, base, arms):
    (tmp_path / "arms").mkdir()
    (tmp_path / "arms" / "base.json").write_text(json.dumps({"verdicts": base}))
    for name, by_step in arms.items():
        heldout = {step: {"verdicts": v, "accuracy": sum(v) / len(v)} for step, v in by_step.items()}
        (tmp_path / "arms" / f"{name}.json").write_text(json.dumps({"arm": name, "heldout": heldout}))
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"outputs": [g], "type": "code_o"}) + "\n" for g in golds))
    correct = sum(g == "0" for g in golds)
    baselines = tmp_path / "baselines.json"
    baselines.write_text(json.dumps({"by_type": {"code_o": {"best": {"answer": "0", "correct": correct}}}}))
    return tasks, baselines


def test_a_gain_on_the_constant_s_tasks_alone_shows_in_the_split(tmp_path):
    golds = ["0"] * 6 + ["7"] * 6
    base = [0] * 12
    drifted = [1] * 6 + [0] * 6  # learnt to answer 0: every gain is on the constant's tasks
    tasks, baselines = _run_folder(tmp_path, golds, base, {"real": {"16": drifted, "8": base}})
    result = split_run(tmp_path, tasks, baselines)
    assert result["constant"] == "0" and result["constant_solves"] == 6
    assert list(result["arms"]["real"]) == ["8", "16"]  # steps in number order
    rows = result["arms"]["real"]["16"]
    assert rows["all"]["points"] == 50.0 and rows["constant solves"]["arm_only"] == 6
    assert rows["constant fails"]["points"] == 0.0 and rows["constant fails"]["p"] == 1.0


def test_baselines_of_other_tasks_are_refused_with_the_fix(tmp_path):
    tasks, baselines = _run_folder(tmp_path, ["0", "1"], [0, 0], {"real": {"16": [1, 1]}})
    baselines.write_text(json.dumps({"by_type": {"code_o": {"best": {"answer": "0", "correct": 5}}}}))
    with pytest.raises(SystemExit, match="study-baselines"):
        split_run(tmp_path, tasks, baselines)


def test_the_command_prints_the_table_and_writes_the_json(tmp_path, capsys):
    tasks, baselines = _run_folder(tmp_path, ["0", "1", "2"], [1, 0, 0], {"real": {"16": [1, 1, 0]}})
    out = tmp_path / "split.json"
    assert main([str(tmp_path), "--tasks", str(tasks), "--baselines", str(baselines), "--json", str(out)]) == 0
    assert "| real | 16 | constant fails | 2 |" in capsys.readouterr().out
    assert json.loads(out.read_text())["arms"]["real"]["16"]["all"]["arm"] == 66.7
