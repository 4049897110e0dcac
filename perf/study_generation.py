"""One learning-study generation of 1T-1S (or 2T-2S), old code against new, side by side on this machine.

Each side is a detached `git worktree` of its commit with the learning study's overlay (1 teacher, 1
student, one generation, the study's held-out pool) and the converted base model linked in. The untimed
part (init, the held-out pool and the base model's verdicts on it) runs first; then Snakemake runs
generation 0 from pairing to held-out scoring (pair, propose, verify, solve, grade, reward, update,
update_gather, evolve, checkpoint, heldout), timed as a whole and per job (Snakemake's benchmark files).
Sides alternate when `--repeats` > 1; the medians and the ratio old / new are written to `--json`. `--seeds`
gives each repeat its own base.seed (both sides the same), so that the medians are over the sampled tokens' luck too.
`--dtype` pins model.dtype on both sides, `--members 2` runs 2 teachers + 2 students, `--new-set KEY=VALUE`
sets a key on the new side only (one the old commit may not know, e.g. model.cpu_threads=2), and each repeat
compares the two sides' trained adapters and held-out verdicts (`compared`: meaningful at equal dtype and threads).
`--host new` (the default) runs the new side's stages in a stage host of its own commit, as scripts/run_pipeline.sh
and scripts/study.sh do on a CPU run (the host's imports fall in the untimed part, as a run pays them once);
each side records which of its generation's jobs ran hosted (`hosted_jobs`).

    .venv/bin/python perf/study_generation.py --old 5e1b959 --new HEAD --work /tmp/studygen \
        --base-model results/base_model --dtype bfloat16 --repeats 3 --new-set model.cpu_threads=2 \
        --json perf/measured/study_generation_1t1s_bf16.json

Run it on an idle machine (stop other runs with SIGSTOP): both sides use both cores. `--old-record
perf/measured/<earlier>.json` reuses an earlier run's old side (only the new side runs; the record
says so in `old_from`): a comparison across two runs, so only on the same machine kind.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from populora.config import merge  # noqa: E402
from populora.core.io import write_json  # noqa: E402

TARGET = "results/population/gen000/heldout.json"
SETUP = ("results/population/init", "results/heldout/base.json")
STUDY = object()  # stands for the side's own study overlay (--overlay, read in its worktree)
OVERLAY = "params/learning-study.yaml"


def one_arm(members: int) -> dict:
    """One generation of the population arm with `members` teachers and as many students."""
    return {"dag": {"arms": ["population"], "generations": 1}, "population": {"teachers": members, "students": members}}


def setting(text: str) -> dict:
    """`a.b=value` as a nested overlay ({"a": {"b": value}}), the value read as YAML."""
    key, _, value = text.partition("=")
    out: dict = yaml.safe_load(value) if value else None
    for part in reversed(key.split(".")):
        out = {part: out}
    return out


def prepare(side: Path, commit: str, base_model: Path, overlays: list[dict]) -> None:
    """A worktree of `commit` at `side` with the overlays applied and the base model in place."""
    if side.exists():
        subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force", str(side)], check=False)
        shutil.rmtree(side, ignore_errors=True)
    subprocess.run(
        ["git", "-C", str(REPO), "worktree", "add", "--detach", str(side), commit], check=True, capture_output=True
    )
    (side / ".venv").symlink_to(REPO / ".venv" if (REPO / ".venv").exists() else Path(sys.prefix))
    raw = yaml.safe_load((side / "params.yaml").read_text())
    # each side takes the study overlay of its own commit (an older config refuses keys it never had)
    overlays = [yaml.safe_load((side / OVERLAY).read_text()) if o is STUDY else o for o in overlays]
    for overlay in overlays:
        raw = merge(raw, overlay)
    (side / "params.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    (side / "results").mkdir(exist_ok=True)
    shutil.copytree(base_model, side / "results" / "base_model")


def side_env(side: Path) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(side), "PATH": f"{side / '.venv' / 'bin'}{os.pathsep}{os.environ['PATH']}"}


@contextmanager
def stage_host(side: Path, wanted: bool):
    """The side's own stage host (populora/core/stagehost, its commit's code) while the block runs, as
    scripts/run_pipeline.sh and scripts/study.sh start one on a CPU run; yields the socket or None (not wanted,
    or a commit without a host)."""
    if not wanted or not (side / "populora" / "core" / "stagehost").is_dir():
        yield None
        return
    socket_path = side / ".stagehost" / "stages.sock"
    socket_path.parent.mkdir(exist_ok=True)
    socket_path.unlink(missing_ok=True)
    log = open(socket_path.parent / "host.log", "w")
    host = subprocess.Popen(
        [
            str(side / ".venv" / "bin" / "python"),
            "-m",
            "populora.core.stagehost",
            "serve",
            "--socket",
            str(socket_path),
        ],
        cwd=side,
        env=side_env(side),
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        # it listens before it imports: a stage started early waits for the imports (they are not timed apart)
        for _ in range(600):
            if socket_path.exists() or host.poll() is not None:
                break
            time.sleep(0.05)
        if host.poll() is not None:
            raise SystemExit(f"{side}: the stage host exited ({(socket_path.parent / 'host.log').read_text()[-2000:]})")
        yield socket_path
    finally:
        host.terminate()
        host.wait(timeout=30)
        log.close()


def snakemake(side: Path, *targets: str, host: Path | None = None) -> float:
    env = side_env(side)
    if host is not None:
        env["POPULORA_STAGE_HOST"] = str(host)
    else:
        env.pop("POPULORA_STAGE_HOST", None)
    start = time.perf_counter()
    # mtime only: the base model folder came in by copy and must not be converted again
    result = subprocess.run(
        [
            str(side / ".venv" / "bin" / "snakemake"),
            *targets,
            "--cores",
            "2",
            "--resources",
            "gpu=1",
            "--rerun-triggers",
            "mtime",
        ],
        cwd=side,
        env=env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise SystemExit(f"{side}: snakemake {' '.join(targets)} failed:\n{result.stderr[-3000:]}")
    return time.perf_counter() - start


def job_times(side: Path) -> dict[str, float]:
    """Seconds per job of generation 0 from Snakemake's benchmark files (results/timings/<stage>/<key>.tsv)."""
    out = {}
    for tsv in sorted((side / "results" / "timings").glob("*/population-000*.tsv")):  # <stage>/<arm>-<gen>[-<part>]
        lines = tsv.read_text().splitlines()
        if len(lines) >= 2:
            out[f"{tsv.parent.name}/{tsv.stem}"] = float(lines[1].split("\t")[0])
    return out


def one_side(work: Path, name: str, commit: str, args, overlays: list[dict]) -> dict:
    side = work / name
    prepare(side, commit, Path(args.base_model), overlays)
    with stage_host(side, name in args.host) as host:
        # the host's imports are paid here, untimed, as a run pays them once before its first stage
        snakemake(side, *SETUP, host=host)  # untimed: init, the pool and the base's verdicts
        wall = snakemake(side, TARGET, host=host)
    # a hosted stage's stand-in writes the stage's own usage beside Snakemake's benchmark file: proof it ran hosted
    hosted = sorted(
        f"{p.parent.name}/{p.name.split('.')[0]}"
        for p in (side / "results" / "timings").glob("*/population-000*.usage.json")
    )
    return {
        "commit": subprocess.run(
            ["git", "-C", str(side), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
        ).stdout.strip(),
        "wall_s": round(wall, 1),
        "hosted_jobs": hosted,
        "jobs": job_times(side),
    }


def compare_sides(work: Path) -> dict:
    """What the new code changed in the generation's results: the largest difference of any trained adapter
    tensor (the largest entry's, and the difference's norm over the tensor's) and the held-out verdicts that differ."""
    from safetensors.torch import load_file

    tensors, verdicts = {}, {}
    for name in ("old", "new"):
        trained = work / name / "results" / "population" / "gen000" / "trained"
        tensors[name] = {
            f"{path.parent.name}/{key}": value.float()
            for path in sorted(trained.glob("adapters/*/*.safetensors"))
            for key, value in load_file(path).items()
        }
        scores = json.loads((work / name / TARGET).read_text())
        verdicts[name] = scores.get("verdicts") or {}
    worst_abs = worst_rel = 0.0
    for key, old in tensors["old"].items():
        new = tensors["new"].get(key)
        if new is None or new.shape != old.shape:
            return {"adapters": f"{key}: missing or reshaped on the new side"}
        worst_abs = max(worst_abs, float((new - old).abs().max()))
        # the difference's norm over the tensor's: one entry near zero (Adam's first step is lr x g / |g|) may flip
        worst_rel = max(worst_rel, float((new - old).norm()) / max(float(old.norm()), 1e-12))
    flat = {
        name: {(m, t): v for m, row in table.items() if isinstance(row, dict) for t, v in row.items()}
        for name, table in verdicts.items()
    }
    differing = sorted(f"{m}:{t}" for (m, t) in flat["old"] if flat["new"].get((m, t)) != flat["old"][(m, t)])
    return {
        "adapter_tensors": len(tensors["old"]),
        "adapter_max_abs_diff": worst_abs,
        "adapter_max_rel_diff": worst_rel,
        "verdicts": len(flat["old"]),
        "verdicts_differing": differing,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", required=True)
    parser.add_argument("--new", default="HEAD")
    parser.add_argument("--work", required=True, help="a folder for the two sides' worktrees (made if missing)")
    parser.add_argument("--base-model", required=True, help="a converted base model folder (results/base_model)")
    parser.add_argument("--overlay", default="params/learning-study.yaml")
    parser.add_argument("--new-dtype", default=None, help="model.dtype on the new side (default: the overlay's)")
    parser.add_argument("--dtype", default=None, help="model.dtype on both sides (default: the overlay's)")
    parser.add_argument("--members", type=int, default=1, help="teachers and students each: 1 (1T-1S) or 2 (2T-2S)")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="both_set",
        help="a params key set on both sides (e.g. heldout.pool_file=<absolute path>: one pool)",
    )
    parser.add_argument(
        "--new-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a params key set on the new side only (e.g. model.cpu_threads=2)",
    )
    parser.add_argument(
        "--host",
        default="new",
        choices=["none", "new", "old", "both"],
        help="which sides run their stages in a stage host of their own commit, as its scripts do on a CPU run "
        "(default new; a commit without populora/core/stagehost runs without)",
    )
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument(
        "--seeds",
        type=int,
        nargs="+",
        default=None,
        help="base.seed of each repeat, the same on both sides (replaces --repeats). A generation's sampled tokens, "
        "and so its propose and solve seconds, follow the seed and the sampler's code: one seed repeated draws the "
        "same luck every time (a proposal running to its token cap holds its whole batch), several average it",
    )
    parser.add_argument(
        "--old-record",
        default=None,
        help="take the old side from an earlier --json of this script (same machine kind, idle) "
        "instead of timing it again: only the new side runs",
    )
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    args.host = {"none": (), "new": ("new",), "old": ("old",), "both": ("old", "new")}[args.host]
    # resolved once here: each side runs its commands from inside its own folder, where a relative --work is not
    work = Path(args.work).resolve()
    work.mkdir(parents=True, exist_ok=True)
    global OVERLAY
    OVERLAY = args.overlay
    sides: dict[str, list[dict]] = {"old": [], "new": []}
    compared = []
    if args.old_record:
        sides["old"] = json.loads(Path(args.old_record).read_text())["sides"]["old"]
    seeds = args.seeds or [None] * args.repeats
    for repeat, seed in enumerate(seeds):
        for name in ("old", "new") if repeat % 2 == 0 else ("new", "old"):
            if name == "old" and args.old_record:
                continue
            overlays = [STUDY, one_arm(args.members)]
            if args.dtype:
                overlays.append({"model": {"dtype": args.dtype}})
            overlays += [setting(text) for text in args.both_set]
            overlays += [{"base": {"seed": seed}}] if seed is not None else []
            if name == "new":
                overlays += [{"model": {"dtype": args.new_dtype}}] if args.new_dtype else []
                overlays += [setting(text) for text in args.new_set]
            sides[name].append(one_side(work, name, args.old if name == "old" else args.new, args, overlays))
            sides[name][-1]["seed"] = seed
            print(name, sides[name][-1]["wall_s"], "s", flush=True)
        if not args.old_record:
            compared.append(compare_sides(work))
            print("compared", json.dumps(compared[-1])[:400], flush=True)
    old = statistics.median(r["wall_s"] for r in sides["old"])
    new = statistics.median(r["wall_s"] for r in sides["new"])
    result = {
        "old_wall_s": old,
        "new_wall_s": new,
        "study_generation_speedup": round(old / new, 3),
        "sides": sides,
        "overlay": args.overlay,
        "new_dtype": args.new_dtype,
        "repeats": len(seeds),
        "seeds": args.seeds,
        "dtype": args.dtype,
        "members": args.members,
        "set": args.both_set,
        "new_set": args.new_set,
        "stage_host": list(args.host),
        "compared": compared,
        "old_from": args.old_record or "timed in this run",
        "machine": platform.processor() or platform.machine(),
        "command": "python perf/study_generation.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }
    print(json.dumps({k: result[k] for k in ("old_wall_s", "new_wall_s", "study_generation_speedup")}))
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
