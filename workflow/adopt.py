"""One run, both engines: what one engine made, the other takes as its own (no second run).

    python -m workflow.adopt --into dvc        # after Snakemake: DVC records its outputs (the Snakefile's
                                               # onsuccess hook does this after every successful run)
    python -m workflow.adopt --into snakemake  # after `dvc repro` / `dvc exp run`: Snakemake records them

The two engines run the same commands over the same paths (dvc.yaml is rendered from workflow/dag.py,
the Snakefile reads it), so a result one made is the result the other would make. Only the records differ:
DVC hashes deps, params and outs into dvc.lock; Snakemake keeps params, inputs and times in
`.snakemake/metadata`.

Into DVC. A stage DVC sees as changed is committed (`dvc commit -f` of that stage: outs into the cache,
hashes into dvc.lock) when its outputs are what the current code and inputs make:

* Snakemake's run had it in its DAG (`made`: the outputs of every job of the run, run or found up to date
  by Snakemake's own triggers: mtime, params, inputs, rule code), so the params it read are the current ones;
* every output is at least as new as every file it depends on. Snakemake does not rerun a job when the
  library code it imports changes (DVC does: each stage depends on its imports, `workflow.dag.code_deps`,
  through its code stamp), so a stage whose code changed after it ran is left to `dvc repro`, and said so.
  A code stamp stands for its files here: their times count, not the stamp's (written after the run).

The guard stage `dag_shape` is DVC's alone; its stamp and the code stamps are written here after the same check.

Into Snakemake. Only when `dvc status` is clean: `snakemake --touch --forceall` records every job's
params and code in its metadata and touches the outputs in DAG order, so `snakemake -n` has nothing to do
and a later params change reruns exactly what it should. (Without it Snakemake also has nothing to do
after `dvc repro` of a fresh checkout, but it reruns a job whose params it recorded before DVC reran it,
and cannot see a later params change of a job it never recorded.)
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from workflow.code_stamps import module_of_stamp, write_code_stamps
from workflow.dag import RESULTS, code_deps
from workflow.render_dvc import GUARD, GUARD_STAMP, write_stamp
from workflow.render_dvc import main as render_main

SKIP = {"__pycache__"}  # bytecode (.dvcignore): written when a later job imports, never a change
SNAKEMAKE_ARGS = ("--cores", "1", "--resources", "gpu=1")


def newest(path: Path, *, directories: bool) -> float | None:
    """The newest mtime under `path` (None if missing); with `directories`, folders' own mtimes count too
    (an output folder's entries are made by its job; a dependency folder's, e.g. bytecode, need not be)."""
    if path.is_file():
        return path.stat().st_mtime
    if not path.is_dir():
        return None
    times = [path.stat().st_mtime] if directories else []
    for folder, dirs, files in os.walk(path):
        dirs[:] = [d for d in dirs if d not in SKIP]
        if directories:
            times += [Path(folder, d).stat().st_mtime for d in dirs]
        times += [Path(folder, f).stat().st_mtime for f in files if f not in SKIP and not f.endswith(".pyc")]
    return max(times, default=None)


def why_not(stage, made: set[str] | None) -> str | None:
    """Why the outputs of `stage` (a DVC stage DVC sees as changed) cannot be adopted; None if they can."""
    if stage.name == GUARD:
        return None  # its check ran just now
    outs = [out.def_path for out in stage.outs]
    if made is not None and not set(outs) <= made:
        return "not in this Snakemake run's DAG"
    out_times = {path: newest(Path(path), directories=True) for path in outs}
    if None in out_times.values():
        return f"no output {next(p for p, t in out_times.items() if t is None)}"
    oldest_out = min(out_times.values(), default=None)
    for path in _dependency_files(stage):
        when = newest(Path(path), directories=False)
        if when is None:
            return f"no dependency {path}"
        if oldest_out is not None and when > oldest_out:
            if path.startswith(f"{RESULTS}/"):
                return f"its input {path} is newer than its outputs"
            return (
                f"{path} changed after it ran (Snakemake does not rerun a job when the code it imports "
                f"changes; `dvc repro` does)"
            )
    return None


def _dependency_files(stage) -> list[str]:
    """The files whose times decide an adoption: a stage's deps, its code stamp replaced by the source files
    it stands for (the stamp itself is written after the run), params and the guard's marker left out."""
    from dvc.dependency import ParamsDependency

    paths = []
    for dep in stage.deps:
        if isinstance(dep, ParamsDependency) or dep.def_path == GUARD_STAMP:
            continue
        module = module_of_stamp(dep.def_path)
        paths += list(code_deps(module)) if module else [dep.def_path]
    return paths


def into_dvc(made: set[str] | None = None, params: str = "params.yaml") -> int:
    """Commit to DVC every changed stage whose outputs can be adopted (module docstring); 0 when `dvc
    status` is clean after it, 1 when stages are left (each named with the reason), 2 when dvc.yaml is stale."""
    if not Path(".dvc").is_dir():
        print("adopt: not a DVC project (no .dvc/): nothing for DVC to adopt")
        return 0
    if render_main(["--check", "--shape-only", "--params", params, "--out", "dvc.yaml"]) != 0:
        print("adopt: dvc.yaml does not match params.yaml (above); DVC's records left as they were", file=sys.stderr)
        return 2
    write_stamp(GUARD_STAMP)
    write_code_stamps()
    try:
        from populora.config import load_params
        from workflow.dag import dvc_only_outputs

        return _commit_stages(made, dvc_only_outputs(load_params(params)))
    except Exception as error:  # noqa: BLE001 -- DVC missing or busy (another dvc command holds its lock)
        print(
            f"adopt: DVC could not adopt the run ({type(error).__name__}: {error}). Fix: run `python -m "
            f"workflow.adopt --into dvc` once no dvc command runs here",
            file=sys.stderr,
        )
        return 1


def _commit_stages(made: set[str] | None, dvc_only: set[str] = frozenset()) -> int:
    from dvc.repo import Repo, lock_repo

    adopted, left, notes = [], {}, []
    with Repo(".") as repo, lock_repo(repo):
        changed = [stage for stage in repo.index.stages if stage.status()]  # the others are DVC's already
        # DVC's matrix has jobs Snakemake never schedules (they write a note: workflow.dag.dvc_only_outputs):
        # nothing to adopt, so they run after the adoption (_run_notes), seconds each
        notes = [stage for stage in changed if stage.outs and {out.def_path for out in stage.outs} <= dvc_only]
        changed = [stage for stage in changed if stage not in notes]
        # every verdict before any commit: what one stage's commit touches must not decide the next's
        reasons = {stage.addressing: why_not(stage, made) for stage in changed}
        for stage in changed:
            reason = reasons[stage.addressing]
            if reason is None:
                try:
                    stage.save()
                    # relink=False: the outputs stay the files Snakemake wrote (a copy goes to the cache), so
                    # their mtimes, which Snakemake's own rerun trigger reads, do not move
                    stage.commit(relink=False)
                except Exception as error:  # noqa: BLE001 -- a DVC error on one stage: named, the rest go on
                    reason = f"{type(error).__name__}: {error}"
            if reason is None:
                adopted.append(stage)
            else:
                left[stage.addressing] = reason
        if adopted:
            adopted[0].dvcfile.dump_stages(adopted, update_pipeline=False)
        if notes:
            done, failed = _run_notes(notes, list(repo.index.stages))
            known = {stage.addressing for stage in adopted}
            adopted += [stage for stage in done if stage.addressing not in known]
            for stage in done:  # refused above (a folder newer than its outputs), rerun and committed since
                left.pop(stage.addressing, None)
            left |= failed
    print(
        f"adopt: DVC adopted {len(adopted)} stage(s) made by Snakemake (dvc.lock, the DVC cache)"
        + ("; `dvc status` is clean" if not left else "")
    )
    for name, reason in left.items():
        print(f"adopt: left {name}: {reason}", file=sys.stderr)
    return 1 if left else 0


# stages that never read a note of their folder: committed as they are, not rerun (a rerun would rewrite their
# outputs, and Snakemake, which goes by times, would then redo every job after them)
NOTE_BLIND = {"update_gather": "reads parts 0 .. (adapters - 1) only (stages/update_gather.py); a note part is above"}


def _run_notes(notes: list, stages: list) -> tuple[list, dict[str, str]]:
    """Run the jobs Snakemake never schedules (`notes`: each writes a note in a second, no model), then rerun
    the CPU stages of seconds (local, or no GPU) among `stages` with a folder dependency now holding a note
    (`results/bench` of bench_summary and report): the same commands DVC would run, run here directly (a
    `dvc repro` per stage re-reads the whole project), then committed. A stage of NOTE_BLIND (update_gather)
    is committed without a rerun. Returns the stages committed and those left, with the reason."""
    from workflow.dag import STAGES

    order = [stage.name for stage in STAGES]
    cheap = {stage.name for stage in STAGES if stage.local or not stage.gpu}
    written = {out.def_path.rstrip("/") for stage in notes for out in stage.outs}

    def holds_note(stage) -> bool:
        return any(path.startswith(dep.def_path.rstrip("/") + "/") for dep in stage.deps for path in written)

    noted = {stage.addressing for stage in notes}
    rerun = sorted(
        (
            stage
            for stage in stages
            if stage.addressing not in noted and stage.addressing.split("@")[0] in cheap and holds_note(stage)
        ),
        key=lambda stage: order.index(stage.addressing.split("@")[0]),
    )
    done, left = [], {}
    for stage in [*notes, *rerun]:
        blind = stage.addressing.split("@")[0] in NOTE_BLIND
        ran = None if blind else subprocess.run(stage.cmd, shell=True, capture_output=True, text=True)
        if ran is not None and ran.returncode:
            left[stage.addressing] = f"its command failed ({ran.returncode}): {ran.stderr.strip()[-500:]}"
            continue
        try:
            stage.save()
            stage.commit(relink=False)
            done.append(stage)
        except Exception as error:  # noqa: BLE001 -- a DVC error on one stage: named, the rest go on
            left[stage.addressing] = f"{type(error).__name__}: {error}"
    if done:
        done[0].dvcfile.dump_stages(done, update_pipeline=False)
    print(
        f"adopt: ran {len(notes)} job(s) only DVC's matrix has (each writes a note); {len(rerun)} stage(s) whose "
        f"folder now holds one rerun or, never reading notes, committed: {', '.join(s.addressing for s in [*notes, *rerun])}"
    )
    return done, left


def dvc_is_clean() -> dict:
    from dvc.repo import Repo

    with Repo(".") as repo:
        return repo.status()


def into_snakemake(extra: list[str]) -> int:
    """`snakemake --touch --forceall` when DVC says every stage is up to date (module docstring)."""
    status = dvc_is_clean()
    if status:
        print(
            f"adopt: `dvc status` lists {len(status)} stage(s) to reproduce ({', '.join(sorted(status)[:5])}"
            f"{', ...' if len(status) > 5 else ''}); Snakemake takes only a finished DVC run. Fix: dvc repro, "
            "then run this again",
            file=sys.stderr,
        )
        return 1
    env = {**os.environ, "POPULORA_ADOPT": "0"}  # DVC is the source here: no adoption back
    return subprocess.run(["snakemake", "--touch", "--forceall", *extra, *SNAKEMAKE_ARGS], env=env).returncode


def after_snakemake(workflow) -> None:
    """The Snakefile's onsuccess hook: DVC adopts what this run made (in a DVC project, unless
    POPULORA_ADOPT=0). Never fails the run: a stage left is named with the reason and the fix."""
    if os.environ.get("POPULORA_ADOPT", "1") == "0" or not Path(".dvc").is_dir():
        return
    try:
        made = sorted({str(path) for job in workflow.dag.jobs for path in job.output})
    except AttributeError as error:  # Snakemake's DAG API moved: adopt nothing rather than guess
        print(f"adopt: cannot read this Snakemake's DAG ({error}); DVC's records left as they were", file=sys.stderr)
        return
    listing = Path(".snakemake", "adopt_made.txt")
    listing.parent.mkdir(exist_ok=True)
    listing.write_text("".join(f"{path}\n" for path in made))
    path = os.pathsep.join(filter(None, (str(workflow.basedir), os.environ.get("PYTHONPATH"))))  # this workflow/
    result = subprocess.run(
        [sys.executable, "-m", "workflow.adopt", "--into", "dvc", "--made", str(listing)],
        env={**os.environ, "PYTHONPATH": path},
    )
    if result.returncode:
        print("adopt: some stages stay DVC-changed (above); `dvc repro` reruns exactly those", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--into", choices=("dvc", "snakemake"), required=True)
    parser.add_argument(
        "--made",
        help="with --into dvc: a file listing the outputs of the Snakemake run's DAG "
        "(the onsuccess hook writes it); without it, `snakemake -n` must have "
        "nothing to do and every stage counts",
    )
    parser.add_argument("--params", default="params.yaml")
    args, extra = parser.parse_known_args(argv)
    if args.into == "snakemake":
        return into_snakemake(extra)
    if extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.made:
        made = {line.strip() for line in Path(args.made).read_text().splitlines() if line.strip()}
        return into_dvc(made, args.params)
    dry = subprocess.run(["snakemake", "-n", *SNAKEMAKE_ARGS], capture_output=True, text=True)
    if dry.returncode or "Nothing to be done" not in dry.stdout + dry.stderr:
        print(
            "adopt: `snakemake -n` has jobs to run: DVC adopts only a finished Snakemake run. Fix: run Snakemake "
            "(its onsuccess hook adopts), or pass --made",
            file=sys.stderr,
        )
        return 1
    return into_dvc(None, args.params)


if __name__ == "__main__":
    raise SystemExit(main())
