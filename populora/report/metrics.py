"""Benchmark metric maths: the flat `results/metrics.json` (what `dvc metrics diff` compares).
The figure is in `populora.report.figures`, the report's tables in `populora.report.tables`.

Input: the per-(model, benchmark) result JSONs of stages/bench.py. Each benchmark contributes its
primary metric (code: EvalPlus `pass@1` on base + extra tests, LiveCodeBench `pass@1`; math:
`accuracy`; CRUXEval: `pass@1`), a fraction, with `n`, `correct`, and `per_problem` verdicts
(problem id -> 1/0), and the model's `populora.core.refs.ModelRef` fields (`model`, `arm`, `slot`,
`role`): `base`, or `<arm>-<slot>` of arm `population` (slots `teacher0..`, `student0..`) or
`baseline` (slot `solo`, which both proposes and solves). Roles are read from those fields.

Roles. Benchmarks measure solving, and only students (and the baseline's solo adapter) are trained
to solve; teachers are trained to propose. So the headline `mean` / `best` / `weakest` of an arm is
over its **students**; teachers are reported separately under `teachers.*` and never mixed in.
For the baseline every statistic is its single adapter.

Keys (sorted, numbers only; <p> is `bench.<b>` or `avg.<group>`, group = code, math, cruxeval, overall):

  Always
    bench.<b>.n                               problems evaluated (the same for every model)
    <p>.base                                  the bare base model
    <p>.member.<model>                        every trained model of every arm
    bench.<b>.correct.<model>                 problems solved, per model (base included)
    bench.<b>.ci.<model>.low|high             95% Wilson interval of that model's score

  Arm-independent (exactly one trained arm ran: `dvc exp run -S 'dag.arms=[baseline]'` vs `[population]`)
    <p>.mean|best|weakest                     the arm's students (baseline: its solo adapter)
    <p>.students.mean|best|weakest            the same, named explicitly
    <p>.teachers.mean|best|weakest            the arm's teachers (baseline: its solo adapter)
    bench.<b>.diff.mean_minus_base.delta|low|high      students' mean minus base, per problem, paired bootstrap 95%

  Side by side (per arm, whenever the arm ran)
    <p>.population.mean|best|weakest          the population's students (headline)
    <p>.population.students.mean|best|weakest same, named explicitly
    <p>.population.teachers.mean|best|weakest the population's teachers
    <p>.baseline                              the baseline's solo adapter

  Per member against the base (per-problem verdicts: exact McNemar test)
    bench.<b>.vs_base.<model>.member_only|base_only|p   problems only one of them solves; two-sided exact p

  Gold-answer log-likelihood (CRUXEval: the log-prob of the gold answer in the benchmark's prompt, nats)
    bench.<b>.gold_loglik.base|member.<model>   mean over problems
    bench.<b>.gold_loglik.diff.<name>.delta|low|high   the paired differences below, on this measure

  Paired differences (both arms ran; same problems, paired bootstrap 95% over problems)
    bench.<b>.diff.students_mean_minus_baseline.delta|low|high
    bench.<b>.diff.best_minus_baseline.delta|low|high
    bench.<b>.diff.weakest_minus_baseline.delta|low|high
    avg.overall.population.mean_minus_baseline, avg.overall.population.best_minus_baseline,
    avg.overall.population.weakest_minus_baseline      (point differences of the aggregates)

A model's aggregate over a group is the mean of its scores on the group's benchmarks; `overall`
is the mean of the group averages present (AZR's "Total Avg" is code, HumanEval+, MBPP+ and
LiveCodeBench, and math; CRUXEval, when it ran, is a third group). Best and weakest are chosen once per role by overall aggregate (ties broken
by name), so every `best` key describes the same model, as the paper's "even the weakest member
beats the baseline on aggregate" requires; the intervals of `best` / `weakest` differences do not
account for that selection. A difference whose interval covers 0 is no detectable difference.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from statistics import mean

from populora.bench import (
    CODE_BENCHMARKS,
    CRUXEVAL_BENCHMARKS,
    LIVECODEBENCH_BENCHMARKS,
    MATH_BENCHMARKS,
    BenchError,
    benchmark_kind,
    primary_metric,
)
from populora.core.refs import BASE, ModelRef
from populora.core.stats import paired_bootstrap, wilson_interval

POPULATION = "population"


BASELINE = "baseline"


ROLES = ("students", "teachers")


GROUPS = ("code", "math", "cruxeval", "overall")


def read_results(bench_dir: str | Path, models: dict[str, list[ModelRef]], benchmarks, together=()) -> list[dict]:
    """The result of every model on every benchmark: `<bench_dir>/<folder>/<benchmark>/<model>.json`
    for `models` = folder -> model refs (`populora.core.topology.benchmarked_models`), and for a benchmark of
    `together` (`populora.core.topology.together_benchmarks`) `<folder>/together/<benchmark>/<model>.json`. Folders
    of arms not asked for (an earlier run's) are ignored; a missing result fails, naming the files."""
    from populora.core.benchmark_data import result_folder
    from populora.core.io import read_json

    paths = [
        Path(bench_dir) / folder / result_folder(bench, together) / f"{ref.name}.json"
        for folder, refs in models.items()
        for bench in benchmarks
        for ref in refs
    ]
    missing = [str(path) for path in paths if not path.is_file()]
    if missing:
        raise BenchError(
            f"{len(missing)} benchmark result(s) missing: {', '.join(missing[:4])}"
            f"{' ...' if len(missing) > 4 else ''}. Fix: run the bench stages first "
            "(snakemake or dvc repro reach them through this stage)."
        )
    return [read_json(path) for path in paths]


def refs_of(results: list[dict]) -> dict[str, ModelRef]:
    """{model name: ModelRef} of the models the results describe (their `model/arm/slot/role` fields)."""
    try:
        return {result["model"]: ModelRef.from_fields(result) for result in results}
    except (KeyError, ValueError) as error:
        raise BenchError(str(error).strip("'\"")) from None


def role_members(refs: Iterable[ModelRef], arm: str) -> dict[str, list[str]]:
    """{'students': [...], 'teachers': [...]} model names of one arm; a solo adapter is in both."""
    own = sorted((ref for ref in refs if ref.arm == arm), key=lambda ref: ref.name)
    return {"students": [ref.name for ref in own if ref.solves], "teachers": [ref.name for ref in own if ref.proposes]}


def score_table(results: list[dict]) -> tuple[dict[str, dict[str, float]], dict[str, int]]:
    """{model: {benchmark: primary score}} and {benchmark: n}; errors on duplicates or gaps."""
    table: dict[str, dict[str, float]] = {}
    counts: dict[str, int] = {}
    for result in results:
        model, bench = result["model"], result["benchmark"]
        if bench in table.setdefault(model, {}):
            raise BenchError(f"two results for {model} on {bench}. Fix: pass each result file once.")
        table[model][bench] = float(result["metrics"][primary_metric(bench)])
        counts[bench] = max(counts.get(bench, 0), int(result["n"]))
    benchmarks = set(counts)
    for model, scores in table.items():
        missing = benchmarks - set(scores)
        if missing:
            raise BenchError(
                f"{model} has no result for {', '.join(sorted(missing))}; aggregates would not be "
                "comparable. Fix: run the bench stage for those pairs."
            )
    return table, counts


def problem_table(results: list[dict]) -> dict[str, dict[str, dict[str, int]]]:
    """{benchmark: {model: {problem id: 1/0}}} for the results that carry per-problem verdicts."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for result in results:
        if isinstance(result.get("per_problem"), dict):
            out.setdefault(result["benchmark"], {})[result["model"]] = {
                str(k): int(v) for k, v in result["per_problem"].items()
            }
    return out


def gold_loglik_table(results: list[dict]) -> dict[str, dict[str, dict[str, float]]]:
    """{benchmark: {model: {problem id: log-prob of the gold answer}}} of the results that carry one
    (CRUXEval, `populora.bench.gold_loglik`)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    for result in results:
        if isinstance(result.get("per_problem_gold_logprob"), dict):
            out.setdefault(result["benchmark"], {})[result["model"]] = {
                str(k): float(v) for k, v in result["per_problem_gold_logprob"].items()
            }
    return out


def versus_base(bench: str, verdicts: dict[str, dict[str, int]], out: dict) -> None:
    """`bench.<b>.vs_base.<model>.member_only|base_only|p`: the problems only the member or only the base
    solves, and the exact McNemar p of that split, for every benchmarked member."""
    from populora.core.stats import mcnemar_exact

    if BASE not in verdicts:
        return
    ids = list(verdicts[BASE])
    for model, own in verdicts.items():
        if model == BASE or set(own) != set(ids):
            continue
        test = mcnemar_exact([own[i] for i in ids], [verdicts[BASE][i] for i in ids])
        prefix = f"bench.{bench}.vs_base.{model}"
        out[f"{prefix}.member_only"], out[f"{prefix}.base_only"], out[f"{prefix}.p"] = (
            test["first_only"],
            test["second_only"],
            test["p"],
        )


def aggregates(scores: dict[str, float]) -> dict[str, float]:
    """Per-group averages of one model (code, math, cruxeval), and overall = mean of those present."""
    groups: dict[str, list[float]] = {}
    for bench, value in scores.items():
        groups.setdefault(benchmark_kind(bench), []).append(value)
    out = {kind: mean(values) for kind, values in groups.items()}
    out["overall"] = mean(out.values())
    return out


def score_columns(table: dict[str, dict[str, float]]) -> list[str]:
    """Benchmarks in the canonical order, then the group averages present."""
    order = (*CODE_BENCHMARKS, *LIVECODEBENCH_BENCHMARKS, *MATH_BENCHMARKS, *CRUXEVAL_BENCHMARKS)
    benches = [b for b in order if any(b in s for s in table.values())]
    groups = {g for scores in table.values() for g in aggregates(scores)}
    return benches + [f"avg.{g}" for g in ("code", "math", "cruxeval", "overall") if g in groups]


def column_value(table, model: str, column: str) -> float:
    """A model's score in a column of `score_columns` (a benchmark, or `avg.<group>`)."""
    if column.startswith("avg."):
        return aggregates(table[model])[column[4:]]
    return table[model][column]


def extremes(table: dict[str, dict[str, float]], models: list[str]) -> tuple[str, str] | None:
    """(best, weakest) of `models` by overall aggregate, ties broken by name; None when empty."""
    if not models:
        return None
    overall = {m: aggregates(table[m])["overall"] for m in models}
    return min(models, key=lambda m: (-overall[m], m)), min(models, key=lambda m: (overall[m], m))


def best_weakest_members(
    table: dict[str, dict[str, float]], refs: dict[str, ModelRef], role: str = "students"
) -> tuple[str, str] | None:
    """Names of the population's best and weakest students (or teachers) by overall aggregate, or None."""
    return extremes(table, role_members((refs[m] for m in table), POPULATION)[role])


def _role_stats(values: dict[str, float], members: list[str], chosen: tuple[str, str] | None) -> dict[str, float]:
    if not members or chosen is None:
        return {}
    return {"mean": mean(values[m] for m in members), "best": values[chosen[0]], "weakest": values[chosen[1]]}


def arm_statistics(
    table: dict[str, dict[str, float]], values: dict[str, float], refs: dict[str, ModelRef], arm: str
) -> dict[str, float]:
    """`mean/best/weakest` (students), `students.*` and `teachers.*` of one arm for one benchmark or group."""
    roles = role_members((refs[m] for m in values), arm)
    out: dict[str, float] = {}
    for role in ROLES:
        for key, value in _role_stats(values, roles[role], extremes(table, roles[role])).items():
            out[f"{role}.{key}"] = value
            if role == "students":
                out[key] = value
    return out


def _per_problem_mean(verdicts: Mapping[str, Mapping[str, float]], models: list[str], ids: list[str]) -> list[float]:
    return [mean(verdicts[m][i] for m in models) for i in ids]


def _paired(prefix: str, name: str, left: list[float], right: list[float], out: dict) -> None:
    delta, low, high = paired_bootstrap([a - b for a, b in zip(left, right)])
    out[f"{prefix}.diff.{name}.delta"], out[f"{prefix}.diff.{name}.low"], out[f"{prefix}.diff.{name}.high"] = (
        delta,
        low,
        high,
    )


def paired_differences(
    bench: str,
    verdicts: Mapping[str, Mapping[str, float]],
    table: dict[str, dict[str, float]],
    refs: dict[str, ModelRef],
    arms: list[str],
    out: dict,
    prefix: str | None = None,
) -> None:
    """The bench.<b>.diff.* keys (see the module docstring); skipped when verdicts are missing or
    were not taken on the same problems. `verdicts` may be any per-problem value (the gold-answer
    log-likelihood under `prefix` bench.<b>.gold_loglik); best and weakest stay the pass@1 choice."""
    models = [m for m in table if m in verdicts]
    if len(models) != len(table):
        return
    ids = list(verdicts[models[0]])
    if any(set(verdicts[m]) != set(ids) for m in models):
        raise BenchError(
            f"{bench}: models were scored on different problems. Fix: run every model with the same "
            "bench.limit / bench.limits and data."
        )
    prefix = prefix or f"bench.{bench}"
    students = {arm: role_members((refs[m] for m in table), arm)["students"] for arm in arms}
    if POPULATION in arms and BASELINE in arms and students[POPULATION] and students[BASELINE]:
        baseline = _per_problem_mean(verdicts, students[BASELINE], ids)
        _paired(
            prefix,
            "students_mean_minus_baseline",
            _per_problem_mean(verdicts, students[POPULATION], ids),
            baseline,
            out,
        )
        pair = extremes(table, students[POPULATION])
        assert pair is not None  # the population has students (checked above)
        best, weakest = pair
        _paired(prefix, "best_minus_baseline", [verdicts[best][i] for i in ids], baseline, out)
        _paired(prefix, "weakest_minus_baseline", [verdicts[weakest][i] for i in ids], baseline, out)
        if BASE in verdicts:  # what each arm did to the base model it started from
            base = [verdicts[BASE][i] for i in ids]
            _paired(
                prefix, "students_mean_minus_base", _per_problem_mean(verdicts, students[POPULATION], ids), base, out
            )
            _paired(prefix, "baseline_minus_base", baseline, base, out)
    elif len(arms) == 1 and BASE in verdicts and students[arms[0]]:
        _paired(
            prefix,
            "mean_minus_base",
            _per_problem_mean(verdicts, students[arms[0]], ids),
            [verdicts[BASE][i] for i in ids],
            out,
        )


def _group_values(
    prefix: str,
    values: dict[str, float],
    table: dict[str, dict[str, float]],
    refs: dict[str, ModelRef],
    arms: list[str],
    out: dict,
) -> None:
    """Keys of one benchmark or aggregate: base, members, per-arm statistics, arm-independent copies."""
    if BASE in values:
        out[f"{prefix}.base"] = values[BASE]
    for model in values:
        if model != BASE:
            out[f"{prefix}.member.{model}"] = values[model]
    for arm in arms:
        stats = arm_statistics(table, values, refs, arm)
        if arm == BASELINE and "mean" in stats:
            out[f"{prefix}.baseline"] = stats["mean"]
        elif arm == POPULATION:
            out.update({f"{prefix}.population.{key}": value for key, value in stats.items()})
        if len(arms) == 1:
            out.update({f"{prefix}.{key}": value for key, value in stats.items()})


def benchmark_metrics(results: list[dict]) -> dict[str, float]:
    """The flat metrics dict (see the module docstring), values rounded to 6 decimals."""
    if not results:
        raise BenchError("no benchmark results given. Fix: pass the bench stage outputs with --results.")
    table, counts = score_table(results)
    verdicts = problem_table(results)
    gold = gold_loglik_table(results)
    refs = refs_of(results)
    arms = [arm for arm in (POPULATION, BASELINE) if any(ref.arm == arm for ref in refs.values())]
    out: dict[str, float] = {}
    for result in results:
        if "correct" in result:
            prefix, model = f"bench.{result['benchmark']}", result["model"]
            out[f"{prefix}.correct.{model}"] = int(result["correct"])
            out[f"{prefix}.ci.{model}.low"], out[f"{prefix}.ci.{model}.high"] = wilson_interval(
                int(result["correct"]), int(result["n"])
            )
        for key, value in (result.get("diagnostics") or {}).items():  # CRUXEval: format and copying counts
            out[f"bench.{result['benchmark']}.diag.{result['model']}.{key}"] = value
        raw_base_metrics(result, out)
    for bench in sorted(counts):
        out[f"bench.{bench}.n"] = counts[bench]
        _group_values(f"bench.{bench}", {m: table[m][bench] for m in table}, table, refs, arms, out)
        if bench in verdicts:
            paired_differences(bench, verdicts[bench], table, refs, arms, out)
            versus_base(bench, verdicts[bench], out)
        if bench in gold and set(gold[bench]) == set(table):  # every model scored: a paired, continuous measure
            for model, values in gold[bench].items():
                out[f"bench.{bench}.gold_loglik.{'base' if model == BASE else 'member.' + model}"] = mean(
                    values.values()
                )
            paired_differences(bench, gold[bench], table, refs, arms, out, prefix=f"bench.{bench}.gold_loglik")
    per_model = {m: aggregates(scores) for m, scores in table.items()}
    for group in GROUPS:
        values = {m: agg[group] for m, agg in per_model.items() if group in agg}
        if values:
            _group_values(f"avg.{group}", values, table, refs, arms, out)
    if "avg.overall.population.mean" in out and "avg.overall.baseline" in out:
        for key in ("mean", "best", "weakest"):
            out[f"avg.overall.population.{key}_minus_baseline"] = (
                out[f"avg.overall.population.{key}"] - out["avg.overall.baseline"]
            )
    return {key: round(value, 6) if isinstance(value, float) else value for key, value in sorted(out.items())}


def raw_base_metrics(result: dict, out: dict) -> None:
    """The raw base (before the warm start) beside the base, from a base result that carries it (`raw_base`:
    stages/bench.py): `bench.<b>.raw_base` (its primary score), `.correct.raw_base`, and the base minus the raw
    base with its paired interval (`bench.<b>.diff.base_minus_raw_base.*`)."""
    raw = result.get("raw_base")
    if result.get("model") != BASE or not raw:
        return
    bench = result["benchmark"]
    out[f"bench.{bench}.raw_base"] = float(raw["metrics"][primary_metric(bench)])
    out[f"bench.{bench}.correct.raw_base"] = int(raw["correct"])
    ids = list(result.get("per_problem") or {})
    if ids and set(ids) == set(raw.get("per_problem") or {}):
        _paired(
            f"bench.{bench}",
            "base_minus_raw_base",
            [result["per_problem"][i] for i in ids],
            [raw["per_problem"][i] for i in ids],
            out,
        )


def result_intervals(results: list[dict]) -> dict[str, dict[str, tuple[float, float]]]:
    """{model: {benchmark: 95% Wilson (low, high)}} of the results that carry `correct`."""
    out: dict[str, dict[str, tuple[float, float]]] = {}
    for result in results:
        if "correct" in result:
            out.setdefault(result["model"], {})[result["benchmark"]] = wilson_interval(
                int(result["correct"]), int(result["n"])
            )
    return out
