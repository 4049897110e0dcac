"""A SIGKILL in the stages a preempted job dies in, then the same command again: the final artifacts
are byte for byte those of an undisturbed run, through Snakemake and through `dvc repro` (issue 50).

    .venv/bin/python -m pytest tests/test_kill_stages.py -m "" -q -s      (slow: -m "" selects it)

Where a kill lands: populora/core/io.py's write points. Every write passes numbered points (temp
file created, written, renamed; staging folder created, adapter weights, optimizer moments, links,
folder moved into place); `POPULORA_KILL_AT=<stage>:<n>[:<word>]` makes that stage's process SIGKILL
itself at its n-th point, and `POPULORA_WRITE_LOG` lists the points a run passed.

The project: the tiny random model, one arm (population), one generation with evolution after it
(so the checkpoint holds a child), two update jobs of two adapters each, CRUXEval-O on 8 problems.
One undisturbed Snakemake run is the reference; its write log gives each stage's points. Then, in
the same folder (so paths inside artifacts are the same), `snakemake` runs again and again, each
time with one kill: propose, update (job 0), update_gather, checkpoint and the arm's bench, each at
its first point, a middle one and its last (by name where it is unique: the bench job killed in the
middle of its pieces resumes from them, with fewer points); each run must die with that job killed
at that point, and the next one (the same command) picks up. A last run without a kill finishes;
every file under results/ must then equal the reference's (whose stages ran each in a process of its own, not
in the suite's stage host), hidden files included (no temp file or
staging folder left), except the files that record time (logs/, timings/: Snakemake's per-job TSVs,
report/: its timings table, and the timings inside each benchmark result: `wall_s`, `generation_s`,
...) and the engines' own bookkeeping (BOOKKEEPING). The DVC side does the same once: `dvc repro`
killed inside update job 0's writes, `dvc repro` again, the same comparison.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from populora.config import load_params
from tests.conftest import REPO, copy_shipped_files, without_warm_start_or_pool
from tests.dvc_project import GIT_ID
from workflow.dag import dvc_only_outputs

pytestmark = pytest.mark.slow
BIN = str(Path(sys.executable).parent)
TIMED = ("logs", "timings", "report")  # folders whose files record how long things took
# the engines' own files: DVC's lists of its outputs and its dag_shape guard's stamp, Snakemake's mark in a folder output
BOOKKEEPING = (".gitignore", ".dag_shape.ok", ".snakemake_timestamp")
CODE_STAMPS_FOLDER = ".code"  # the guard's code stamps (workflow/code_stamps.py): bookkeeping, not results


@pytest.fixture(scope="module")
def project(tmp_path_factory, tiny_params_dict) -> Path:
    """A scratch project holding its own copy of the code (both engines run the same copy, in place)."""
    root = tmp_path_factory.mktemp("killed")
    for name in ("populora", "stages", "workflow", "profiles"):
        shutil.copytree(REPO / name, root / name, ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("Snakefile", ".gitignore"):
        shutil.copy(REPO / name, root / name)
    copy_shipped_files(root)
    # no warm start or held-out pool to make: none of the five stages killed here reads them
    params = without_warm_start_or_pool(tiny_params_dict)
    params["dag"] = {**params["dag"], "generations": 1, "arms": ["population"], "update_jobs": 2}
    params["evolve"] = {**params["evolve"], "interval": 1, "replace": 1}
    params["bench"] = {
        **params["bench"],
        "benchmarks": ["cruxeval_o"],
        "limits": {"cruxeval_o": 8},
        "max_new_tokens": 16,
        "data_dir": str(REPO.parent / "shared" / "benchmarks"),
    }
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    return root


def _env(**extra: str) -> dict[str, str]:
    env = {**os.environ, **GIT_ID, "PATH": BIN + os.pathsep + os.environ["PATH"], "DVC_NO_ANALYTICS": "1", **extra}
    env.pop("PYTHONPATH", None)  # `python -m stages.x` from the project root imports the project's copy
    for name in ("POPULORA_KILL_AT", "POPULORA_WRITE_LOG"):
        if name not in extra:
            env.pop(name, None)
    return env


def _run(root: Path, *command: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run(list(command), cwd=root, env=_env(**extra), capture_output=True, text=True, timeout=1800)


def _snakemake(root: Path, **extra: str) -> subprocess.CompletedProcess:
    return _run(root, f"{BIN}/snakemake", "--cores", "2", "--resources", "gpu=1", **extra)


def _log(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _artifacts(results: Path) -> dict[str, bytes | None]:
    """Every entry under results/ (hidden ones included) but the timed folders: path -> bytes (None:
    a folder); a benchmark result's timings left out."""
    out = {}
    for path in sorted(results.rglob("*")):
        rel = path.relative_to(results)
        if rel.parts[0] in TIMED or rel.parts[0] == CODE_STAMPS_FOLDER or path.name in BOOKKEEPING:
            continue
        data = path.read_bytes() if path.is_file() else None
        if data is not None and (
            rel.parts[0] == "bench" and path.suffix == ".json" or rel.as_posix() == "warm_start.json"
        ):
            data = json.dumps(_untimed(json.loads(data)), sort_keys=True).encode()
        out[rel.as_posix()] = data
    return out


def _untimed(value):
    """A benchmark result or the warm start's record without its timings (`wall_s`, `generation_s`,
    `s_per_problem`, `gold_loglik.seconds`, a training step's `seconds`, `merge_s`, `tokens_per_s`)."""
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if not (k.endswith("_s") or k in ("s_per_problem", "seconds"))}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _differences(got: dict, want: dict) -> list[str]:
    missing, extra = sorted(set(want) - set(got)), sorted(set(got) - set(want))
    changed = sorted(k for k in set(got) & set(want) if got[k] != want[k])
    return [f"missing {k}" for k in missing] + [f"left over {k}" for k in extra] + [f"differs {k}" for k in changed]


def _points(writes: list[dict], stage: str, word: str | None) -> list[int | str]:
    """Kill points of a stage, in the order they are tried: the first, a middle one and the last of its
    first matching process's writes. The last is named by its point when no other point has that name:
    after a kill, a bench job resumes from the pieces it kept and passes fewer points."""
    mine = [w for w in writes if w["stage"] == stage and (not word or word in w["command"])]
    assert mine, f"the reference run passed no write point of {stage} {word or ''}"
    first = [w for w in mine if w["pid"] == mine[0]["pid"]]
    last = first[-1]["point"] if [w["point"] for w in first].count(first[-1]["point"]) == 1 else first[-1]["n"]
    return list(dict.fromkeys([first[0]["n"], first[len(first) // 2]["n"], last]))


KILLED = (
    ("propose", None),
    ("update", "--part 0"),
    ("update_gather", None),
    ("checkpoint", None),
    ("bench", "--models"),
)


@pytest.fixture(scope="module")
def reference(project, tmp_path_factory) -> dict:
    """The undisturbed run: its artifacts and its write log; project/results is emptied after it. It runs each
    stage in a process of its own, the runs after it in the suite's stage host (tests/conftest.py) where there is
    one: their same bytes are also the host's check (populora/core/stagehost/)."""
    log = tmp_path_factory.mktemp("writes") / "reference.jsonl"
    result = _snakemake(project, POPULORA_WRITE_LOG=str(log), POPULORA_STAGE_HOST="")
    assert result.returncode == 0, result.stderr[-4000:]
    artifacts = _artifacts(project / "results")
    writes = _log(log)
    shutil.rmtree(project / "results")
    shutil.rmtree(project / ".snakemake")
    return {"artifacts": artifacts, "writes": writes}


def test_snakemake_killed_at_several_points_of_five_stages_reruns_to_the_same_bytes(project, reference, tmp_path):
    kills = []
    for stage, word in KILLED:
        kills += [(stage, n, word) for n in _points(reference["writes"], stage, word)]
    log = tmp_path / "kills.jsonl"
    for stage, n, word in kills:
        spec = f"{stage}:{n}" + (f":{word}" if word else "")
        result = _snakemake(project, POPULORA_KILL_AT=spec, POPULORA_WRITE_LOG=str(log))
        killed = [w for w in _log(log) if w["kill"]]
        assert (
            result.returncode != 0
            and killed
            and killed[-1]["stage"] == stage
            and n in (killed[-1]["n"], killed[-1]["point"])
        ), f"{spec}: not killed there (exit {result.returncode})\n{result.stderr[-3000:]}"
        print(f"killed {spec}: {killed[-1]['point']} {Path(killed[-1]['path']).name}")
        log.unlink()
    result = _snakemake(project)
    assert result.returncode == 0, result.stderr[-4000:]
    assert _differences(_artifacts(project / "results"), reference["artifacts"]) == []
    assert len(kills) >= 3 * len(KILLED) - 2  # several points per stage (a stage may have fewer than three)


def test_dvc_repro_killed_inside_an_update_job_reruns_to_the_same_bytes(project, reference, tmp_path):
    shutil.rmtree(project / "results", ignore_errors=True)
    shutil.rmtree(project / ".snakemake", ignore_errors=True)
    for command in (
        [f"{BIN}/python", "-m", "workflow.render_dvc", "--params", "params.yaml", "--out", "dvc.yaml"],
        ["git", "init", "-q"],
        [f"{BIN}/dvc", "init", "-q"],
        ["git", "add", "-A"],
        ["git", "commit", "-qm", "setup"],
    ):
        done = _run(project, *command)
        assert done.returncode == 0, f"{command}: {done.stderr[-2000:]}"
    update = _points(reference["writes"], "update", "--part 0")
    spec, log = f"update:{update[1]}:--part 0", tmp_path / "kills.jsonl"
    first = _run(project, f"{BIN}/dvc", "repro", POPULORA_KILL_AT=spec, POPULORA_WRITE_LOG=str(log))
    killed = [w for w in _log(log) if w["kill"]]
    assert first.returncode != 0 and killed and killed[-1]["stage"] == "update", first.stderr[-3000:]
    print(f"dvc: killed {spec}: {killed[-1]['point']} {Path(killed[-1]['path']).name}")
    again = _run(project, f"{BIN}/dvc", "repro")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    # DVC's matrix also runs the jobs Snakemake never schedules (each writes a note: an empty together group);
    # their folders are the only files the reference cannot have
    notes = {
        Path(path).relative_to("results").as_posix() for path in dvc_only_outputs(load_params(project / "params.yaml"))
    }
    assert notes, "this project has no DVC-only job: the line above no longer tests anything"
    got = {
        k: v
        for k, v in _artifacts(project / "results").items()
        if not any(k == n or k.startswith(n + "/") for n in notes)
    }
    assert _differences(got, reference["artifacts"]) == []
