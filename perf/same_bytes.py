"""Does commit NEW reproduce a finished study run's stages byte for byte?

A study runs every seed at one commit (its plan); before a study may move to a faster commit, its plan asks
for this check: the stages of one generation of a run it already has, run again at NEW on exactly the
inputs the run gave them, must write the same bytes. A detached worktree of NEW gets the run's own
params.yaml (from its DVC experiment) and renders dvc.yaml from it; each chosen stage runs its command as
NEW's dvc.yaml spells it, one after another in DAG order, on the run's outputs of the stages before it
(copied out of the project's DVC cache, by the md5 the run's dvc.lock records) or on what the chosen stages
before it wrote. Each output is then compared with the run's: the md5 of every file (a folder's files
through DVC's .dir manifest), and for a file that differs, which JSON keys (or JSONL rows, or safetensors
tensors) do, so that a timing field reads as what it is.

    .venv/bin/python perf/same_bytes.py --project ../pw-20 --exp 1t1s-s22 --generation population:0 \
        --json perf/measured/same_bytes_1t1s_gen0.json

`--only heldout` runs only those stages of the generation (the held-out scoring after the last one: the
primary endpoint); `--set update.learning_rate=0.00101` changes a key of the run's params, a control that must
fail the check (exit 1 when any output differs). Run it on an idle machine with the run's threads (OMP_NUM_THREADS=2 for a study on both cores): float
arithmetic is only reproducible at the same thread count and machine kind.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from populora.core.io import write_json  # noqa: E402

TIMING_WORDS = ("wall", "seconds", "per_s", "time", "elapsed", "duration")  # or a key ending in _s


def git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def experiment_ref(project: Path, name: str) -> str:
    refs = [
        r
        for r in git("for-each-ref", "--format=%(refname)", "refs/exps", cwd=project).split()
        if r.endswith("/" + name)
    ]
    if len(refs) != 1:
        raise SystemExit(f"{project}: {len(refs)} DVC experiments named {name!r} (dvc exp list shows them)")
    return refs[0]


def md5_of(path: Path) -> str:
    digest = hashlib.md5()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Cache:
    """The project's DVC cache, read by the md5s its dvc.lock records (DVC 3: files/md5/ab/cdef...)."""

    def __init__(self, project: Path) -> None:
        self.root = project / ".dvc" / "cache" / "files" / "md5"

    def object(self, md5: str) -> Path:
        path = self.root / md5[:2] / md5[2:]
        if not path.is_file():
            raise SystemExit(f"{path}: not in the project's DVC cache (was the run's output garbage-collected?)")
        return path

    def manifest(self, md5: str) -> dict[str, str]:
        """A folder output: relpath -> md5 of each file."""
        return {row["relpath"]: row["md5"] for row in json.loads(self.object(md5).read_text())}

    def files(self, out: dict) -> dict[str, str]:
        """relpath -> md5 of an output from the lock ('' for a plain file)."""
        md5 = out["md5"]
        return self.manifest(md5) if md5.endswith(".dir") else {"": md5}

    def materialize(self, out: dict, dest: Path) -> None:
        """The output as the run wrote it, copied (never linked: the cache stays read-only)."""
        for relpath, md5 in self.files(out).items():
            target = dest / relpath if relpath else dest
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(self.object(md5), target)


def files_of(path: Path) -> dict[str, str]:
    """relpath -> md5 of what a stage wrote at `path` (a file: one entry, '')."""
    if path.is_file():
        return {"": md5_of(path)}
    return {str(p.relative_to(path)): md5_of(p) for p in sorted(path.rglob("*")) if p.is_file()}


def json_differences(old, new, prefix: str = "") -> list[str]:
    """The key paths where two JSON values differ (a few levels deep; long values shortened)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out = []
        for key in sorted(set(old) | set(new), key=str):
            path = f"{prefix}.{key}" if prefix else str(key)
            if key not in old or key not in new:
                out.append(f"{path}: only {'new' if key in new else 'old'}")
            else:
                out += json_differences(old[key], new[key], path)
        return out
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [
            d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in json_differences(a, b, f"{prefix}[{i}]")
        ]
    return [] if old == new else [f"{prefix}: {str(old)[:60]} -> {str(new)[:60]}"]


def explain(relpath: str, old: Path, new: Path) -> list[str]:
    """What differs inside one file of an output."""
    name = relpath or new.name
    if name.endswith(".json"):
        return json_differences(json.loads(old.read_text()), json.loads(new.read_text()))
    if name.endswith(".jsonl"):
        a, b = old.read_text().splitlines(), new.read_text().splitlines()
        if len(a) != len(b):
            return [f"{len(a)} rows -> {len(b)} rows"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            if x != y
            for d in json_differences(json.loads(x), json.loads(y), f"row{i}")
        ][:20]
    if name.endswith(".safetensors"):
        from safetensors.torch import load_file

        x, y = load_file(old), load_file(new)
        worst = max(
            (float((x[k].float() - y[k].float()).abs().max()) for k in x if k in y and x[k].shape == y[k].shape),
            default=0.0,
        )
        return [f"tensors {sorted(set(x) ^ set(y))[:4] or 'same names'}, largest entry difference {worst:.3g}"]
    return ["binary content differs"]


def is_timing(difference: str) -> bool:
    """A difference in a field that measures time (the only kind a reproduction may change)."""
    key = difference.split(":", 1)[0].rsplit(".", 1)[-1].lower()
    return ": only " not in difference and (key.endswith("_s") or any(word in key for word in TIMING_WORDS))


def compare(out: dict, workdir: Path, cache: Cache) -> dict:
    """One output of a stage against the run's."""
    path = workdir / out["path"]
    old, new = cache.files(out), files_of(path)
    differing = sorted(r for r in set(old) | set(new) if old.get(r) != new.get(r))
    details = {}
    for relpath in differing:
        if relpath in old and relpath in new:
            details[relpath or Path(out["path"]).name] = explain(
                relpath, cache.object(old[relpath]), path / relpath if relpath else path
            )
        else:
            details[relpath] = [f"file: only {'new' if relpath in new else 'old'}"]
    found = [x for d in details.values() for x in d]
    if not differing:
        verdict = "same bytes"
    elif all(is_timing(x) for x in found):
        verdict = "timing fields only"
    elif all(is_timing(x) or x.endswith(": only new") for x in found):
        verdict = "keys added, the rest timing or the same"  # new code writes more, changes nothing written before
    else:
        verdict = "DIFFERS"
    return {"path": out["path"], "files": len(old), "verdict": verdict, "differences": details}


def without_work(args: list[str]) -> list[str]:
    """The command line without `--work FOLDER` (or `--work=FOLDER`)."""
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--work":
            skip = True
        elif not arg.startswith("--work="):
            out.append(arg)
    return out


def chosen_stages(repo_stages: list, generation: str) -> list:
    """The stages of ARM:N (`propose@population-gen0`, `update@population-gen0-1`, ...), as DVC lists them."""
    arm, _, number = generation.partition(":")
    key = f"@{arm}-gen{int(number)}"
    return [s for s in repo_stages if s.name.endswith(key) or (key + "-") in s.name]


def in_dag_order(plans: list[dict]) -> list[dict]:
    """Each stage after the chosen stages whose outputs it reads."""
    produced = {out: plan["name"] for plan in plans for out in plan["outs"]}
    done: set[str] = set()
    ordered: list[dict] = []
    while len(ordered) < len(plans):
        ready = [
            p
            for p in plans
            if p["name"] not in done and all(produced.get(d, p["name"]) in done | {p["name"]} for d in p["deps"])
        ]
        if not ready:
            raise SystemExit(f"a cycle among {sorted(set(produced.values()) - done)}")
        ordered.append(ready[0])
        done.add(ready[0]["name"])
    return ordered


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", required=True, help="the study clone scripts/study.sh ran the run in")
    parser.add_argument(
        "--exp",
        required=True,
        help="the run's DVC experiment (scripts/study.sh names it CONTROL-sSEED); `workspace`: the run DVC is "
        "running now, from the clone's dvc.lock and params.yaml (read it while DVC is stopped between stages)",
    )
    parser.add_argument("--generation", required=True, help="ARM:N, the generation whose stages run again")
    parser.add_argument(
        "--only", action="append", default=[], metavar="STAGE", help="run only these stages of the generation (heldout)"
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change a params key of the run (a control that must fail the check, e.g. update.learning_rate=0.00101)",
    )
    parser.add_argument("--new", default="HEAD", help="the commit to check")
    parser.add_argument(
        "--work", default=None, help="a scratch folder (its worktree is replaced; default: a new temporary folder)"
    )
    parser.add_argument("--json", default=None)
    return parser.parse_args(argv)


def run_files(project: Path, exp: str) -> tuple[str | None, str, str]:
    """(the experiment's git ref or None for the workspace, its dvc.lock's text, its params.yaml's text)."""
    if exp == "workspace":
        return None, (project / "dvc.lock").read_text(), (project / "params.yaml").read_text()
    ref = experiment_ref(project, exp)
    return ref, git("show", f"{ref}:dvc.lock", cwd=project), git("show", f"{ref}:params.yaml", cwd=project)


def with_settings(params: dict, settings: list[str]) -> dict:
    """`params` with each `KEY=VALUE` of `settings` (a dotted key the run's params have; the value as YAML) set."""
    params = json.loads(json.dumps(params))
    for setting in settings:
        key, _, value = setting.partition("=")
        *parents, leaf = key.split(".")
        section = params
        for name in parents:
            section = section.get(name) if isinstance(section, dict) else None
            if section is None:
                break
        if not isinstance(section, dict) or leaf not in section:
            raise SystemExit(f"--set {setting}: the run's params have no {key}")
        section[leaf] = yaml.safe_load(value)
    return params


def new_checkout(work: Path, commit: str, params_text: str, settings: list[str]) -> Path:
    """A detached worktree of `commit` under `work` (an earlier one replaced) holding the run's params.yaml
    (byte for byte, unless `settings` change it)."""
    checkout = work / "checkout"
    if checkout.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(checkout)], check=False)
        shutil.rmtree(checkout, ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    git("worktree", "add", "--detach", str(checkout), commit, cwd=REPO)
    changed = yaml.safe_dump(with_settings(yaml.safe_load(params_text), settings), sort_keys=False)
    (checkout / "params.yaml").write_text(changed if settings else params_text)
    return checkout


def stage_env(checkout: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PATH": f"{REPO / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}",
        "PYTHONPATH": str(checkout),
        # the benchmarks' data: params name it beside the repository (../shared), which the worktree is not
        "POPULORA_BENCHMARKS": os.environ.get(
            "POPULORA_BENCHMARKS", str((REPO.parent / "shared" / "benchmarks").resolve())
        ),
    }


def stage_plans(checkout: Path, generation: str, only: list[str], env: dict[str, str]) -> list[dict]:
    """The generation's stages (those named in `only`, when given) as the checkout's dvc.yaml spells them, rendered
    from the run's params: name, command, deps and outs, in DAG order."""
    subprocess.run([sys.executable, "-m", "workflow.render_dvc"], cwd=checkout, env=env, check=True)
    from dvc.repo import Repo

    with Repo(str(checkout)) as repo:
        every = list(repo.index.stages)
        stages = [s for s in chosen_stages(every, generation) if not only or s.name.split("@")[0] in only]
        plans = [
            {
                "name": s.name,
                "cmd": s.cmd,
                "deps": [str(d.def_path) for d in s.deps],
                "outs": [str(o.def_path) for o in s.outs],
            }
            for s in stages
        ]
    if not plans:
        names = ", ".join(s.name for s in every[:12])
        raise SystemExit(f"no stage of {generation} in {checkout / 'dvc.yaml'} (its stages: {names}, ...)")
    return in_dag_order(plans)


def inputs_to_restore(deps: list[str], old_outs: dict, written: set[str], stage: str) -> list[str]:
    """The run's outputs a stage reads that the chosen stages before it did not write (a folder of several
    outputs, such as update/ of the update jobs' parts, read whole); code stamps and files outside results/ are
    the checkout's own."""
    needed = []
    for dep in deps:
        if not dep.startswith("results/") or dep.startswith("results/.code"):
            continue
        inside = [o for o in old_outs if o == dep or o.startswith(dep + "/")]
        if not inside:
            raise SystemExit(f"{stage} reads {dep}, which the run's dvc.lock has no output for")
        needed += [path for path in inside if path not in written and path not in needed]
    return needed


def run_and_compare(plans: list[dict], checkout: Path, env: dict, old_outs: dict, cache: Cache) -> list[dict]:
    """Each stage run on the run's inputs, its outputs compared with the run's: one record per stage."""
    written: set[str] = set()
    record = []
    for plan in plans:
        for path in inputs_to_restore(plan["deps"], old_outs, written, plan["name"]):
            shutil.rmtree(checkout / path, ignore_errors=True)
            cache.materialize(old_outs[path], checkout / path)
        for out in plan["outs"]:
            target = checkout / out
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
        start = time.perf_counter()
        result = subprocess.run(plan["cmd"], shell=True, cwd=checkout, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if result.returncode != 0:
            raise SystemExit(f"{plan['name']} failed ({result.returncode}):\n{result.stderr[-3000:]}")
        written.update(plan["outs"])
        outs = [compare(old_outs[o], checkout, cache) for o in plan["outs"] if o in old_outs]
        # an output the run never wrote (the new code's DAG added it): listed, nothing to compare it with
        outs += [{"path": o, "verdict": "new output"} for o in plan["outs"] if o not in old_outs]
        record.append({"stage": plan["name"], "wall_s": round(wall, 1), "outputs": outs})
        print(plan["name"], f"{wall:.1f} s", [o["verdict"] for o in outs], flush=True)
    return record


COUNTED = {
    "same_bytes": "same bytes",
    "timing_fields_only": "timing fields only",
    "keys_added": "keys added, the rest timing or the same",
    "new_outputs": "new output",
    "differs": "DIFFERS",
}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    project = Path(args.project).resolve()
    work = Path(args.work or tempfile.mkdtemp(prefix="same-bytes-")).resolve()
    ref, lock_text, params_text = run_files(project, args.exp)
    old_outs = {o["path"]: o for stage in yaml.safe_load(lock_text)["stages"].values() for o in stage.get("outs", [])}
    checkout = new_checkout(work, args.new, params_text, args.set)
    env = stage_env(checkout)
    plans = stage_plans(checkout, args.generation, args.only, env)
    record = run_and_compare(plans, checkout, env, old_outs, Cache(project))
    verdicts = [o["verdict"] for stage in record for o in stage["outputs"]]
    counts = {key: verdicts.count(verdict) for key, verdict in COUNTED.items()}
    summary = {
        "project": str(args.project),
        "experiment": args.exp,
        # the experiment's parent: the clone's commit (the study's source commit with its overlay applied)
        "run_commit": git("log", "--format=%h %s", "-n", "2", f"{ref}^" if ref else "HEAD", cwd=project)
        .strip()
        .splitlines(),
        "new_commit": git("rev-parse", "--short", "HEAD", cwd=checkout).strip(),
        "generation": args.generation,
        "set": args.set,
        "threads": os.environ.get("OMP_NUM_THREADS"),
        "outputs": len(verdicts),
        **counts,
        "stages": record,
        # the scratch folder is this machine's and changes nothing measured: left out of the record
        "command": "python perf/same_bytes.py " + " ".join(without_work(argv if argv is not None else sys.argv[1:])),
    }
    print(json.dumps({"outputs": len(verdicts), **counts}))
    if args.json:
        write_json(args.json, summary)
    return 0 if summary["differs"] == 0 else 1


if __name__ == "__main__":
    raise SystemExit(main())
