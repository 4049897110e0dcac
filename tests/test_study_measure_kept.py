"""scripts/study_measure_kept.sh: pass@k and cross-play for committed study runs that finished without them, from
the experiments a study clone's DVC cache still holds. Real git and DVC (a two-experiment project, `dvc exp run`);
`python` stubbed: the measuring tools record their arguments and what they found in the checked-out results."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DVC = Path(sys.executable).parent / "dvc"
GIT_ENV = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@localhost",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@localhost",
}
# the run's stage: a seed-dependent "final student", the warm base, the held-out pool
DVC_YAML = """stages:
  train:
    cmd: >-
      mkdir -p results/population results/warm_base results/heldout && cp seed.txt results/population/student.txt
      && echo base > results/warm_base/w.txt && echo '{"task_id": "t"}' > results/heldout/pool.jsonl
    deps: [seed.txt]
    outs: [results/population, results/warm_base, results/heldout]
"""
# the stand-in for the measuring tools: the arguments, and the final student the scratch clone holds as its output
STUB = """#!/bin/sh
echo "$@" >> {calls}
out=""; prev=""
for a in "$@"; do [ "$prev" = "--out" ] && out=$a; prev=$a; done
mkdir -p "$out"
case "$*" in *populora.analysis.passk*) f=passk.json ;; *) f=crossplay.json ;; esac
printf '{{"student": "%s"}}\\n' "$(cat results/population/student.txt)" > "$out/$f"
"""


def _run(cmd: list[str], cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=cwd, env={**GIT_ENV, **kw.pop("env", {})}, capture_output=True, text=True, **kw)


def _study_clone(path: Path) -> None:
    """A study clone with two experiments: run-s3 (seed 3), then other-s4 (seed 4) left in the workspace."""
    path.mkdir()
    for cmd in (["git", "init", "-q"], [str(DVC), "init", "-q"]):
        _run(cmd, path, check=True)
    (path / "dvc.yaml").write_text(DVC_YAML)
    (path / "seed.txt").write_text("3\n")
    (path / ".gitignore").write_text("/results\n")
    _run(["git", "add", "-A"], path, check=True)
    _run(["git", "commit", "-qm", "study"], path, check=True)
    _run([str(DVC), "exp", "run", "-q", "-n", "run-s3"], path, check=True)
    (path / "seed.txt").write_text("4\n")
    _run([str(DVC), "exp", "run", "-q", "-n", "other-s4"], path, check=True)
    assert (path / "results" / "population" / "student.txt").read_text() == "4\n"


def _checkout(tmp_path: Path) -> Path:
    """This repository's two scripts in a git checkout of their own, with a .venv of the real dvc and the stub."""
    here = tmp_path / "here"
    (here / "scripts").mkdir(parents=True)
    for script in ("study.sh", "study_measure_kept.sh"):
        shutil.copy(ROOT / "scripts" / script, here / "scripts" / script)
    venv = here / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "dvc").symlink_to(DVC)
    (venv / "python").write_text(STUB.format(calls=tmp_path / "calls"))
    (venv / "python").chmod(0o755)
    for name in ("run-s3", "gone-s1"):
        (here / "runs" / name).mkdir(parents=True)
        (here / "runs" / name / "run.json").write_text('{"control": "x"}\n')
    (here / ".gitignore").write_text("/.venv\n")
    _run(["git", "init", "-q"], here, check=True)
    _run(["git", "add", "-A"], here, check=True)
    _run(["git", "commit", "-qm", "runs"], here, check=True)
    return here


def test_a_kept_experiment_is_measured_from_its_own_outputs_and_committed(tmp_path):
    clone = tmp_path / "pw"
    _study_clone(clone)
    here = _checkout(tmp_path)
    env = {"STUDY_PASSK": "64", "STUDY_CROSSPLAY": "8", "STUDY_RUNS": "runs"}
    measured = _run(["bash", "scripts/study_measure_kept.sh", str(clone), "run-s3", "gone-s1"], here, env=env)
    # gone-s1 has no experiment in the clone: reported, the exit says so, run-s3 measured all the same
    assert measured.returncode == 1 and "gone-s1: no single experiment" in measured.stderr, measured.stderr
    for part, file in (("passk", "passk.json"), ("crossplay", "crossplay.json")):
        # the experiment's final student (seed 3), not the workspace's (the later experiment, seed 4)
        assert json.loads((here / "runs" / "run-s3" / part / file).read_text()) == {"student": "3"}
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 2 and all("--base-model results/warm_base" in call for call in calls)
    assert "--run run-s3=results/population --samples 64" in calls[0] and "--tasks-per-gen 8" in calls[1]
    log = _run(["git", "log", "--format=%s", "-1", "--", "runs/run-s3"], here, check=True).stdout
    assert "passk crossplay of its final students" in log
    assert _run(["git", "status", "--porcelain"], here, check=True).stdout == ""
    assert not (tmp_path / "pw-measure-run-s3").exists() and (tmp_path / "pw-measure-run-s3.log").exists()
    assert (clone / "results" / "population" / "student.txt").read_text() == "4\n"  # the study clone only read

    # measured once: asked again, nothing runs and nothing is committed
    (tmp_path / "calls").unlink()
    again = _run(["bash", "scripts/study_measure_kept.sh", str(clone), "run-s3"], here, env=env, check=True)
    assert "nothing to measure" in again.stdout and not (tmp_path / "calls").exists()


def test_what_a_run_still_lacks(tmp_path):
    def missing(arm: str, **env) -> list[str]:
        return _run(
            [
                "bash",
                "-c",
                'source scripts/study_measure_kept.sh && missing_measurements "$1" "$2"',
                "-",
                str(tmp_path),
                arm,
            ],
            ROOT,
            env={"STUDY_PASSK": "", "STUDY_CROSSPLAY": "", **env},
            check=True,
        ).stdout.split()

    assert missing("population") == []  # nothing asked
    assert missing("population", STUDY_PASSK="64", STUDY_CROSSPLAY="8") == ["passk", "crossplay"]
    assert missing("baseline", STUDY_PASSK="64", STUDY_CROSSPLAY="8") == ["passk"]  # no matrix for a single agent
    (tmp_path / "passk").mkdir()
    (tmp_path / "passk" / "passk.json").write_text("{}")
    assert missing("population", STUDY_PASSK="64", STUDY_CROSSPLAY="8") == ["crossplay"]


def test_a_run_killed_after_its_experiment_applies_it_and_a_new_one_runs(tmp_path):
    """scripts/study.sh's `run_experiment`: a run whose attempt was killed after DVC finished (in its final
    measurements, at a session's end) finds its experiment and applies it instead of running it again, which
    `dvc exp run -n` would refuse (the name exists); a run without one runs its stage."""
    clone = tmp_path / "pw"
    _study_clone(clone)

    def run_experiment(name: str, *flags: str) -> subprocess.CompletedProcess:
        command = 'source scripts/study.sh && run_experiment "$@"'
        path = f"{DVC.parent}{os.pathsep}{os.environ.get('PATH', '')}"
        return _run(["bash", "-c", command, "-", str(clone), name, *flags], ROOT, env={"PATH": path})

    applied = run_experiment("run-s3")  # the workspace holds other-s4's outputs
    log = (clone / "run-s3.log").read_text()
    assert applied.returncode == 0, log
    assert "applied to the workspace, not run again" in log and "Running stage" not in log
    assert (clone / "results" / "population" / "student.txt").read_text() == "3\n"

    refused = _run([str(DVC), "exp", "run", "-n", "run-s3"], clone)
    assert refused.returncode != 0, "dvc exp run -n with a name that exists: why the function applies it instead"

    (clone / "seed.txt").write_text("5\n")
    ran = run_experiment("new-s5")
    log = (clone / "new-s5.log").read_text()
    assert ran.returncode == 0, log
    assert "Running stage 'train'" in log
    assert (clone / "results" / "population" / "student.txt").read_text() == "5\n"
    refs = _run(["git", "for-each-ref", "--format=%(refname)", "refs/exps"], clone, check=True).stdout
    assert any(ref.endswith("/new-s5") for ref in refs.split())
