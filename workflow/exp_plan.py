"""What `dvc exp run -S ...` would run, without running anything: the dry plan DVC's own command cannot give.

    python -m populora exp-plan -S update.learning_rate=0.0002            # the stages it would run, in order
    python -m populora exp-plan -S update.learning_rate=0.0002 --commands # with each stage's command
    python -m populora exp-plan -S dag.generations=5                     # says the DAG shape changes (re-render)
    dvc exp run --dry -S update.learning_rate=0.0002 $(python -m populora exp-plan --dvc-copy-args)  # DVC's own

DVC 3.67.1 runs `dvc exp run --dry` in a temporary copy of the commit without checking out any output, then
hashes the missing outputs of the stages upstream of the change for its run cache and stops (`No such file or
directory: .../.dvc/tmp/exps/standalone/.../results/...`; iterative/dvc#9818, also with --allow-missing), unless
`-C` copies the outputs there (`--dvc-copy-args` prints those arguments; copying costs the outputs' size). In the
workspace the outputs are there, so this applies the `-S` overrides to params.yaml exactly as `dvc exp run -S`
does (DVC's own `apply_overrides`), asks DVC which stages changed (`dvc status`) and adds every stage downstream
of them (what reruns once their outputs change), then puts params.yaml back byte for byte, also on an error or
Ctrl-C; a copy waits beside it (`params.yaml.exp-plan`) until then, in case the process is killed outright. The
DAG-shape guard (`dag_shape`) reruns on every params change but writes the same stamps, so nothing downstream of
it reruns for its sake; a stage whose code changed since the guard last wrote its code stamp counts as changed
(workflow/code_stamps.py). Nothing else is written: no experiment, no output, no dvc.lock change.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

BACKUP_SUFFIX = ".exp-plan"


def reached_stages(graph, changed: set[str], guard: str) -> list[str]:
    """The changed stages and every stage downstream of them, dependencies first; the guard's own change
    reaches nothing (its stamp never changes). `graph` has an edge from each stage to each stage it depends
    on (DVC's `repo.index.graph`), its nodes anything with an `addressing` name.

    >>> import networkx as nx
    >>> from collections import namedtuple
    >>> S = namedtuple("S", "addressing")
    >>> g, (guard, base, a, b) = nx.DiGraph(), [S(n) for n in ("dag_shape", "base", "a", "b")]
    >>> g.add_edges_from([(base, guard), (a, base), (b, a)])
    >>> reached_stages(g, {"dag_shape", "a"}, "dag_shape")
    ['dag_shape', 'a', 'b']
    """
    import networkx as nx

    names = {node.addressing: node for node in graph.nodes}
    reached = {name for name in changed if name in names}
    for name in changed - {guard}:
        if name in names:
            reached |= {node.addressing for node in nx.ancestors(graph, names[name])}
    order = [node.addressing for node in reversed(list(nx.topological_sort(graph)))]
    return [name for name in order if name in reached]


def stamped_stages(graph, stale: set[str]) -> set[str]:
    """The stages depending on a code stamp the guard would rewrite (their code changed since the guard last
    ran): `dvc status` cannot see them yet, the stamp being the guard's output.

    >>> from collections import namedtuple
    >>> S, D = namedtuple("S", "addressing deps"), namedtuple("D", "def_path")
    >>> a, b = S("a", [D("results/.code/stages.a.json")]), S("b", [D("results/x.json")])
    >>> sorted(stamped_stages([a, b], {"results/.code/stages.a.json"}))
    ['a']
    """
    return {node.addressing for node in graph if any(dep.def_path in stale for dep in getattr(node, "deps", []))}


def shape_error(root: Path, params: str) -> str | None:
    """The DAG-shape guard's message when the overridden params need a re-render (`dag.generations`, ...)."""
    check = subprocess.run(
        [
            sys.executable,
            "-m",
            "workflow.render_dvc",
            "--check",
            "--shape-only",
            "--params",
            params,
            "--out",
            "dvc.yaml",
        ],
        cwd=root,
        capture_output=True,
        text=True,
    )
    return None if check.returncode == 0 else (check.stderr or check.stdout).strip()


def copy_roots(outs: list[str], in_git: list[str]) -> list[str]:
    """The folders and files `dvc exp run -C` must copy so that DVC's temporary copy of the commit holds every
    output: for each output, its highest ancestor (or itself) holding no file the copy carries (`in_git`: git's
    tracked files; untracked ones stay behind). Copying a folder the copy already has fails in DVC
    (shutil.copytree), so a folder holding a tracked file (a committed `results/.gitignore`) is never named.

    >>> outs = ["results/base_model", "results/population/gen000/rollouts.jsonl", "report.html"]
    >>> copy_roots(outs, ["results/.gitignore", "dvc.yaml"])
    ['report.html', 'results/base_model', 'results/population']
    >>> copy_roots(outs, ["dvc.yaml"])
    ['report.html', 'results']
    """
    carried = {Path(f).parts[:i] for f in in_git for i in range(1, len(Path(f).parts) + 1)}
    roots = set()
    for out in outs:
        parts = Path(out).parts
        first = next((i for i in range(1, len(parts) + 1) if parts[:i] not in carried), None)
        if first is not None:
            roots.add(Path(*parts[:first]).as_posix())
    return sorted(roots)


def dvc_copy_args(root: Path) -> list[str]:
    """`-C PATH` for each output root of the workspace's stages that exists: with them `dvc exp run --dry -S ...`
    plans in its temporary copy instead of failing on the outputs DVC does not check out there."""
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        outs = [str(Path(out.fs_path).relative_to(root.resolve())) for stage in repo.index.stages for out in stage.outs]
    listed = subprocess.run(
        ["git", "ls-files", "--cached"],
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    return [arg for path in copy_roots(outs, listed) if (root / path).exists() for arg in ("-C", path)]


def plan(root: Path, overrides: list[str], params: str = "params.yaml") -> list[tuple[str, str]]:
    """(stage, command) for each stage `dvc exp run -S overrides` would run, with params.yaml restored after."""
    from dvc.repo import Repo
    from dvc.utils.hydra import apply_overrides

    from workflow.code_stamps import stale_stamps
    from workflow.render_dvc import GUARD

    path = root / params
    original = path.read_bytes()
    backup = path.with_name(path.name + BACKUP_SUFFIX)
    shutil.copy2(path, backup)
    try:
        apply_overrides(str(path), overrides)
        if (error := shape_error(root, params)) is not None:
            raise SystemExit(
                f"{' '.join(overrides)} changes the DAG's shape, so `dvc exp run` would stop at its first stage (params.yaml is as it was):\n"
                f"{error}"
            )
        with Repo(str(root)) as repo:
            graph = repo.index.graph
            commands = {node.addressing: node.cmd or "" for node in graph.nodes}
            changed = set(repo.status()) | stamped_stages(graph, set(stale_stamps()))
            stages = reached_stages(graph, changed, GUARD)
    finally:
        path.write_bytes(original)
        backup.unlink(missing_ok=True)
    return [(name, commands[name]) for name in stages]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m populora exp-plan", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "-S", "--set-param", action="append", default=[], metavar="KEY=VALUE", help="as `dvc exp run -S` (repeat)"
    )
    parser.add_argument("--params", default="params.yaml", help="the params file the -S values edit")
    parser.add_argument("--commands", action="store_true", help="print each stage's command too")
    parser.add_argument(
        "--dvc-copy-args",
        action="store_true",
        help="print only the `-C PATH` arguments that let DVC's own `dvc exp run --dry -S ...` plan on this "
        "workspace (its outputs copied into DVC's temporary copy); -S is not needed",
    )
    args = parser.parse_args(argv)
    root = Path.cwd()
    if args.dvc_copy_args:
        print(" ".join(dvc_copy_args(root)))
        return 0
    leftover = root / (args.params + BACKUP_SUFFIX)
    if leftover.exists():
        raise SystemExit(
            f"{leftover} exists: an earlier exp-plan was killed before it put {args.params} back. "
            f"Fix: compare the two, keep the right one as {args.params}, delete {leftover.name}."
        )
    stages = plan(root, args.set_param, args.params)
    run = " ".join(["dvc exp run", *(f"-S {o}" for o in args.set_param)])
    if not stages:
        print(f"`{run}` would run nothing: the change reaches no stage")
    else:
        print(f"`{run}` would run {len(stages)} stages, in this order:")
        for name, command in stages:
            print(f"  {name}" + (f"\n    > {command}" if args.commands else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
