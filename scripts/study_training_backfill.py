"""Write study/runs/<run>/training_answers.json for committed runs that predate it, from a study
clone's DVC experiments: each experiment's dvc.lock names the md5 of its generations'
solve_tasks.jsonl and graded.jsonl, which are read from the clone's DVC cache and counted by
`populora.bench.diagnostics.training_diagnostics` (what scripts/study.sh runs on a new run).

    python scripts/study_training_backfill.py /path/to/study-clone [study/runs]

Runs that already have the file, or whose experiment is not in the clone, are left alone.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from populora.bench.diagnostics import training_diagnostics  # noqa: E402


def _git(clone: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(clone), *args], capture_output=True, text=True, check=True).stdout


def main(argv: list[str]) -> int:
    clone = Path(argv[0])
    runs = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1] / "study" / "runs"
    for ref in _git(clone, "for-each-ref", "--format=%(refname)", "refs/exps/").split():
        name = ref.rsplit("/", 1)[1]
        dest = runs / name
        if "/exec/" in ref or not dest.is_dir() or (dest / "training_answers.json").exists():
            continue
        arm = yaml.safe_load((dest / "params.yaml").read_text())["dag"]["arms"][0]
        lock = yaml.safe_load(_git(clone, "show", f"{ref}:dvc.lock"))
        outs = {o["path"]: o["md5"] for stage in lock["stages"].values() for o in stage.get("outs", [])}
        with tempfile.TemporaryDirectory() as tmp:
            for path, md5 in outs.items():
                parts = Path(path).parts
                if parts[:2] == ("results", arm) and len(parts) == 4 and parts[3] in ("solve_tasks.jsonl", "graded.jsonl"):
                    (Path(tmp) / parts[2]).mkdir(parents=True, exist_ok=True)
                    shutil.copy(clone / ".dvc/cache/files/md5" / md5[:2] / md5[2:], Path(tmp) / parts[2] / parts[3])
            result = training_diagnostics(tmp)
        (dest / "training_answers.json").write_text(json.dumps(result, sort_keys=True) + "\n")
        print(f"{name}: {len(result)} generations of {arm}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
