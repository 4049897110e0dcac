"""One DAG source: dvc.yaml is generated from workflow/dag.py, and Snakemake and DVC run the same commands."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from workflow import render_dvc
from workflow.dag import STAGES, TIMINGS_DIR

BIN = str(Path(sys.executable).parent)


def _env():
    return {**os.environ, "PATH": BIN + os.pathsep + os.environ["PATH"], "PYTHONPATH": str(REPO)}


@pytest.fixture(scope="module")
def snakemake_dry_run() -> str:
    result = subprocess.run(
        [f"{BIN}/snakemake", "-n", "-p", "--forceall", "--cores", "1"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout + result.stderr


def test_dvc_yaml_is_up_to_date():
    assert render_dvc.main(["--check"]) == 0, "dvc.yaml is stale: run python -m workflow.render_dvc"


def test_stale_dvc_yaml_is_detected(tmp_path):
    stale = tmp_path / "dvc.yaml"
    stale.write_text((REPO / "dvc.yaml").read_text().replace("stages.verify", "stages.verify_old"))
    assert render_dvc.main(["--check", "--params", str(REPO / "params.yaml"), "--out", str(stale)]) == 1


def _empty_update_job(command: str, params) -> bool:
    """An update job left without an adapter (the baseline's jobs past the first): DVC's matrix, a
    cross product, runs it (an empty part, written at once); Snakemake knows not to."""
    from populora.core.topology import update_part_slots

    match = re.match(r"python -m stages\.update .*--arm (\w+) .*--part (\d+) ", command)
    return bool(match) and not update_part_slots(params, match.group(1), int(match.group(2)))


def _grouped_bench_job(command: str, params) -> bool:
    """A benchmark of `bench.together` in a job of its own: DVC's matrix runs it (a note, written at once),
    Snakemake knows it runs in the together job."""
    from populora.core.topology import together_benchmarks

    match = re.match(r"python -m stages\.bench .*--bench (\w+) ", command)
    return bool(match) and match.group(1) in together_benchmarks(params)


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_snakemake_and_dvc_run_identical_commands(snakemake_dry_run):
    from dvc.repo import Repo

    from populora.config import load_params
    from populora.core.topology import together_benchmarks

    params = load_params(REPO / "params.yaml")
    dvc_commands = sorted(stage.cmd for stage in Repo(str(REPO)).index.stages if stage.name != render_dvc.GUARD)
    smk_commands = sorted(
        line.removeprefix("Shell command: ")
        for line in snakemake_dry_run.splitlines()
        if line.startswith("Shell command: python")
    )
    empty = [c for c in dvc_commands if _empty_update_job(c, params)]
    grouped = [c for c in dvc_commands if _grouped_bench_job(c, params)]
    assert smk_commands == [c for c in dvc_commands if c not in empty and c not in grouped]
    # the baseline's one adapter is update job 0's; its 3 other jobs per generation are DVC's only
    assert len(empty) == (params.dag.update_jobs - 1) * params.dag.generations
    # the default's 2-problem code and math benchmarks run in one together job per arm and one for the base
    together = together_benchmarks(params)
    assert together and len(grouped) == len(together) * (1 + len(params.dag.arms))
    assert sum("stages.bench_together " in c for c in smk_commands) == 1 + len(params.dag.arms)
    assert len(dvc_commands) > len(STAGES)  # per-arm and per-generation expansion happened


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_one_update_job_per_adapter_in_the_default_dag(snakemake_dry_run):
    from populora.config import load_params
    from populora.core.topology import slots_of_arm

    params = load_params(REPO / "params.yaml")
    jobs = re.findall(r"python -m stages\.update .*--arm (\w+) --gen (\d+) --part (\d+) ", snakemake_dry_run)
    for arm in params.dag.arms:
        assert params.dag.update_jobs >= len(slots_of_arm(params, arm))
        for gen in range(params.dag.generations):
            parts = sorted(int(p) for a, g, p in jobs if a == arm and int(g) == gen)
            assert parts == list(range(len(slots_of_arm(params, arm)))), (arm, gen, parts)


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_every_declared_stage_runs_in_both_engines(snakemake_dry_run):
    from dvc.repo import Repo

    dvc_names = {stage.name.split("@")[0] for stage in Repo(str(REPO)).index.stages} - {render_dvc.GUARD}
    smk_rules = set(re.findall(r"^rule (\w+):", snakemake_dry_run, flags=re.M)) - {"all"}
    assert dvc_names == smk_rules == {stage.name for stage in STAGES}


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_gpu_stages_declare_a_gpu(snakemake_dry_run):
    from populora.config import load_params

    params = load_params(REPO / "params.yaml")
    blocks = snakemake_dry_run.split("rule ")
    for stage in STAGES:
        block = next(b for b in blocks if b.startswith(stage.name + ":"))
        assert f"gpu={stage.gpus(params)}" in block
    assert {s.name for s in STAGES if s.gpu} == {
        "heldout_pool",
        "propose",
        "solve",
        "update",
        "heldout",
        "bench_base",
        "bench",
        "bench_base_together",
        "bench_together",
        "warm_start",
    }


@pytest.mark.slow
def test_the_training_chain_runs_before_the_benchmarks(snakemake_dry_run):
    """Snakemake's priority: a training job that is ready takes the next lane before any benchmark
    (leaves of the DAG, which fill lanes at any time), so the last generation never waits for one."""
    blocks = snakemake_dry_run.split("\nrule ")[1:]
    by_rule: dict[str, set[str]] = {}
    for block in blocks:
        name = block.split(":", 1)[0]
        found = re.search(r"^    priority: (\d+)$", block, flags=re.M)
        by_rule.setdefault(name, set()).add(found.group(1) if found else "0")
    assert (
        by_rule["bench"]
        == by_rule["bench_base"]
        == by_rule["bench_together"]
        == by_rule["bench_base_together"]
        == {"0"}
    )
    assert all(
        by_rule[name] == {"1"} for name in ("propose", "solve", "update", "evolve", "checkpoint", "heldout", "export")
    )


def test_stages_spell_no_paths():
    for path in (REPO / "stages").glob("*.py"):
        text = path.read_text()
        # docstrings and --help texts show example paths; code must take every path from arguments
        code = re.sub(r'"""[\s\S]*?"""', "", text)
        code = re.sub(r'help=(f?"[^"]*"|\([^)]*\))', "", code)
        assert "results/" not in code, f"{path.name} hard-codes a results path"


# The verifier contract allows extra options with defaults: overrides of params (`verify`, two `propose` keys).
OPTIONAL_FLAGS = {
    "verify": {"--timeout", "--memory-mb", "--max-output-chars", "--workers", "--code-f-inputs", "--reject-copyable"},
    "grade": {"--timeout", "--memory-mb", "--max-output-chars", "--workers"},
    "bench_base": {"--arm", "--models"},  # the same stage module benchmarks an arm's members
    "bench": {"--raw-base"},  # the base's job (bench_base) passes it, an arm's never
    "bench_base_together": {"--arm", "--models"},
}


def _parser_of(module: str):
    """The argparse parser a stage's main() builds (captured at parse time; nothing runs)."""
    import argparse
    import importlib

    class Captured(Exception):
        pass

    seen = {}

    def capture(self, *args, **kwargs):
        seen["parser"] = self
        raise Captured

    original = argparse.ArgumentParser.parse_args
    argparse.ArgumentParser.parse_args = capture
    try:
        importlib.import_module(module).main([])
    except Captured:
        return seen["parser"]
    finally:
        argparse.ArgumentParser.parse_args = original
    raise AssertionError(f"{module}.main did not parse arguments")


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_stage_flags_equal_its_declared_inputs_and_outputs(stage):
    parser = _parser_of(stage.module)
    flags = {
        opt: action.required
        for action in parser._actions
        for opt in action.option_strings
        if opt.startswith("--") and opt != "--help"
    }
    declared = {
        f"--{k.replace('_', '-')}"
        for k in (*stage.wildcards, *stage.inputs, *stage.param_inputs, *stage.untracked, *stage.outputs, *stage.side)
    }
    declared |= {"--params", "--log", *(["--claim-gpu"] if stage.gpu else [])}
    extra = set(flags) - declared - {"--claim-gpu"}  # every stage_parser offers it; the DAG passes it to gpu stages
    assert declared <= set(flags), (
        f"{stage.name}: the DAG passes flags the stage lacks: {sorted(declared - set(flags))}"
    )
    assert extra <= OPTIONAL_FLAGS.get(stage.name, set()), f"{stage.name}: flags the DAG never passes: {sorted(extra)}"
    assert not any(flags[f] for f in extra)


def test_stages_are_declared_in_data_flow_order():
    produced: set[str] = set()
    declared: set[str] = set()
    templates = {template for stage in STAGES for template in stage.outputs.values()}
    for stage in STAGES:
        for key, template in stage.inputs.items():
            if key in stage.collects:
                assert set(stage.collects[key]) <= declared, f"{stage.name} collects {key} before its writers"
            elif template in templates:
                assert template in produced, f"{stage.name} reads {key} before a stage writes it"
        produced.update(stage.outputs.values())
        declared.add(stage.name)


def test_a_collected_folder_holds_outputs_of_the_stages_it_names():
    from populora.config import load_params
    from workflow.dag import collected_paths, scope_items, stage_named

    params = load_params(REPO / "params.yaml")
    for stage in STAGES:
        for key, writers in stage.collects.items():
            for item in scope_items(stage.scope, params).values():
                folder = stage.inputs[key].format(**item)
                paths = collected_paths(stage, key, params, item)
                assert paths and all(path.startswith(folder + "/") for path in paths), stage.name
            for writer in map(stage_named, writers):  # every named stage writes under the folder
                assert any(t.startswith(stage.inputs[key] + "/") for t in writer.outputs.values()), (stage.name, writer)


def test_every_job_is_timed_beside_its_log():
    for stage in STAGES:
        log, benchmark = stage.log_template(), stage.timings_template()
        assert benchmark.startswith(TIMINGS_DIR + "/") and benchmark.endswith(".tsv")
        assert Path(benchmark).relative_to(TIMINGS_DIR).with_suffix("") == Path(log).relative_to(
            Path(log).parents[1]
        ).with_suffix("")  # <stage>/<key>, the log's


def test_every_output_shown_in_the_snakemake_report_has_its_caption():
    from workflow.dag import REPORT_CAPTIONS

    assert (REPO / REPORT_CAPTIONS / "workflow.rst").is_file()  # the Snakefile's `report:` front page
    shown = [stage for stage in STAGES if stage.shown]
    assert {stage.name for stage in shown} >= {"report", "dynamics"}
    for stage in shown:
        assert (REPO / stage.caption()).is_file(), stage.caption()
        for key, how in stage.shown.items():
            assert bool(how.patterns) == (key in stage.directories), (stage.name, key)  # a folder needs patterns


def test_the_report_runs_after_every_other_stage():
    """The report tabulates the benchmark files of every job, so every stage must be upstream of it
    (each engine then runs them first); the files are no dependency (DVC writes none)."""
    from workflow.dag import stage_named

    def written(template: str) -> list[str]:  # the output templates an input template can name
        template = template.replace("gen{last}", "gen{gen}")
        return (
            [template.replace("{prev}", p) for p in ("init", "gen{gen}/checkpoint")]
            if "{prev}" in template
            else [template]
        )

    writers = {template: stage.name for stage in STAGES for template in stage.outputs.values()}
    upstream, todo = set(), ["report"]
    while todo:
        stage = stage_named(todo.pop())
        for key, template in stage.inputs.items():
            found = set(stage.collects.get(key, ())) | {writers[t] for t in written(template) if t in writers}
            todo += sorted(found - upstream)
            upstream |= found
    assert upstream == {stage.name for stage in STAGES} - {"report"}
    report = stage_named("report")
    assert report.untracked == {"timings": TIMINGS_DIR} and TIMINGS_DIR not in report.inputs.values()


def test_rule_all_spells_no_path():
    snakefile = (REPO / "Snakefile").read_text()
    assert "results/" not in re.sub(r'"""[\s\S]*?"""', "", snakefile)


def test_generation_ids_reach_dvc_as_strings(tmp_path):
    """DVC reads dvc.yaml as YAML 1.2, where a bare 008 is the integer 8 (generation 8 would run
    as `--gen 8` on `results/<arm>/gen8/`): every generation id must be a string there."""
    import yaml
    from ruamel.yaml import YAML

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["dag"]["generations"] = 12
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    assert render_dvc.main(["--params", str(tmp_path / "params.yaml"), "--out", str(tmp_path / "dvc.yaml")]) == 0
    stages = YAML(typ="safe", pure=True).load((tmp_path / "dvc.yaml").read_text())["stages"]
    ids = [item["id"] for item in stages["propose"]["matrix"]["gen"]]
    assert ids == [f"{g:03d}" for g in range(12)]


def test_the_readme_stage_table_lists_every_stage():
    """README's "The pipeline" table is where a newcomer meets the stages: one row per declared stage."""
    readme = (REPO / "README.md").read_text()
    table = readme[readme.index("## The pipeline") : readme.index("## Configuration")]
    rows = set(re.findall(r"^\| `(\w+)` \|", table, flags=re.M))
    assert {stage.name for stage in STAGES} == rows


def _params_with(tmp_path, **heldout) -> Path:
    import yaml

    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["heldout"].update(heldout)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def test_the_pool_file_is_an_input_of_heldout_pool(tmp_path):
    """An edited pool must rerun the pool stage: the file the params name is an input (a dependency, and the
    flag the stage reads), like every other input; null (the base model proposes the pool): neither."""
    import yaml

    from populora.config import load_params

    pool = load_params(REPO / "params.yaml").heldout.pool_file
    assert pool and pool.startswith("data/"), "params.yaml reuses a pool under data/, never one under study/"
    stage = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]["heldout_pool"]
    assert pool in stage["deps"] and f"--pool-file {pool} " in stage["cmd"]
    out = tmp_path / "dvc.yaml"
    assert render_dvc.main(["--params", str(_params_with(tmp_path, pool_file=None)), "--out", str(out)]) == 0
    stage = yaml.safe_load(out.read_text())["stages"]["heldout_pool"]
    assert pool not in stage["deps"] and "--pool-file" not in stage["cmd"]


def test_the_pool_stage_does_not_watch_a_generation_s_sizes():
    """The held-out pool and its base scores do not depend on how many tasks a generation proposes or answers, so
    an arm that changes those (the study's total-budget control: propose.per_type, solve.tasks_per_type) keeps them
    instead of rerunning the stage (17 min on the 2-core CPU); what the stage does read is declared, or the
    params view (populora.core.declared) fails it in tests/test_heldout.py and the smoke runs."""
    from populora.core.declared import unread

    stage = next(stage for stage in STAGES if stage.name == "heldout_pool")
    sizes = ["propose.per_type", "solve.tasks_per_type", "solve.samples", "solve.fill_in", "update.steps"]
    assert unread(sizes, stage.params) == sorted(sizes), "heldout_pool watches a generation's sizes"


def test_the_dag_guard_asks_for_a_re_render_when_the_params_name_another_pool(tmp_path, capsys):
    """`dvc exp run -S heldout.pool_file=null` changes the rendered DAG (an input and its flag): the guard stops
    the run before any work, naming the key and the fix, as for a change of generations."""
    other = _params_with(tmp_path, pool_file=None)
    dvc_yaml = str(REPO / "dvc.yaml")
    assert render_dvc.main(["--check", "--shape-only", "--params", str(other), "--out", dvc_yaml]) == 1
    message = capsys.readouterr().err
    assert "heldout_pool heldout.pool_file in" in message and "data/pool-v3/pool.jsonl; the params name None" in message
    assert "Fix: python -m workflow.render_dvc" in message
    assert render_dvc.main(["--check", "--shape-only", "--params", str(REPO / "params.yaml"), "--out", dvc_yaml]) == 0


def test_the_stage_refuses_a_pool_file_other_than_the_params_name(tmp_path):
    """A command rendered from other params (dvc.yaml not re-rendered) would score the wrong pool: refused."""
    from stages.heldout_pool import check_pool_file

    check_pool_file("data/pool-v3/pool.jsonl", "data/pool-v3/pool.jsonl")
    check_pool_file(None, None)
    for given, named in (("data/pool-v3/pool.jsonl", None), (None, "data/pool-v3/pool.jsonl"), ("a.jsonl", "b.jsonl")):
        with pytest.raises(SystemExit, match="Fix: python -m workflow.render_dvc"):
            check_pool_file(given, named)


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_snakemake_tracks_the_reused_pool_file(snakemake_dry_run):
    from populora.config import load_params

    pool = load_params(REPO / "params.yaml").heldout.pool_file
    inputs = re.search(r"rule heldout_pool:\n\s+input: (.*)\n", snakemake_dry_run)
    assert inputs and pool in inputs.group(1).split(", ")


# Stages that only move rows and numbers: every job of theirs starts a Python process, and importing torch
# costs it ~2 s of CPU (a tiny test run has a dozen of these jobs; the light stages of a real run, more)
TORCH_FREE_STAGES = (
    "pair",
    "verify",
    "grade",
    "reward",
    "update_gather",
    "heldout",  # loads the model only where a pool is scored
    "bench_summary",
    "dynamics",
    "report",
)


def test_bookkeeping_stages_start_without_torch():
    # one process for all: none loads torch, so the first heavy module to appear names its importer
    code = (
        "import importlib, sys\n"
        f"for name in {TORCH_FREE_STAGES!r}:\n"
        "    importlib.import_module('stages.' + name)\n"
        "    heavy = [m for m in ('torch', 'transformers', 'peft', 'lm_eval') if m in sys.modules]\n"
        "    if heavy:\n"
        "        sys.exit(f'stages.{name} imports {heavy} at start')\n"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=_env(), capture_output=True, text=True, timeout=120
    )
    assert loaded.returncode == 0, loaded.stderr[-2000:]
