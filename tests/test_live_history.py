"""The live history (populora/report/live.py), the headline (populora/report/headline.py) and the trackers:
rows keyed by generation, no gaps or repeats after a generation is recorded again, the optimizer-step
table, progress.json, and a tracker run that a resumed run continues."""

from __future__ import annotations

import json
from multiprocessing import Process

import pytest

from populora.report.headline import headline_metrics
from populora.report.live import plot_table, progress, put_row, record_generation, step_rows
from populora.report.trackers import Trackers, scalars


def _row(gen: int, **extra) -> dict:
    return {
        "generation": gen,
        "solve_rate": 0.1 * gen,
        "update.student0.step0.loss": 1.0 - gen,
        "update.student0.step1.loss": 0.5 - gen,
        "update.teacher0.step0.grad_norm": 2.0,
        **extra,
    }


def test_put_row_replaces_its_generation_and_keeps_the_order():
    rows = put_row(put_row([], _row(1)), _row(0))
    assert [r["generation"] for r in rows] == [0, 1]
    rows = put_row(rows, {"generation": 1, "heldout.students.accuracy": 0.25})  # the heldout stage merges
    assert rows[1]["solve_rate"] == pytest.approx(0.1) and rows[1]["heldout.students.accuracy"] == 0.25
    rows = put_row(rows, _row(1, solve_rate=0.9))  # a rerun of the generation replaces, never repeats
    assert [r["generation"] for r in rows] == [0, 1] and rows[1]["solve_rate"] == 0.9
    assert rows[1]["heldout.students.accuracy"] == 0.25  # what the rerun did not write stays


def test_a_new_run_drops_an_older_runs_later_generations():
    rows = [_row(0), _row(1), _row(2)]
    assert [r["generation"] for r in put_row(rows, _row(0), drop_later=True)] == [0]


def test_plot_table_rows_have_every_key_and_fillers_are_not_values():
    table = plot_table([_row(0), {"generation": 1, "heldout.students.accuracy": 0.5, "code_o.reason.syntax": 2}])
    assert len({tuple(r) for r in table}) == 1 and table[0]["code_o.reason.syntax"] == 0
    merged = put_row(table, {"generation": 0, "solve_rate": 0.3})
    assert merged[0].get("heldout.students.accuracy") is None and merged[0]["solve_rate"] == 0.3


def test_step_rows_count_steps_over_the_run():
    steps = step_rows([_row(0), _row(1)])
    assert [(s["step"], s["generation"], s["step_in_generation"]) for s in steps] == [
        (0, 0, 0),
        (1, 0, 1),
        (2, 1, 0),
        (3, 1, 1),
    ]
    assert steps[2]["student0.loss"] == 0.0 and steps[1]["teacher0.grad_norm"] is None  # teacher0 took one step
    assert len({tuple(s) for s in steps}) == 1
    assert not [key for key in steps[0] if key.startswith("heldout.")]  # generation figures, not a step's


def test_progress_is_the_last_generation():
    assert progress([_row(0), _row(2, **{"heldout.students.accuracy": 0.4})]) == {
        "generation": 2,
        "solve_rate": 0.2,
        "heldout": 0.4,
    }


def _record(folder: str, gen: int) -> None:
    record_generation(
        _row(gen),
        arm="population",
        history=f"{folder}/h.json",
        steps=f"{folder}/s.json",
        progress_file=f"{folder}/p.json",
    )


def test_record_generation_under_concurrent_writers(tmp_path):
    """The arms and the held-out scoring write side by side: the lock keeps every generation."""
    procs = [Process(target=_record, args=(str(tmp_path), gen)) for gen in range(6)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(30)
    rows = json.loads((tmp_path / "h.json").read_text())
    assert [r["generation"] for r in rows] == list(range(6))
    assert len(json.loads((tmp_path / "s.json").read_text())) == 12
    record_generation(
        _row(0, solve_rate=0.7),
        arm="baseline",
        history=tmp_path / "b.json",
        steps=tmp_path / "bs.json",
        progress_file=tmp_path / "p.json",
    )
    assert json.loads((tmp_path / "p.json").read_text()) == {
        "baseline.generation": 0,
        "baseline.solve_rate": 0.7,
        "population.generation": 5,
        "population.solve_rate": pytest.approx(0.5),
    }


def test_scalars_are_named_for_trackers():
    assert scalars({"generation": 3, "code_o.solve_rate": 0.5, "note": "x", "flag": True}) == {"code_o/solve_rate": 0.5}


def test_tensorboard_run_is_continued_after_a_resume(tmp_path):
    pytest.importorskip("tensorboardX")
    for gen in range(2):  # two stages, two processes' worth of Trackers objects: one run folder
        rows = [_row(g) for g in range(gen + 1)]
        Trackers(["tensorboard"], tmp_path, "population").log_generation(
            rows[-1], [s for s in step_rows(rows) if s["generation"] == gen]
        )
    assert json.loads((tmp_path / "population" / "run.json").read_text())["arm"] == "population"
    events = list((tmp_path / "population" / "tensorboard").glob("events.out.tfevents.*"))
    assert events


def test_tensorboard_events_hold_every_generation(tmp_path):
    pytest.importorskip("tensorboardX")
    for gen in range(3):
        Trackers(["tensorboard"], tmp_path, "baseline").log_generation(_row(gen), [])
    steps = _read_scalar_steps(tmp_path / "baseline" / "tensorboard", "solve_rate")
    assert sorted(steps) == [0, 1, 2]


def _read_scalar_steps(folder, tag: str) -> list[int]:
    """The steps of one scalar in a folder of TensorBoard event files (read with tensorboardX's own protobufs)."""
    import struct

    from tensorboardX.proto import event_pb2

    steps = []
    for path in sorted(folder.glob("events.out.tfevents.*")):
        data = path.read_bytes()
        offset = 0
        while offset < len(data):
            (length,) = struct.unpack("<Q", data[offset : offset + 8])
            event = event_pb2.Event.FromString(data[offset + 12 : offset + 12 + length])
            offset += 12 + length + 4
            steps += [event.step for value in event.summary.value if value.tag == tag]
    return steps


def test_wandb_offline_run_is_continued_after_a_resume(tmp_path, monkeypatch):
    pytest.importorskip("wandb", reason="wandb is optional (pip install wandb); tracking.report_to: [wandb] needs it")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for gen in range(2):
        Trackers(["wandb"], tmp_path, "population").log_generation(_row(gen), [])
    run_id = json.loads((tmp_path / "population" / "run.json").read_text())["wandb_id"]
    runs = list((tmp_path / "population" / "wandb").glob("offline-run-*"))
    assert runs and all(path.name.endswith(run_id) for path in runs)  # both stages wrote into the same run


def test_headline_of_both_arms_and_of_one():
    full = {
        "avg.overall.population.mean": 0.3,
        "avg.overall.population.best": 0.4,
        "avg.overall.population.weakest": 0.2,
        "avg.overall.baseline": 0.25,
        "avg.overall.base": 0.1,
        "avg.math.population.mean": 0.1,
        "avg.math.base": 0.1,
        "avg.math.baseline": 0.05,
        "bench.gsm8k.member.x": 0.9,
    }
    summaries = {
        "population": {
            "final.heldout.students.accuracy": 0.5,
            "final.heldout.base.accuracy": 0.2,
            "final.solve_rate": 0.6,
        },
        "baseline": {"final.heldout.students.accuracy": 0.3, "final.solve_rate": 0.4},
    }
    head = headline_metrics(full, summaries)
    assert head["overall.mean_minus_baseline"] == pytest.approx(0.05) and head[
        "overall.mean_minus_base"
    ] == pytest.approx(0.2)
    assert head["heldout.mean_minus_base"] == pytest.approx(0.3) and head["heldout.baseline"] == 0.3
    assert "bench.gsm8k.member.x" not in head and head["math.mean_minus_baseline"] == pytest.approx(0.05)
    one = headline_metrics({"avg.overall.mean": 0.2, "avg.overall.base": 0.1}, {"baseline": summaries["baseline"]})
    assert one == {
        "overall.mean": 0.2,
        "overall.base": 0.1,
        "overall.mean_minus_base": 0.1,
        "heldout.mean": 0.3,
        "solve_rate.mean": 0.4,
    }


def test_the_held_out_fields_the_plots_name_are_always_there():
    """No pool (or teachers not scored): DVC fails a plot whose field is in no row, so they are null."""
    from populora.report.live import ALWAYS

    table = plot_table([_row(0)])
    assert all(key in table[0] and table[0][key] is None for key in ALWAYS) and plot_table([]) == []


def test_a_tracker_without_its_package_is_refused_before_any_work(monkeypatch, tiny_params_dict):
    import importlib.util

    from populora.config import ParamsError, parse_params

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ParamsError, match=r"tracking.report_to.*wandb needs the wandb package"):
        parse_params({**tiny_params_dict, "tracking": {"report_to": ["wandb"]}})
    assert parse_params({**tiny_params_dict, "tracking": {"report_to": ["tensorboard"]}}).tracking.report_to == (
        "tensorboard",
    )
