"""Carry DVC's run cache of chosen stages to another checkout, through a folder git can hold.

    python -m populora run-cache export CLONE FOLDER --outs results/heldout/base.json results/bench/base
    python -m populora run-cache import FOLDER CLONE

For every stage it ran, DVC keeps an entry under `.dvc/cache/runs/`, keyed by a hash of the stage's command, its
params' values and the content hash of each dependency, and the outputs themselves by content under
`.dvc/cache/files/md5/`. When `dvc repro` or `dvc exp run` finds a stage changed (no lock entry, as in a new clone)
it looks for an entry with the stage's key and, if there is one, checks its outputs out instead of running it. So
`export` copies the entries whose outputs are among `--outs` (a path, or a folder above it) with their outputs'
objects, and `import` copies them into another checkout's cache: where that checkout's upstream stages wrote the
same bytes (the same base model, the same warm base, the same code stamps), DVC restores those stages there; where
any dependency differs the key differs too, and DVC runs the stage as usual. Nothing is restored that DVC would
not restore from its own cache, and nothing already in the target cache is overwritten.

A study uses it on a new machine, where a clone has only what git holds: the shared stages that are costly and
small (the warm base's verdicts on the pool, the bases' benchmarks) come back once the cheap large ones (the base
model, the warm start) have been remade with the same bytes.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import yaml

RUNS = "runs"
OBJECTS = Path("files") / "md5"


def object_path(md5: str) -> Path:
    """Where DVC 3 keeps an object of this md5 (a `.dir` manifest included), relative to its cache."""
    return OBJECTS / md5[:2] / md5[2:]


def entry_outs(entry: dict) -> list[dict]:
    return [out for out in entry.get("outs") or [] if out.get("md5")]


def wanted(path: str, outs: list[str]) -> bool:
    """Whether an output path is one of `outs` or lies under one of them."""
    return any(path == out or path.startswith(out.rstrip("/") + "/") for out in outs)


def objects_of(cache: Path, out: dict) -> list[Path]:
    """The objects an output needs, relative to the cache: its own and, for a folder, each file's."""
    md5 = out["md5"]
    needed = [object_path(md5)]
    if md5.endswith(".dir"):
        manifest = json.loads((cache / object_path(md5)).read_text())
        needed += [object_path(item["md5"]) for item in manifest]
    return needed


def export(clone: Path, folder: Path, outs: list[str]) -> list[str]:
    """Copy the run-cache entries of `clone` whose outputs are among `outs`, and their objects, to `folder`;
    return the commands of the entries copied."""
    cache = clone / ".dvc" / "cache"
    copied = []
    for entry_file in sorted((cache / RUNS).glob("*/*/*")):
        entry = yaml.safe_load(entry_file.read_text())
        if not isinstance(entry, dict) or not any(wanted(out["path"], outs) for out in entry_outs(entry)):
            continue
        needed = [path for out in entry_outs(entry) for path in objects_of(cache, out)]
        missing = [str(path) for path in needed if not (cache / path).is_file()]
        if missing:
            raise SystemExit(f"{entry_file}: objects of its outputs not in {cache}: {', '.join(missing[:3])}")
        for path in [entry_file.relative_to(cache), *needed]:
            (folder / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(cache / path, folder / path)
        copied.append(" ".join(entry["cmd"].split()))
    return copied


def import_into(folder: Path, clone: Path) -> int:
    """Copy every file of `folder` (entries and objects) into `clone`'s cache where absent; the count copied."""
    cache = clone / ".dvc" / "cache"
    if not (clone / ".dvc").is_dir():
        raise SystemExit(f"{clone} is not a DVC project (no .dvc folder)")
    count = 0
    for source in sorted(p for p in folder.rglob("*") if p.is_file()):
        target = cache / source.relative_to(folder)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        partial = target.with_name(f".{target.name}.partial")
        shutil.copyfile(source, partial)
        partial.replace(target)  # DVC never reads a half-copied entry or object
        count += 1
    return count


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    out = sub.add_parser("export", help="copy the run-cache entries of some outputs, and the outputs, to a folder")
    out.add_argument("clone", type=Path, help="the DVC checkout whose stages ran")
    out.add_argument("folder", type=Path, help="where to copy them (runs/ and files/md5/ as in a DVC cache)")
    out.add_argument("--outs", nargs="+", required=True, help="output paths (or folders above them), as in dvc.yaml")
    into = sub.add_parser("import", help="copy an exported folder into a checkout's DVC cache")
    into.add_argument("folder", type=Path)
    into.add_argument("clone", type=Path)
    args = parser.parse_args(argv)
    if args.command == "export":
        copied = export(args.clone, args.folder, args.outs)
        if not copied:
            print(f"no run-cache entry in {args.clone} has an output among {args.outs}", file=sys.stderr)
            return 1
        print("\n".join(f"exported: {cmd}" for cmd in copied))
    else:
        print(f"{import_into(args.folder, args.clone)} files copied into {args.clone / '.dvc' / 'cache'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
