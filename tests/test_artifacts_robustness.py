"""Artifacts survive faults: permissions follow the umask, tracebacks reach the stage log, a
SIGKILL mid-write then a rerun ends like an uninterrupted run, damaged files fail naming the file
and the fix, a full disk leaves nothing half-written; exported adapters load from anywhere."""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from populora.core import io
from populora.core.state import State, save_state
from tests.conftest import REPO, copy_shipped_files


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every entry under root (hidden ones included): relative path -> bytes (None for folders)."""
    return {p.relative_to(root).as_posix(): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def _modes(root: Path) -> dict[str, int]:
    return {p.relative_to(root).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in [root, *root.rglob("*")]}


# ---------------------------------------------------------------- permissions


@pytest.mark.parametrize("umask", [0o022, 0o002])
def test_artifacts_get_the_permissions_the_umask_gives(tmp_path, umask):
    old = os.umask(umask)
    try:
        io.write_json(tmp_path / "a.json", {"x": 1})
        io.write_jsonl(tmp_path / "b.jsonl", [{"x": 1}])
        staged = io.staging_dir(tmp_path / "folder")
        io.write_json(staged / "inner.json", {})
        (staged / "sub").mkdir()
        (staged / "sub" / "weights.bin").write_bytes(b"\0")
        fd, name = __import__("tempfile").mkstemp(dir=staged)  # an owner-only file a library might leave
        os.close(fd)
        io.replace_dir(staged, tmp_path / "folder")
    finally:
        os.umask(old)
    modes = _modes(tmp_path)
    for path, mode in modes.items():
        want = (0o777 if (tmp_path / path).is_dir() else 0o666) & ~umask
        if path != ".":
            assert mode == want, f"{path}: {oct(mode)} != {oct(want)}"


# ---------------------------------------------------------------- tracebacks in the log


def test_a_stage_traceback_lands_in_its_log_file(tmp_path):
    broken = tmp_path / "state"
    broken.mkdir()
    (broken / "state.json").write_text('{"teachers": [')  # truncated
    log = tmp_path / "logs" / "pair.log"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "stages.pair",
            "--params",
            str(REPO / "params.yaml"),
            "--arm",
            "population",
            "--gen",
            "0",
            "--state",
            str(broken),
            "--pairing",
            str(tmp_path / "pairing.json"),
            "--log",
            str(log),
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        timeout=300,
    )
    assert result.returncode != 0
    text = log.read_text()
    assert "Traceback (most recent call last)" in text
    assert f"{broken / 'state.json'} is truncated or corrupted" in text and "Fix:" in text
    assert not (tmp_path / "pairing.json").exists()


# ---------------------------------------------------------------- SIGKILL mid-write, then rerun


def _fake_checkpoint(root: Path) -> Path:
    """A checkpoint folder as the pipeline writes it, small enough for a subprocess test."""
    ckpt = root / "results" / "population" / "gen001" / "checkpoint"
    adapter = ckpt / "adapters" / "teacher0"
    adapter.mkdir(parents=True)
    (adapter / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": "results/base_model"}))
    (adapter / "adapter_model.safetensors").write_bytes(bytes(range(256)) * 16)
    rating = {"mu": 25.0, "sigma": 8.0}
    save_state(
        ckpt,
        State(
            arm="population",
            generation=1,
            teachers=["teacher0"],
            students=[],
            members={"teacher0": "t0"},
            ratings={"teacher0": rating},
            lineage=[],
            trained_members={"teacher0": "t0"},
            trained_ratings={"teacher0": rating},
        ),
    )
    base = root / "results" / "base_model"
    base.mkdir(parents=True)
    (base / "model.safetensors").write_bytes(b"weights")
    (base / "populora_source.json").write_text(json.dumps({"source": "local", "path": "/elsewhere/tiny"}))
    return ckpt


EXPORT = [
    "-m",
    "stages.export",
    "--params",
    str(REPO / "params.yaml"),
    "--arm",
    "population",
    "--base-model",
    "results/base_model",
    "--checkpoint",
    "results/population/gen001/checkpoint",
    "--models",
    "results/models/population",
    "--log",
    "results/logs/export.log",
]

# Runs the export stage with os.fsync replaced by a SIGKILL of the process itself at the Nth call:
# the kill lands after a temp file's bytes are written and before it is renamed into place.
KILLER = """
import os, runpy, signal, sys
calls = {"n": 0}
real = os.fsync
def fsync(fd):
    calls["n"] += 1
    if calls["n"] == int(os.environ["KILL_AT"]):
        os.kill(os.getpid(), signal.SIGKILL)
    real(fd)
os.fsync = fsync
sys.argv = ["stages.export", *sys.argv[1:]]
runpy.run_module("stages.export", run_name="__main__", alter_sys=True)
"""


def _export(root: Path, kill_at: int | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if kill_at is None:
        return subprocess.run([sys.executable, *EXPORT], cwd=root, env=env, capture_output=True, text=True, timeout=300)
    return subprocess.run(
        [sys.executable, "-c", KILLER, *EXPORT[2:]],
        cwd=root,
        env={**env, "KILL_AT": str(kill_at)},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.mark.slow  # subprocesses / whole harness runs: CI's full lane, not the fast one
def test_sigkill_mid_write_then_rerun_equals_an_uninterrupted_run(tmp_path):
    _fake_checkpoint(tmp_path)
    copy_shipped_files(tmp_path)  # the stage runs from this project: the pool params.yaml names is read from it
    models = tmp_path / "results" / "models"
    clean = _export(tmp_path)
    assert clean.returncode == 0, clean.stderr
    uninterrupted = _tree(models)
    for kill_at in (1, 2):  # while writing adapter_config.json, then while writing model.json
        shutil.rmtree(models)
        first = _export(tmp_path, kill_at=kill_at)
        assert first.returncode == -9  # SIGKILL
        leftovers = [p.name for p in models.iterdir()]
        assert leftovers and all(name.startswith(".population.") for name in leftovers)  # staging only
        again = _export(tmp_path)
        assert again.returncode == 0, again.stderr
        assert _tree(models) == uninterrupted  # no stale staging folder or temp file, the same bytes


def test_a_killed_atomic_write_leaves_the_old_file_and_the_rerun_cleans_up(tmp_path):
    target = tmp_path / "out.json"
    io.write_json(target, {"old": True})
    code = (
        "import os, signal, sys; sys.path.insert(0, sys.argv[2]); from populora.core import io;"
        "os.fsync = lambda fd: os.kill(os.getpid(), signal.SIGKILL); io.write_json(sys.argv[1], {'new': True})"
    )
    result = subprocess.run([sys.executable, "-c", code, str(target), str(REPO)], capture_output=True, timeout=120)
    assert result.returncode == -9
    assert json.loads(target.read_text()) == {"old": True}  # never half-written
    assert len(list(tmp_path.iterdir())) == 2  # the target and the killed run's temp file
    io.write_json(target, {"new": True})
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"] and io.read_json(target) == {"new": True}


# ---------------------------------------------------------------- damaged files


def test_truncated_adapter_weights_fail_naming_the_file_and_the_fix(tmp_path):
    import torch
    from safetensors.torch import save_file

    path = tmp_path / "adapter_model.safetensors"
    save_file({"w": torch.ones(64, 64)}, str(path))
    assert io.load_safetensors(path)["w"].shape == (64, 64)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(io.ArtifactError, match=r"adapter_model\.safetensors is truncated or corrupted.*Fix: delete it"):
        io.load_safetensors(path)
    path.write_bytes(b"\x07" * 5)
    with pytest.raises(io.ArtifactError, match="Fix:"):
        io.check_safetensors(path)


def test_corrupted_json_and_jsonl_fail_naming_the_file_and_the_fix(tmp_path):
    (tmp_path / "state.json").write_text('{"members": {"a"')
    with pytest.raises(io.ArtifactError, match=r"state\.json is truncated or corrupted.*Fix:"):
        io.read_json(tmp_path / "state.json")
    (tmp_path / "rows.jsonl").write_text('{"a": 1}\n{"a": 2, "b"\n')
    with pytest.raises(io.ArtifactError, match=r"rows\.jsonl:2: .*Fix:"):
        io.read_jsonl(tmp_path / "rows.jsonl")


def test_a_corrupted_checkpoint_adapter_stops_the_stage_that_loads_it(tmp_path, tiny_model_dir):
    from populora.lm.adapters import create_adapters, read_state_dict
    from populora.lm.model import attach_adapters, load_base, lora_config

    _, model = load_base(tiny_model_dir)
    create_adapters(model, ["a"], tmp_path, lora_cfg=lora_config(4, 8.0, 0.0, ["q_proj"]), seeds={"a": 0}, init_std=0.0)
    weights = tmp_path / "a" / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-10])
    with pytest.raises(io.ArtifactError, match="a/adapter_model.safetensors is truncated"):
        read_state_dict(tmp_path / "a")
    with pytest.raises(io.ArtifactError, match="a/adapter_model.safetensors is truncated"):
        attach_adapters(model, {"a": tmp_path / "a"})


# ---------------------------------------------------------------- full disk


def test_a_full_disk_fails_the_write_and_keeps_nothing_half_written(tmp_path, monkeypatch):
    target = tmp_path / "rows.jsonl"
    io.write_jsonl(target, [{"old": 1}])
    real_fdopen = os.fdopen

    class FullDisk:
        def __init__(self, handle):
            self.handle = handle

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def write(self, text):
            self.handle.write(text[: len(text) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(io.os, "fdopen", lambda fd, *a, **k: FullDisk(real_fdopen(fd, *a, **k)))
    with pytest.raises(OSError, match="No space left"):
        io.write_jsonl(target, [{"new": i} for i in range(100)])
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]
    assert io.read_jsonl(target) == [{"old": 1}]


def test_a_stage_that_fails_midway_leaves_no_staging_folder(tmp_path):
    code = (
        "import sys; sys.path.insert(0, sys.argv[2]); from pathlib import Path; from populora.core import io;"
        "tmp = io.staging_dir(Path(sys.argv[1]) / 'out'); (tmp / 'half').write_text('x');"
        "raise OSError(28, 'No space left on device')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path), str(REPO)], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 1 and "No space left" in result.stderr
    assert list(tmp_path.iterdir()) == []


# ---------------------------------------------------------------- exported adapters


def test_exported_adapter_loads_with_autopeft_from_another_directory(tmp_path, tiny_model_dir, monkeypatch):
    import torch
    from peft import AutoPeftModelForCausalLM, PeftModel

    from populora.lm.adapters import create_adapters
    from populora.lm.model import load_base, lora_config
    from stages import export

    project = tmp_path / "project"
    (project / "results").mkdir(parents=True)
    shutil.copytree(tiny_model_dir, project / "results" / "base_model")
    (project / "results" / "base_model" / "populora_source.json").write_text(json.dumps({"source": "tiny-random"}))
    copy_shipped_files(project)  # the params' pool, relative to the project the stage runs from
    monkeypatch.chdir(project)
    _, model = load_base("results/base_model")  # relative, as the pipeline loads it
    ckpt = Path("results/population/gen001/checkpoint")
    create_adapters(
        model,
        ["teacher0"],
        ckpt / "adapters",
        lora_cfg=lora_config(4, 8.0, 0.0, ["q_proj", "v_proj"]),
        seeds={"teacher0": 0},
        init_std=0.05,
    )
    rating = {"mu": 25.0, "sigma": 8.0}
    save_state(
        ckpt,
        State(
            arm="population",
            generation=1,
            teachers=["teacher0"],
            students=[],
            members={"teacher0": "t0"},
            ratings={"teacher0": rating},
            lineage=[],
            trained_members={"teacher0": "t0"},
            trained_ratings={"teacher0": rating},
        ),
    )
    relative = json.loads((ckpt / "adapters/teacher0/adapter_config.json").read_text())["base_model_name_or_path"]
    assert not Path(relative).is_absolute()  # the problem being fixed
    assert (
        export.main(
            [
                "--params",
                str(REPO / "params.yaml"),
                "--arm",
                "population",
                "--base-model",
                "results/base_model",
                "--checkpoint",
                str(ckpt),
                "--models",
                "results/models/population",
            ]
        )
        == 0
    )
    out = (project / "results/models/population/teacher0").resolve()
    described = json.loads((out / "model.json").read_text())
    assert described["base_model"]["path"] == str((project / "results/base_model").resolve())
    assert len(described["base_model"]["sha256"]) == 64

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    loaded = AutoPeftModelForCausalLM.from_pretrained(str(out / "adapter"))
    _, base = load_base(project / "results/base_model")
    reference = PeftModel.from_pretrained(base, str(out / "adapter"))
    ids = torch.tensor([[1, 2, 3, 4, 5]])
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, reference(ids).logits)


# ---------------------------------------------------------------- the kill hook (tests/test_kill_stages.py uses it)


def test_the_kill_hook_kills_the_named_stage_at_its_nth_write_point_and_only_then(tmp_path):
    script = tmp_path / "fakestage.py"  # named like a stage module: the hook matches on the script's name
    script.write_text(
        "import sys\nfrom pathlib import Path\nsys.path.insert(0, sys.argv[2])\nfrom populora.core import io\n"
        "io.write_json(Path(sys.argv[1]) / 'a.json', {'a': 1})\nio.write_json(Path(sys.argv[1]) / 'b.json', {'b': 2})\n"
    )
    log = tmp_path / "writes.jsonl"

    def run(**env):
        return subprocess.run(
            [sys.executable, str(script), str(tmp_path / "out"), str(REPO), "--part 0"],
            env={**os.environ, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )

    assert run(POPULORA_KILL_AT="otherstage:1").returncode == 0  # another stage's spec: no effect
    assert run(POPULORA_KILL_AT="fakestage:5:--part 1").returncode == 0  # its word is not in the command line
    killed = run(POPULORA_KILL_AT="fakestage:5", POPULORA_WRITE_LOG=str(log))
    assert killed.returncode == -9
    points = [json.loads(line) for line in log.read_text().splitlines()]
    assert [(p["n"], p["point"], Path(p["path"]).name, p["kill"]) for p in points] == [
        (1, "temp file created", "a.json", False),
        (2, "temp file written", "a.json", False),
        (3, "renamed into place", "a.json", False),
        (4, "temp file created", "b.json", False),
        (5, "temp file written", "b.json", True),
    ]
    assert sorted(p.name for p in (tmp_path / "out").iterdir())[0].startswith(".b.json.")  # the killed temp file
    assert run().returncode == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["a.json", "b.json"]
