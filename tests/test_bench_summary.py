"""results/metrics.json: roles kept apart, arm-independent keys, intervals, paired differences."""

from __future__ import annotations

import json
from pathlib import Path
from statistics import mean

import pytest

from populora.bench import BenchError
from populora.core.refs import BASE_REF, SOLO, STUDENT, TEACHER, ModelRef
from populora.core.stats import paired_bootstrap, wilson_interval
from populora.report.metrics import benchmark_metrics, best_weakest_members, refs_of, role_members, score_table
from stages import bench_summary

N = 10
# model -> benchmark -> primary score (k / N). The teacher is far stronger than every student: it
# must never enter the headline (students). student0 is best overall, student1 weakest overall,
# although student1 is the best student on gsm8k: best/weakest follow the overall aggregate.
SCORES = {
    "base": {"humaneval_plus": 0.1, "mbpp_plus": 0.2, "gsm8k": 0.0, "cruxeval_o": 0.1},
    "baseline-solo": {"humaneval_plus": 0.2, "mbpp_plus": 0.2, "gsm8k": 0.1, "cruxeval_o": 0.2},
    "population-teacher0": {"humaneval_plus": 0.9, "mbpp_plus": 0.9, "gsm8k": 0.9, "cruxeval_o": 0.9},
    "population-student0": {"humaneval_plus": 0.3, "mbpp_plus": 0.3, "gsm8k": 0.1, "cruxeval_o": 0.4},
    "population-student1": {"humaneval_plus": 0.1, "mbpp_plus": 0.1, "gsm8k": 0.4, "cruxeval_o": 0.1},
}


REFS = {
    ref.name: ref
    for ref in (
        BASE_REF,
        ModelRef("baseline", SOLO, SOLO),
        *(ModelRef("population", f"{role}{i}", role) for role in (TEACHER, STUDENT) for i in range(8)),
    )
}


def synthetic_results(scores: dict = SCORES, n: int = N) -> list[dict]:
    """Results as stages/bench.py writes them: problem i is solved when i < score * n."""
    results = []
    for model, per_bench in scores.items():
        for bench, value in per_bench.items():
            correct = round(value * n)
            metric = (
                {"pass@1": value, "base_pass@1": value, "plus_pass@1": value}
                if bench not in ("gsm8k", "math500")
                else {"accuracy": value}
            )
            results.append(
                {
                    **REFS[model].fields(),
                    "benchmark": bench,
                    "n": n,
                    "limit": n,
                    "metrics": metric,
                    "wall_s": 1.0,
                    "correct": correct,
                    "per_problem": {f"p{i}": int(i < correct) for i in range(n)},
                }
            )
    return results


# params matching SCORES: one teacher, two students, the four benchmarks
SCORES_PARAMS = (
    "population:\n  teachers: 1\n  students: 2\n"  # every member benchmarked, each benchmark its own job
    "bench:\n  benchmarks: [humaneval_plus, mbpp_plus, gsm8k, cruxeval_o]\n  roles: [students, teachers]\n"
    "  together: []\n"
)


def write_results(bench_dir: Path, results: list[dict]) -> None:
    """Lay results out as the bench stages write them: <base|arm>/<benchmark>/<model>.json."""
    for result in results:
        path = bench_dir / result["arm"] / result["benchmark"] / f"{result['model']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result))


def test_roles_come_from_the_results_refs():
    refs = refs_of(synthetic_results())
    assert [refs[m].role for m in ("base", "baseline-solo", "population-teacher0", "population-student0")] == [
        None,
        "solo",
        "teacher",
        "student",
    ]
    assert role_members(refs.values(), "baseline") == {"students": ["baseline-solo"], "teachers": ["baseline-solo"]}
    assert role_members(refs.values(), "population") == {
        "students": ["population-student0", "population-student1"],
        "teachers": ["population-teacher0"],
    }


def test_headline_is_students_and_teachers_are_separate():
    metrics = benchmark_metrics(synthetic_results())
    assert metrics["bench.humaneval_plus.population.mean"] == pytest.approx((0.3 + 0.1) / 2, abs=1e-6)  # no teacher
    assert metrics["bench.humaneval_plus.population.students.mean"] == metrics["bench.humaneval_plus.population.mean"]
    assert metrics["bench.humaneval_plus.population.best"] == 0.3  # student0
    assert metrics["bench.humaneval_plus.population.weakest"] == 0.1  # student1
    assert metrics["bench.gsm8k.population.best"] == 0.1  # student0, not the gsm8k maximum 0.4
    assert metrics["bench.gsm8k.population.weakest"] == 0.4  # student1 is weakest overall
    assert metrics["bench.gsm8k.population.teachers.mean"] == 0.9
    assert metrics["bench.humaneval_plus.baseline"] == 0.2
    assert metrics["bench.humaneval_plus.base"] == 0.1
    assert metrics["bench.humaneval_plus.member.population-teacher0"] == 0.9
    assert metrics["bench.cruxeval_o.n"] == N
    results = synthetic_results()
    assert best_weakest_members(score_table(results)[0], refs_of(results)) == (
        "population-student0",
        "population-student1",
    )
    # with both arms there is no arm-independent key: it could describe either arm
    assert "bench.gsm8k.mean" not in metrics and "bench.gsm8k.students.mean" not in metrics


def test_averages_and_overall_include_the_cruxeval_group():
    metrics = benchmark_metrics(synthetic_results())
    # student0: code 0.3, math 0.1, cruxeval 0.4 -> overall 0.8 / 3
    assert metrics["avg.code.member.population-student0"] == pytest.approx(0.3, abs=1e-6)
    assert metrics["avg.cruxeval.member.population-student0"] == pytest.approx(0.4, abs=1e-6)
    assert metrics["avg.overall.population.best"] == pytest.approx(0.8 / 3, abs=1e-6)
    assert metrics["avg.overall.baseline"] == pytest.approx((0.2 + 0.1 + 0.2) / 3, abs=1e-6)
    students = [0.8 / 3, (0.1 + 0.4 + 0.1) / 3]
    assert metrics["avg.overall.population.mean"] == pytest.approx(sum(students) / 2, abs=1e-6)
    assert metrics["avg.overall.population.mean_minus_baseline"] == pytest.approx(sum(students) / 2 - 0.5 / 3, abs=1e-6)
    assert metrics["avg.overall.population.teachers.mean"] == pytest.approx(0.9, abs=1e-6)


def test_every_result_has_its_count_and_wilson_interval():
    metrics = benchmark_metrics(synthetic_results())
    assert metrics["bench.cruxeval_o.correct.population-student0"] == 4
    assert (
        metrics["bench.cruxeval_o.ci.population-student0.low"],
        metrics["bench.cruxeval_o.ci.population-student0.high"],
    ) == wilson_interval(4, N)
    low, high = wilson_interval(4, N)
    assert low < 0.4 < high and high - low > 0.4  # 10 problems: a wide interval
    assert metrics["bench.gsm8k.ci.base.low"] == 0.0 and metrics["bench.gsm8k.ci.base.high"] > 0.2


def test_paired_differences_follow_the_problems():
    metrics = benchmark_metrics(synthetic_results())
    # cruxeval_o: students solve p0..p3 and p0, baseline p0..p1 -> per problem (1+1)/2-1, 0, (1+0)/2-0 ...
    students = [(int(i < 4) + int(i < 1)) / 2 for i in range(N)]
    baseline = [int(i < 2) for i in range(N)]
    expected = paired_bootstrap([s - b for s, b in zip(students, baseline)])
    key = "bench.cruxeval_o.diff.students_mean_minus_baseline"
    assert (metrics[f"{key}.delta"], metrics[f"{key}.low"], metrics[f"{key}.high"]) == expected
    assert metrics[f"{key}.delta"] == pytest.approx(0.25 - 0.2, abs=1e-6)
    assert metrics["bench.cruxeval_o.diff.best_minus_baseline.delta"] == pytest.approx(0.4 - 0.2, abs=1e-6)
    assert metrics["bench.cruxeval_o.diff.weakest_minus_baseline.delta"] == pytest.approx(0.1 - 0.2, abs=1e-6)
    for name in ("students_mean_minus_baseline", "best_minus_baseline", "weakest_minus_baseline"):
        k = f"bench.gsm8k.diff.{name}"
        assert metrics[f"{k}.low"] <= metrics[f"{k}.delta"] <= metrics[f"{k}.high"]


def test_two_arm_runs_also_say_what_each_arm_did_to_the_base():
    metrics = benchmark_metrics(synthetic_results())
    # cruxeval_o: base solves p0, students' mean (p0..p3 and p0)/2, baseline p0..p1
    key = "bench.cruxeval_o.diff.students_mean_minus_base"
    assert metrics[f"{key}.delta"] == pytest.approx(0.25 - 0.1, abs=1e-6)
    assert metrics["bench.cruxeval_o.diff.baseline_minus_base.delta"] == pytest.approx(0.2 - 0.1, abs=1e-6)
    assert metrics[f"{key}.low"] <= metrics[f"{key}.delta"] <= metrics[f"{key}.high"]


def test_pairing_narrows_the_interval_of_identical_verdicts():
    # Two models solving exactly the same 3 of 10 problems: each score's Wilson interval is ~50 points
    # wide, but paired on the same problems the difference is exactly 0 with a zero-width interval.
    same = {
        "base": {"cruxeval_i": 0.3},
        "baseline-solo": {"cruxeval_i": 0.3},
        "population-student0": {"cruxeval_i": 0.3},
    }
    metrics = benchmark_metrics(synthetic_results(same))
    key = "bench.cruxeval_i.diff.students_mean_minus_baseline"
    assert (metrics[f"{key}.delta"], metrics[f"{key}.low"], metrics[f"{key}.high"]) == (0.0, 0.0, 0.0)
    assert metrics["bench.cruxeval_i.ci.baseline-solo.high"] - metrics["bench.cruxeval_i.ci.baseline-solo.low"] > 0.4
    # a difference on every problem is detected: all 10 solved against none
    apart = {"baseline-solo": {"cruxeval_i": 0.0}, "population-student0": {"cruxeval_i": 1.0}}
    metrics = benchmark_metrics(synthetic_results(apart))
    assert metrics[f"{key}.low"] == metrics[f"{key}.high"] == 1.0


def test_one_arm_runs_have_arm_independent_keys():
    only_baseline = {k: v for k, v in SCORES.items() if not k.startswith("population")}
    metrics = benchmark_metrics(synthetic_results(only_baseline))
    for key in ("mean", "best", "weakest", "students.mean", "students.best", "teachers.mean", "teachers.weakest"):
        assert metrics[f"bench.gsm8k.{key}"] == 0.1, key  # every statistic is the solo adapter
    assert metrics["bench.gsm8k.baseline"] == 0.1 and metrics["bench.gsm8k.base"] == 0.0
    assert metrics["avg.overall.mean"] == metrics["avg.overall.baseline"]
    assert metrics["bench.cruxeval_o.diff.mean_minus_base.delta"] == pytest.approx(0.1, abs=1e-6)
    assert not any(".population." in key for key in metrics)

    only_population = {k: v for k, v in SCORES.items() if k != "baseline-solo"}
    metrics = benchmark_metrics(synthetic_results(only_population))
    assert metrics["bench.gsm8k.mean"] == metrics["bench.gsm8k.population.mean"] == pytest.approx(0.25, abs=1e-6)
    assert metrics["bench.gsm8k.best"] == 0.1 and metrics["bench.gsm8k.weakest"] == 0.4
    assert metrics["bench.gsm8k.teachers.mean"] == 0.9
    assert not any(key.endswith(".baseline") or "minus_baseline" in key for key in metrics)


def test_keys_are_sorted_numbers_and_stable():
    first = benchmark_metrics(synthetic_results())
    second = benchmark_metrics(list(reversed(synthetic_results())))
    assert first == second and list(first) == sorted(first)
    assert all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in first.values())


def test_old_results_without_verdicts_still_summarise():
    results = [{k: v for k, v in r.items() if k not in ("per_problem", "correct")} for r in synthetic_results()]
    metrics = benchmark_metrics(results)
    assert "bench.gsm8k.population.mean" in metrics
    assert not any(".diff." in key or ".ci." in key for key in metrics)


def test_refuses_incomplete_duplicate_or_unpaired_results():
    results = synthetic_results()
    with pytest.raises(BenchError, match="no result for gsm8k"):
        benchmark_metrics([r for r in results if not (r["model"] == "base" and r["benchmark"] == "gsm8k")])
    with pytest.raises(BenchError, match="two results"):
        benchmark_metrics(results + results[:1])
    shifted = [
        dict(r, per_problem={f"q{i}": 0 for i in range(N)}, correct=0, metrics={"accuracy": 0.0})
        if r["model"] == "base" and r["benchmark"] == "gsm8k"
        else r
        for r in results
    ]
    with pytest.raises(BenchError, match="different problems"):
        benchmark_metrics(shifted)


def test_bench_summary_stage(tmp_path):
    write_results(tmp_path / "bench", synthetic_results())
    # an earlier run's arm folder the params do not ask for is ignored
    write_results(tmp_path / "bench", [{**synthetic_results()[0], "model": "population-teacher7"}])
    out = tmp_path / "metrics.json"
    params = tmp_path / "params.yaml"
    params.write_text(SCORES_PARAMS)
    assert (
        bench_summary.main(
            [
                "--params",
                str(params),
                "--results",
                str(tmp_path / "bench"),
                "--metrics",
                str(out),
                "--dynamics",
                str(tmp_path / "dynamics"),
                "--headline",
                str(tmp_path / "headline.json"),
                "--progress",
                str(tmp_path / "progress.json"),
            ]
        )
        == 0
    )
    assert json.loads(out.read_text()) == benchmark_metrics(synthetic_results())
    headline = json.loads((tmp_path / "headline.json").read_text())
    full = benchmark_metrics(synthetic_results())
    assert len(headline) <= 40 and headline["math.mean"] == full["avg.math.population.mean"]
    assert json.loads((tmp_path / "progress.json").read_text()) == {}  # no arm's dynamics table here
    assert headline["overall.mean_minus_baseline"] == pytest.approx(
        full["avg.overall.population.mean_minus_baseline"], abs=2e-6
    )
    # one arm asked for: its results only, under the arm-independent keys
    params.write_text(SCORES_PARAMS + "dag:\n  arms: [baseline]\n")
    assert (
        bench_summary.main(
            [
                "--params",
                str(params),
                "--results",
                str(tmp_path / "bench"),
                "--metrics",
                str(out),
                "--dynamics",
                str(tmp_path / "dynamics"),
                "--headline",
                str(tmp_path / "headline.json"),
                "--progress",
                str(tmp_path / "progress.json"),
            ]
        )
        == 0
    )
    one_arm = json.loads(out.read_text())
    assert one_arm["bench.gsm8k.mean"] == 0.1 and "bench.gsm8k.member.population-student0" not in one_arm


def test_a_missing_result_fails_naming_the_file(tmp_path):
    write_results(tmp_path / "bench", synthetic_results()[1:])
    params = tmp_path / "params.yaml"
    params.write_text(SCORES_PARAMS)
    log = tmp_path / "summary.log"
    assert (
        bench_summary.main(
            [
                "--params",
                str(params),
                "--results",
                str(tmp_path / "bench"),
                "--metrics",
                str(tmp_path / "metrics.json"),
                "--dynamics",
                str(tmp_path / "dynamics"),
                "--headline",
                str(tmp_path / "headline.json"),
                "--progress",
                str(tmp_path / "progress.json"),
                "--log",
                str(log),
            ]
        )
        == 1
    )
    first = synthetic_results()[0]
    assert f"{first['benchmark']}/{first['model']}.json" in log.read_text() and "Fix:" in log.read_text()
    assert not (tmp_path / "metrics.json").exists()


def test_members_against_the_base_carry_exact_mcnemar_and_the_gold_loglik_is_compared_paired():
    from populora.report.tables import gold_loglik_table, versus_base_table

    results = synthetic_results()
    for result in results:
        if result["benchmark"] == "cruxeval_o":  # the gold answer's log-prob: higher for the better models
            shift = SCORES[result["model"]]["cruxeval_o"]
            result["per_problem_gold_logprob"] = {f"p{i}": -5.0 + shift + 0.01 * (i % 7) for i in range(N)}
    metrics = benchmark_metrics(results)
    stem = "bench.cruxeval_o.vs_base.population-student0"
    solved = {m: round(SCORES[m]["cruxeval_o"] * N) for m in SCORES}
    assert metrics[f"{stem}.member_only"] == solved["population-student0"] - solved["base"]
    assert metrics[f"{stem}.base_only"] == 0 and 0 < metrics[f"{stem}.p"] < 1
    assert metrics["bench.cruxeval_o.gold_loglik.base"] == pytest.approx(-4.9 + 0.01 * mean(i % 7 for i in range(N)))
    diff = "bench.cruxeval_o.gold_loglik.diff.students_mean_minus_baseline"
    assert metrics[f"{diff}.delta"] == pytest.approx((0.4 + 0.1) / 2 - 0.2)
    assert metrics[f"{diff}.low"] == metrics[f"{diff}.high"] == metrics[f"{diff}.delta"]  # the same shift everywhere
    assert "cruxeval_o" in gold_loglik_table(metrics) and "population-student0" in versus_base_table(metrics)
    assert not any(".gold_loglik." in k for k in benchmark_metrics(synthetic_results()))  # only where measured
