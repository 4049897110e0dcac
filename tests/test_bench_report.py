"""The report renders its PNGs and Markdown from synthetic benchmark results and dynamics."""

from __future__ import annotations

import json

import matplotlib.image as mpimg
import pytest

from populora.report.dynamics import _panel
from populora.report.markdown import write_report
from populora.report.metrics import benchmark_metrics
from populora.report.panels import sample_size_keys
from populora.report.tables import difference_verdict
from stages import report as report_stage
from tests.test_bench_summary import SCORES, SCORES_PARAMS, synthetic_results, write_results


def synthetic_dynamics(arm: str, generations: int = 4) -> list[dict]:
    slots = ["solo"] if arm == "baseline" else ["teacher0", "student0", "student1"]
    grow = 1.0 if arm == "population" else -0.3  # the paper's finding: population grows, baseline collapses
    rows = []
    for g in range(generations):
        row = {
            "generation": g,
            "teacher_reward_mean": 0.1 + 0.05 * g,
            "student_reward_mean": -0.5 + 0.1 * g,
            "coverage.distinct_programs": 5 + (4 if arm == "population" else 1) * g,
            "coverage.matched.distinct_programs": 5 + g,
            "coverage.new_per_proposal": 0.5,
        }
        for i, t in enumerate(("code_o", "code_i", "code_f")):
            row[f"{t}.attempts"], row[f"{t}.proposals"] = 8, 12
            row[f"{t}.solved"] = round(8 * min(1.0, 0.1 * (g + i)) * (1.0 if arm == "population" else 0.5))
            row[f"{t}.solve_rate"] = row[f"{t}.solved"] / 8
            row[f"{t}.valid"] = 4 + g
            row[f"{t}.validity_rate"] = row[f"{t}.valid"] / 12
            row[f"{t}.program.n"] = 4 + g
            row[f"{t}.program.ast_depth"] = 4 + grow * g
            row[f"{t}.program.cyclomatic_complexity"] = 2 + grow * 0.5 * g
            row[f"{t}.program.loc"] = 6 + grow * g
            row[f"{t}.program.distinct_variables"] = None if g == 0 else 3 + grow * g
        for k, slot in enumerate(slots):
            row[f"rating.{slot}.mu"] = 25 + (k - 1) * g
            row[f"rating.{slot}.sigma"] = 8.3 - g
        rows.append(row)
    return rows


def _is_real_png(path) -> bool:
    image = mpimg.imread(path)
    return image.ndim == 3 and image.shape[0] > 300 and image.shape[1] > 600 and image.std() > 0.01


@pytest.mark.slow  # subprocesses / whole harness runs: CI's full lane, not the fast one
def test_report_renders_figures_and_markdown(tmp_path):
    dynamics = {"population": synthetic_dynamics("population"), "baseline": synthetic_dynamics("baseline")}
    results = synthetic_results()
    path = write_report(results, benchmark_metrics(results), dynamics, tmp_path)
    text = path.read_text()
    for figure in ("benchmarks.png", "dynamics.png", "complexity.png", "ratings.png"):
        assert _is_real_png(tmp_path / figure), figure
        assert f"({figure})" in text
    assert "| humaneval_plus | 10 |" in text and "| cruxeval_o | 10 |" in text
    assert "Best student by overall aggregate: `population-student0`; weakest: `population-student1`" in text
    assert "Headline = students" in text and "pop. teachers mean" in text
    # students' mean 0.25 vs baseline 0.2 on cruxeval_o: +5 points, an interval covering 0
    assert "| cruxeval_o | population students' mean - baseline | +5.0 |" in text
    assert "no detectable difference" in text
    assert "40.0 [17-69]" in text  # student0 on cruxeval_o: 4/10 with its 95% Wilson interval


def test_difference_verdicts():
    assert difference_verdict(0.05, -0.1, 0.2) == "no detectable difference"
    assert difference_verdict(0.3, 0.1, 0.5) == "higher" and difference_verdict(-0.3, -0.5, -0.1) == "lower"
    assert difference_verdict(0.0, 0.0, 0.0) == "no detectable difference"


def test_dynamics_points_carry_their_sample_sizes():
    assert sample_size_keys("code_o.solve_rate") == ("code_o.solved", "code_o.attempts")
    assert sample_size_keys("code_i.validity_rate") == ("code_i.valid", "code_i.proposals")
    assert sample_size_keys("code_o.program.loc") == (None, "code_o.program.n")
    assert sample_size_keys("teacher_reward_mean") is None
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    _panel(ax, {"population": synthetic_dynamics("population")}, "code_o.solve_rate", "solve rate")
    labels = [t.get_text() for t in ax.texts]
    assert labels == ["n=8"] * 4
    assert len(ax.collections) == 1  # the Wilson band
    plt.close(fig)


def test_dynamics_titles_do_not_overlap(tmp_path, monkeypatch):
    """The long coverage titles of the bottom row ran into each other, and the suptitle into the top
    row's: every title (wrapped) keeps clear of every other."""
    from itertools import combinations

    from populora.report import dynamics as module

    boxes, write = [], module.write_figure

    def write_and_measure(path, fig, dpi=110):
        write(path, fig, dpi=dpi)  # draws, so the layout is the saved one
        renderer = fig.canvas.get_renderer()
        titles = [ax.title for ax in fig.axes if ax.get_title()] + list(fig.texts)  # fig.texts: the suptitle
        boxes.extend((text.get_text(), text.get_window_extent(renderer)) for text in titles)

    monkeypatch.setattr(module, "write_figure", write_and_measure)
    dynamics = {"population": synthetic_dynamics("population"), "baseline": synthetic_dynamics("baseline")}
    module.plot_dynamics(dynamics, tmp_path / "dynamics.png")
    assert len(boxes) > 10 and any("grows with the number of teachers" in title for title, _ in boxes)
    for (first, a), (second, b) in combinations(boxes, 2):
        assert not a.overlaps(b), (first, second)
    assert _is_real_png(tmp_path / "dynamics.png")


def test_report_single_arm_without_dynamics(tmp_path):
    only_baseline = {k: v for k, v in SCORES.items() if not k.startswith("population")}
    results = synthetic_results(only_baseline)
    path = write_report(results, benchmark_metrics(results), {}, tmp_path)
    text = path.read_text()
    assert _is_real_png(tmp_path / "benchmarks.png")
    assert not (tmp_path / "dynamics.png").exists()
    assert "Only the baseline arm ran" in text and "No dynamics files" in text
    assert "## Per-job timings\n\nNo per-job timings (run under Snakemake for them)." in text
    page = (tmp_path / "report.html").read_text()  # the same as one page: tables rendered, the figure inlined
    assert "<table>" in page and "<td>gsm8k</td>" in page and "Per-job timings</h2>" in page
    assert page.count('<img src="data:image/png;base64,') == 1 and "benchmarks.png" not in page


def test_report_html_inlines_the_figures_it_finds(tmp_path):
    from populora.report.html import report_html

    (tmp_path / "a.png").write_bytes(b"\x89PNG fake")
    page = report_html("# Title <x>\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n![A](a.png)\n\n![B](b.png)\n", tmp_path)
    assert "<title>Title &lt;x&gt;</title>" in page and "<td>1</td>" in page
    assert '<img src="data:image/png;base64,iVBORyBmYWtl" alt="A"' in page  # base64 of the file's bytes
    assert '<img src="b.png" alt="B"' in page  # not there: the link stays


def test_report_stage(tmp_path):
    write_results(tmp_path / "bench", synthetic_results())
    for arm in ("population", "baseline"):
        dyn = tmp_path / "dynamics" / arm / "dynamics.json"
        dyn.parent.mkdir(parents=True)
        dyn.write_text(json.dumps(synthetic_dynamics(arm)))
    params = tmp_path / "params.yaml"
    params.write_text(SCORES_PARAMS)
    out, metrics = tmp_path / "report", tmp_path / "metrics.json"
    # the report reads bench_summary's metrics instead of computing them again: a marked value shows
    metrics.write_text(
        json.dumps({**benchmark_metrics(synthetic_results()), "bench.cruxeval_o.population.mean": 0.777})
    )
    timings = tmp_path / "benchmarks"  # what Snakemake's benchmark: files leave (one TSV per job)
    for stage, key, row in (
        ("propose", "population-000", "41.5\t0:00:41\t812.3"),
        ("propose", "baseline-000", "20.5\t0:00:20\t640.0"),
        ("pair", "population-000", "1.2\t0:00:01\tNA"),
    ):
        (timings / stage).mkdir(parents=True, exist_ok=True)
        (timings / stage / f"{key}.tsv").write_text(f"s\th:m:s\tmax_rss\n{row}\n")
    args = [
        "--params",
        str(params),
        "--results",
        str(tmp_path / "bench"),
        "--metrics",
        str(metrics),
        "--dynamics",
        str(tmp_path / "dynamics"),
        "--report",
        str(out),
    ]
    assert report_stage.main([*args, "--timings", str(timings)]) == 0
    assert (out / "report.md").is_file() and _is_real_png(out / "dynamics.png")
    text = (out / "report.md").read_text()
    assert "| cruxeval_o | 10 | 77.7 |" in text
    assert "| `propose` | 2 | 62.0 | 31.0 | 812 |" in text and "| **all stages** | 3 | 63.2 | 20.5 | 812 |" in text
    # under DVC the folder never exists: the report says so
    assert report_stage.main([*args, "--timings", str(tmp_path / "absent")]) == 0
    assert "No per-job timings (run under Snakemake for them)." in (out / "report.md").read_text()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".report")]  # no staging folder left


def test_no_detectable_difference_never_stands_beside_an_mde_of_zero():
    """Two arms with the same verdicts on every problem: a paired interval of width 0. The MDE beside the
    "no detectable difference" is the rule-of-three bound (3 / n), not 0; a continuous score that did not
    move at all says "identical scores" with no MDE."""
    from populora.report.tables import differences_table, gold_loglik_table

    metrics = {
        "bench.cruxeval_o.n": 200,
        "bench.cruxeval_o.diff.students_mean_minus_baseline.delta": 0.0,
        "bench.cruxeval_o.diff.students_mean_minus_baseline.low": 0.0,
        "bench.cruxeval_o.diff.students_mean_minus_baseline.high": 0.0,
        "bench.cruxeval_o.gold_loglik.diff.students_mean_minus_baseline.delta": 0.0,
        "bench.cruxeval_o.gold_loglik.diff.students_mean_minus_baseline.low": 0.0,
        "bench.cruxeval_o.gold_loglik.diff.students_mean_minus_baseline.high": 0.0,
    }
    row = differences_table(metrics).splitlines()[-1]
    assert (
        row
        == "| cruxeval_o | population students' mean - baseline | +0.0 | [+0.0, +0.0] | 1.5 | no detectable difference |"
    )
    assert gold_loglik_table(metrics).splitlines()[-1].endswith("| [+0.000, +0.000] | - | identical scores |")
