"""Relative paths in params resolve from the project, also inside a DVC queue's temporary copy."""

from __future__ import annotations

from populora.core.benchmark_data import resolve_data_dir
from populora.core.paths import project_path, queued_from


def _layout(tmp_path):
    project = tmp_path / "work" / "project"
    temp_copy = project / ".dvc" / "tmp" / "exps" / "tmpab12cd"
    temp_copy.mkdir(parents=True)
    shared = tmp_path / "work" / "shared" / "benchmarks"
    shared.mkdir(parents=True)
    return project, temp_copy, shared


def test_queued_from_finds_the_project_of_a_temporary_workspace(tmp_path):
    project, temp_copy, _ = _layout(tmp_path)
    assert queued_from(temp_copy) == project.resolve()
    assert queued_from(temp_copy / "results") == project.resolve()
    assert queued_from(project) is None
    assert queued_from(tmp_path / "exps") is None


def test_relative_path_from_the_project_root(tmp_path, monkeypatch):
    project, _, shared = _layout(tmp_path)
    monkeypatch.chdir(project)
    assert project_path("../shared/benchmarks") == shared.resolve()


def test_relative_path_from_a_dvc_queue_copy_is_taken_from_the_project(tmp_path, monkeypatch):
    _, temp_copy, shared = _layout(tmp_path)
    monkeypatch.chdir(temp_copy)
    monkeypatch.delenv("POPULORA_BENCHMARKS", raising=False)
    assert project_path("../shared/benchmarks") == shared.resolve()
    assert resolve_data_dir("../shared/benchmarks") == shared.resolve()


def test_a_path_present_in_the_copy_wins_and_a_missing_one_stays_missing(tmp_path, monkeypatch):
    project, temp_copy, _ = _layout(tmp_path)
    (project / "models" / "base").mkdir(parents=True)
    (temp_copy / "models" / "base").mkdir(parents=True)
    monkeypatch.chdir(temp_copy)
    assert project_path("models/base") == (temp_copy / "models" / "base").resolve()
    assert not project_path("no/such/folder").exists()
    assert project_path("Qwen/Qwen2-7B") == (temp_copy / "Qwen" / "Qwen2-7B").resolve()  # a hub id stays one
    assert project_path(str(project)) == project.resolve()


def test_a_local_base_model_folder_is_found_from_a_dvc_queue_copy(tmp_path, monkeypatch):
    from populora.lm.model import describe_source

    project, temp_copy, _ = _layout(tmp_path)
    (project / "models" / "base").mkdir(parents=True)
    monkeypatch.chdir(temp_copy)
    assert describe_source("models/base") == {"source": "local", "path": str((project / "models" / "base").resolve())}
    assert describe_source("Qwen/Qwen2-7B") == {"source": "hub", "id": "Qwen/Qwen2-7B"}
