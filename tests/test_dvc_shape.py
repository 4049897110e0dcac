"""DVC reruns only what changed: code deps from the import graph (one code stamp a stage), bytecode
ignored; arms, benchmarks and population size are DVC matrix axes read at run time; a change of
the rendered generations through `dvc exp run -S` fails before any work, naming the fix; a fresh
checkout answers `dvc status` and a dry run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO, copy_shipped_files
from workflow.code_stamps import module_of_stamp, stamp_path
from workflow.dag import STAGES, code_deps

BIN = str(Path(sys.executable).parent)
GIT_ID = {
    "GIT_AUTHOR_NAME": "ci",
    "GIT_AUTHOR_EMAIL": "ci@example.org",
    "GIT_COMMITTER_NAME": "ci",
    "GIT_COMMITTER_EMAIL": "ci@example.org",
}


def _run(cwd: Path, *args: str, check: bool = True, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, **GIT_ID, "PATH": BIN + os.pathsep + os.environ["PATH"], "DVC_NO_ANALYTICS": "1"}
    env.pop("PYTHONPATH", None)
    result = subprocess.run(list(args), cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert result.returncode == 0, f"{' '.join(args)} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


# ---------------------------------------------------------------- code dependencies


def test_code_deps_follow_imports_transitively(tmp_path):
    pkg = tmp_path / "populora"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "import json\nfrom populora.b import thing\n\ndef f():\n    from populora.sub import lazy\n"
    )
    (pkg / "b.py").write_text("from . import c\nthing = 1\n")
    (pkg / "c.py").write_text("import torch\n")
    (pkg / "sub" / "lazy.py").write_text("from ..c import x\n")
    (pkg / "unused.py").write_text("")
    deps = code_deps("populora.a", tmp_path)
    assert deps == (
        "populora/__init__.py",
        "populora/a.py",
        "populora/b.py",
        "populora/c.py",
        "populora/sub/__init__.py",
        "populora/sub/lazy.py",
    )


def _dvc_stages() -> dict:
    return yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]


def _stage_deps(name: str) -> list[str]:
    document = _dvc_stages()[name]
    return (document.get("do") or document)["deps"]


def _stage_code(name: str) -> list[str]:
    """The source files a DVC stage reruns on: those its one code stamp stands for."""
    modules = [module_of_stamp(dep) for dep in _stage_deps(name) if module_of_stamp(dep)]
    assert len(modules) == 1, f"{name}: code stamps {modules}"
    return list(code_deps(modules[0]))


def test_each_stage_has_one_code_dependency_its_stamp_written_by_the_guard():
    stages = _dvc_stages()
    guard_outs = {path for out in stages["dag_shape"]["outs"] for path in out}
    for stage in STAGES:
        deps = _stage_deps(stage.name)
        assert stamp_path(stage.module) in deps and stamp_path(stage.module) in guard_outs, stage.name
        assert not any(dep.endswith(".py") or dep in ("populora", "stages", "workflow") for dep in deps), stage.name


def test_editing_report_code_does_not_touch_the_model_stages():
    for stage in ("base_model", "init", "propose", "update"):
        code = _stage_code(stage)
        assert "stages/report.py" not in code and not any(d.startswith("populora/bench/") for d in code), stage
    assert any(d.startswith("populora/report/") for d in _stage_code("report"))


@pytest.mark.parametrize("stage", ["base_model", "pair", "report", "evolve"])
def test_declared_code_deps_cover_every_local_module_the_stage_imports(stage):
    module = next(s.module for s in STAGES if s.name == stage)
    probe = (
        "import importlib, sys; importlib.import_module(sys.argv[1]); "
        "print('\\n'.join(sorted(m.__file__ for n, m in sys.modules.items() "
        "if n.split('.')[0] in ('populora', 'stages', 'workflow') and getattr(m, '__file__', None))))"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, module],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    loaded = {Path(line).resolve().relative_to(REPO).as_posix() for line in result.stdout.split()}
    assert loaded <= set(_stage_code(stage)), (
        f"imported but not a dependency: {sorted(loaded - set(_stage_code(stage)))}"
    )


# ---------------------------------------------------------------- DAG shape and fresh checkouts


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A committed scratch git + DVC project holding the pipeline code and default params."""
    root = tmp_path_factory.mktemp("shape_project")
    for name in ("populora", "stages", "workflow"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in (".gitignore", "params.yaml"):
        shutil.copy(REPO / name, root / name)
    copy_shipped_files(root)
    _run(root, f"{BIN}/python", "-m", "workflow.render_dvc")
    _run(root, "git", "init", "-q")
    _run(root, f"{BIN}/dvc", "init", "-q")
    shutil.copy(REPO / ".dvcignore", root / ".dvcignore")  # dvc init writes its own
    _run(root, "git", "add", "-A")
    _run(root, "git", "commit", "-qm", "setup")
    return root


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_bytecode_is_dvcignored(project):
    for path in ("populora/__pycache__/io.cpython-311.pyc", "stages/x.pyc"):
        assert _run(project, f"{BIN}/dvc", "check-ignore", path, check=False).returncode == 0, path
    assert _run(project, f"{BIN}/dvc", "check-ignore", "populora/core/io.py", check=False).returncode == 1


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_fresh_checkout_status_and_dry_run(project, tmp_path):
    clone = tmp_path / "clone"
    _run(tmp_path, "git", "clone", "-q", str(project), str(clone))
    status = _run(clone, f"{BIN}/dvc", "status")
    assert "init@population" in status.stdout
    dry = _run(clone, f"{BIN}/dvc", "repro", "--dry", "--force-downstream")
    assert "python -m stages.report" in dry.stdout and "python -m stages.base_model" in dry.stdout
    assert not (clone / "results").exists()  # a dry run does no work


@pytest.mark.xfail(
    strict=True,
    reason="DVC 3.67.1 bug iterative/dvc#9818: a dry run hashes missing deps for "
    "the run cache; docs/dvc.md documents `dvc repro --dry --force-downstream`",
)
@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_plain_dry_run_on_a_fresh_checkout(project, tmp_path):
    clone = tmp_path / "clone"
    _run(tmp_path, "git", "clone", "-q", str(project), str(clone))
    _run(clone, f"{BIN}/dvc", "repro", "--dry")


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_generations_change_through_exp_run_fails_before_any_work_with_the_fix(project):
    result = _run(project, f"{BIN}/dvc", "exp", "run", "-S", "dag.generations=2", check=False)
    try:
        assert result.returncode != 0
        output = result.stdout + result.stderr
        assert "DAG shape" in output and "Fix: python -m workflow.render_dvc" in output, output[-3000:]
        assert "generations in dvc.yaml: 3; the params ask for 2" in output, output[-3000:]
        assert not (project / "results" / "base_model").exists()  # nothing ran past the guard
    finally:
        _run(project, "git", "checkout", "--", "params.yaml")


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_update_jobs_change_through_exp_run_fails_before_any_work_with_the_fix(project):
    result = _run(project, f"{BIN}/dvc", "exp", "run", "-S", "dag.update_jobs=2", check=False)
    try:
        assert result.returncode != 0
        output = result.stdout + result.stderr
        assert "update jobs in dvc.yaml: 4; the params ask for 2" in output, output[-3000:]
        assert "Fix: python -m workflow.render_dvc" in output
        assert not (project / "results" / "base_model").exists()
    finally:
        _run(project, "git", "checkout", "--", "params.yaml")


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_one_teacher_one_student_needs_no_re_render(project):
    """The update jobs are numbered, not named by adapter: with 1T-1S jobs 2 and 3 are empty parts."""
    dry = _dry_run_with(project, population__teachers=1, population__students=1)
    assert "Running stage 'update@population-gen0-3'" in dry and "Running stage 'update_gather@population-gen0'" in dry


def _dry_run_with(project: Path, **changes) -> str:
    """`dvc repro --dry` after editing params.yaml as `dvc exp run -S` does (no re-render)."""
    params = yaml.safe_load((project / "params.yaml").read_text())
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        params[section][key] = value
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        _run(project, f"{BIN}/python", "-m", "workflow.render_dvc", "--check", "--shape-only")  # the guard passes
        return _run(project, f"{BIN}/dvc", "repro", "--dry", "--force-downstream").stdout
    finally:
        _run(project, "git", "checkout", "--", "params.yaml")


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_arms_are_read_by_dvc_at_run_time(project):
    dry = _dry_run_with(project, dag__arms=["baseline"])
    assert "--arm baseline" in dry and "--arm population" not in dry
    assert "python -m workflow.render_dvc --check" in dry  # the guard still runs first
    assert "--results results/bench/baseline/cruxeval_o" in dry and "results/bench/base/cruxeval_o" in dry


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_benchmarks_and_population_size_are_read_by_dvc_at_run_time(project):
    dry = _dry_run_with(project, bench__benchmarks=["gsm8k"], population__teachers=3)
    assert "--bench gsm8k" in dry and "--bench cruxeval_o" not in dry
    assert "Running stage 'bench@population-gsm8k'" in dry


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_a_param_that_does_not_shape_the_dag_passes_the_guard(project):
    result = _run(project, f"{BIN}/python", "-m", "workflow.render_dvc", "--check", "--stamp", "results/.stamp")
    assert "up to date" in result.stdout
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["reward"]["teacher_mode"] = "zero_sum"
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    try:
        _run(project, f"{BIN}/python", "-m", "workflow.render_dvc", "--check")
    finally:
        _run(project, "git", "checkout", "--", "params.yaml")
