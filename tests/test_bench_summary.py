"""results/metrics.json: keys, population mean/best/weakest, baseline, base, averages, single arm."""

from __future__ import annotations

import json

import pytest

from populora.bench import BenchError
from populora.bench.summary import best_weakest_members, score_table, summarize
from stages import bench_summary

# model -> benchmark -> primary score. teacher1 is best overall, student0 weakest overall, although
# student0 is the best member on gsm8k: best/weakest follow the overall aggregate, not per benchmark.
SCORES = {
    "base": {"humaneval_plus": 0.10, "mbpp_plus": 0.20, "gsm8k": 0.05, "math500": 0.00},
    "baseline-solo": {"humaneval_plus": 0.20, "mbpp_plus": 0.20, "gsm8k": 0.10, "math500": 0.10},
    "population-teacher0": {"humaneval_plus": 0.30, "mbpp_plus": 0.30, "gsm8k": 0.10, "math500": 0.10},
    "population-teacher1": {"humaneval_plus": 0.50, "mbpp_plus": 0.40, "gsm8k": 0.20, "math500": 0.20},
    "population-student0": {"humaneval_plus": 0.10, "mbpp_plus": 0.10, "gsm8k": 0.40, "math500": 0.00},
}


def synthetic_results(scores: dict = SCORES, n: int = 4) -> list[dict]:
    results = []
    for model, per_bench in scores.items():
        for bench, value in per_bench.items():
            metric = {"pass@1": value, "base_pass@1": value, "plus_pass@1": value} if bench.endswith("_plus") else {"accuracy": value}
            results.append({"model": model, "benchmark": bench, "n": n, "limit": n, "metrics": metric, "wall_s": 1.0})
    return results


def test_summary_population_statistics():
    metrics = summarize(synthetic_results())
    assert metrics["bench.humaneval_plus.population.mean"] == pytest.approx((0.3 + 0.5 + 0.1) / 3)
    assert metrics["bench.humaneval_plus.population.best"] == 0.5        # teacher1
    assert metrics["bench.humaneval_plus.population.weakest"] == 0.1     # student0
    assert metrics["bench.gsm8k.population.best"] == 0.2                 # teacher1, not the gsm8k maximum 0.4
    assert metrics["bench.gsm8k.population.weakest"] == 0.4              # student0 is weakest overall
    assert metrics["bench.humaneval_plus.baseline"] == 0.2
    assert metrics["bench.humaneval_plus.base"] == 0.1
    assert metrics["bench.humaneval_plus.member.population-teacher0"] == 0.3
    assert metrics["bench.humaneval_plus.member.baseline-solo"] == 0.2
    assert metrics["bench.math500.n"] == 4
    assert best_weakest_members(score_table(synthetic_results())[0]) == ("population-teacher1", "population-student0")


def test_summary_averages():
    metrics = summarize(synthetic_results())
    # teacher1: code (0.5 + 0.4) / 2 = 0.45, math (0.2 + 0.2) / 2 = 0.2, overall = mean of the two.
    assert metrics["avg.code.member.population-teacher1"] == pytest.approx(0.45)
    assert metrics["avg.math.member.population-teacher1"] == pytest.approx(0.2)
    assert metrics["avg.overall.population.best"] == pytest.approx(0.325)
    assert metrics["avg.overall.baseline"] == pytest.approx((0.2 + 0.1) / 2)
    overall_members = [(0.3 + 0.1) / 2, 0.325, (0.1 + 0.2) / 2]
    assert metrics["avg.overall.population.mean"] == pytest.approx(sum(overall_members) / 3)
    assert metrics["avg.overall.population.mean_minus_baseline"] == pytest.approx(sum(overall_members) / 3 - 0.15)
    assert metrics["avg.overall.population.weakest_minus_baseline"] == pytest.approx(0.15 - 0.15, abs=1e-9)


def test_summary_keys_are_sorted_numbers_and_stable():
    first = summarize(synthetic_results())
    second = summarize(list(reversed(synthetic_results())))
    assert first == second and list(first) == sorted(first)
    assert all(isinstance(v, (int, float)) for v in first.values())


def test_summary_single_arm():
    only_baseline = {k: v for k, v in SCORES.items() if not k.startswith("population")}
    metrics = summarize(synthetic_results(only_baseline))
    assert "bench.gsm8k.baseline" in metrics and "bench.gsm8k.base" in metrics
    assert not any(".population." in key for key in metrics)
    only_population = {k: v for k, v in SCORES.items() if k.startswith("population")}
    metrics = summarize(synthetic_results(only_population))
    assert "bench.gsm8k.population.mean" in metrics
    assert not any(key.endswith((".baseline", ".base")) for key in metrics)


def test_summary_refuses_incomplete_or_duplicate_results():
    results = synthetic_results()
    with pytest.raises(BenchError, match="no result for gsm8k"):
        summarize([r for r in results if not (r["model"] == "base" and r["benchmark"] == "gsm8k")])
    with pytest.raises(BenchError, match="two results"):
        summarize(results + results[:1])


def test_bench_summary_stage(tmp_path):
    paths = []
    for index, result in enumerate(synthetic_results()):
        path = tmp_path / "bench" / result["model"] / f"{result['benchmark']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(result))
        paths.append(str(path))
    out = tmp_path / "metrics.json"
    params = tmp_path / "params.yaml"
    params.write_text("{}\n")
    assert bench_summary.main(["--params", str(params), "--results", *paths, "--out", str(out)]) == 0
    assert json.loads(out.read_text()) == summarize(synthetic_results())
