"""Render `dvc.yaml` from workflow/dag.py and params.yaml (`--check`: fail if the file is stale).

    python -m workflow.render_dvc            # write dvc.yaml
    python -m workflow.render_dvc --check    # exit 1 when dvc.yaml differs from what would be written

Scoped stages become DVC `matrix` stages: per arm over `${dag.arms}` (`init@population`), per
generation over the arms and the rendered generations (`propose@population-gen1`: DVC names a
matrix item that is a mapping by its key and index), per benchmark over `${bench.benchmarks}`
(`bench_base@cruxeval_o`, `bench@population-cruxeval_o`); the benchmarks of `bench.together` run in
`bench_base_together` and `bench_together@population` (their own `bench@...` jobs write a note in
seconds: DVC's matrix cannot leave them out, as with update jobs). The generated commands are the same
strings the Snakefile runs. Stages that read a whole results folder (`bench_summary`, `report`)
depend on that folder, so DVC runs every stage writing under it first.

What DVC reruns. Each stage depends on exactly the code it runs: its stage module and every local
module it imports, transitively, read from the import graph (`workflow.dag.code_deps`), not a
hand-kept list and not the whole `populora/` folder, through one file: its module's code stamp
(`results/.code/<module>.json`, those files' hashes, written by the guard: workflow/code_stamps.py),
so dvc.lock, which DVC reads and rewrites around every stage, holds one code dep a stage, not forty;
on the params keys it reads (declared per stage in workflow/dag.py; a stage reads no other,
populora/core/declared.py); and on its inputs. Bytecode is in .dvcignore.

The DAG shape. Arms, benchmarks and the population size are read by DVC itself at run time, so
`dvc exp run -S 'dag.arms=[baseline]'`, `-S population.teachers=4` or `-S 'bench.benchmarks=[...]'`
run as they are. The number of generations and of update jobs (`dag.update_jobs`) are not: DVC's
templating has no arithmetic (generation g starts from g-1's checkpoint) and cannot build a range
from a number, so both are rendered (update job k trains the arm's adapters k, k+J, ..., so a
population size change never needs a re-render: a job left without an adapter writes an empty part).
The first stage, `dag_shape` (rerun whenever params.yaml or any code changes; every other stage is
downstream of it through its code stamp), re-renders the stages in memory and fails before any other
work when they differ from dvc.yaml, with the fix:

    dvc exp run -S dag.generations=5      ->  ERROR ... dvc.yaml has the DAG shape of other params
    python -m workflow.render_dvc         # params.yaml already holds the -S values
    dvc exp run                           # now five generations

The guard reruns on its inputs (params.yaml, where `-S` writes, and the code the stages and their
deps are rendered from), not on every run (`always_changed`), so `dvc status` can be clean: after a
Snakemake run, workflow/adopt.py writes the same stamp and commits every stage (docs/dvc.md).

The `plots` section is rendered for the arms and slots of the params it was rendered from (a
one-arm experiment of a two-arm dvc.yaml has no data for the other arm's plots).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from populora.config import ParamsError, load_params
from populora.core.io import write_json
from workflow.code_stamps import CODE_STAMPS, stage_modules, stamp_path, write_code_stamps
from workflow.dag import (
    RESULTS,
    SCOPES,
    STAGES,
    Stage,
    gen_label,
    prev_dir,
    resolve_input,
)

HEADER = "# GENERATED from workflow/dag.py by `python -m workflow.render_dvc`; do not edit by hand.\n"
GUARD = "dag_shape"
GUARD_STAMP = f"{RESULTS}/.dag_shape.ok"  # constant content: the guard's marker that the check passed
GUARD_CMD = (
    f"python -m workflow.render_dvc --check --shape-only --params params.yaml --out dvc.yaml --stamp {GUARD_STAMP}"
    f" --code-stamps {CODE_STAMPS}"
)
# what the rendered stages are made of: the params (`dvc exp run -S` edits params.yaml) and the code (each
# stage's deps are its imports). dvc.yaml itself cannot be a DVC dependency; a stage whose entry changes
# reruns anyway, and `render_dvc --check` (scripts/run_pipeline.sh, the tests) catches hand edits.
GUARD_DEPS = ["params.yaml", "populora", "stages", "workflow"]

# DVC interpolation of each path field; `last` (the final generation) is rendered
ITEM = {
    "arm": "${item.arm}",
    "gen": "${item.gen.id}",
    "prev": "${item.gen.prev}",
    "bench": "${item.bench}",
    "part": "${item.part}",
}


def matrix(scope: str, params) -> dict:
    """The DVC matrix of a scope: arms and benchmarks come from params.yaml when DVC runs."""
    generations = [{"id": gen_label(g), "prev": prev_dir(g)} for g in range(params.dag.generations)]
    axes = {
        "arm": "${dag.arms}",
        "gen": generations,
        "bench": "${bench.benchmarks}",
        "part": list(range(params.dag.update_jobs)),
    }
    return {name: axes[name] for name in SCOPES[scope]}


def render_stage(stage: Stage, params) -> dict:
    item = {**ITEM, "last": gen_label(params.dag.generations - 1)}
    paths = {
        key: resolve_input(stage, key, item, params) if key in stage.fan_in else template.format(**item)
        for key, template in {**stage.inputs, **stage.outputs, **stage.side}.items()
    } | stage.named_inputs(params)
    inputs = [*stage.inputs, *stage.named_inputs(params)]
    deps = [path for key in inputs for path in ([paths[key]] if isinstance(paths[key], str) else paths[key])]
    outs = [paths[key] for key in stage.outputs if key not in stage.metrics]
    metrics = [paths[key] for key in stage.outputs if key in stage.metrics]
    body = {
        "cmd": stage.command(paths, {w: item[w] for w in stage.wildcards}, log=stage.log_template().format(**item)),
        "deps": [stamp_path(stage.module), *deps],
    }
    if stage.params:
        body["params"] = list(stage.params)
    if outs:
        body["outs"] = outs
    if metrics:
        body["metrics"] = list(metrics)  # cached by DVC, so experiments (results/ is git-ignored) keep them
    if not stage.wildcards:  # global, and the base model's together job: one stage, no matrix
        return body
    return {"matrix": matrix(stage.scope, params), **body}


def render(params_path: str = "params.yaml") -> str:
    params = load_params(params_path)
    stamps = [GUARD_STAMP, *(stamp_path(module) for module in stage_modules())]
    guard = {"cmd": GUARD_CMD, "deps": GUARD_DEPS, "outs": [{path: {"cache": False}} for path in stamps]}
    document = {"stages": {GUARD: guard, **{stage.name: render_stage(stage, params) for stage in STAGES}}}
    document["plots"] = plots_section(params)
    return HEADER + yaml.dump(document, Dumper=_NoAliases, sort_keys=False, width=1000)


class _NoAliases(yaml.SafeDumper):
    """Write repeated values out in full: dvc.yaml is read by people, not only by DVC."""

    def ignore_aliases(self, data):
        return True


def _quoted_digits(dumper: yaml.SafeDumper, value: str):
    # PyYAML writes the string "008" bare (no YAML 1.1 int looks like it), and DVC's YAML 1.2
    # parser reads a bare 008 as the integer 8: generation ids stay quoted
    style = "'" if value.isdigit() else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_NoAliases.add_representer(str, _quoted_digits)


def plots_section(params) -> list:
    from workflow.plots import PLOTS

    return PLOTS(params)


def stages_of(text: str) -> dict:
    """The `stages` section of a dvc.yaml text (what DVC runs; the plots are a view)."""
    try:
        return (yaml.safe_load(text) or {}).get("stages", {})
    except yaml.YAMLError:
        return {}


def generations_of(stages: dict) -> list[str]:
    gens = ((stages.get("propose") or {}).get("matrix") or {}).get("gen") or []
    return [g.get("id") for g in gens if isinstance(g, dict)]


def update_jobs_of(stages: dict) -> list:
    return ((stages.get("update") or {}).get("matrix") or {}).get("part") or []


def named_inputs_of(stages: dict) -> dict[str, str | None]:
    """The files a stage's params name (`Stage.param_inputs`, e.g. `heldout_pool --pool-file`), as its
    rendered command passes them: "<stage> <params key>" -> the path, None where the command has no flag."""
    out: dict[str, str | None] = {}
    for stage in STAGES:
        words = str((stages.get(stage.name) or {}).get("cmd", "")).split()
        for key, name in stage.param_inputs.items():
            flag = f"--{key.replace('_', '-')}"
            out[f"{stage.name} {name}"] = words[words.index(flag) + 1] if flag in words[:-1] else None
    return out


def stale_message(path: Path, current: str, wanted: str) -> str:
    old, new = stages_of(current), stages_of(wanted)
    shape = [
        f"\n  {what} in {path}: {len(of(old))}; the params ask for {len(of(new))}"
        for what, of in (("generations", generations_of), ("update jobs", update_jobs_of))
        if of(old) != of(new)
    ]
    before, after = named_inputs_of(old), named_inputs_of(new)
    shape += [
        f"\n  {key} in {path}: {before[key]}; the params name {after[key]}"
        for key in after
        if before.get(key) != after[key]
    ]
    if shape:
        what, detail = "has the DAG shape of other params", "".join(shape)
    else:
        changed = sorted(name for name in set(old) | set(new) if old.get(name) != new.get(name))
        what, detail = "is out of date with workflow/dag.py", f"\n  stages that differ: {', '.join(changed)}"
    return (
        f"{path} {what} (dag.generations, dag.update_jobs and the files params name, such as heldout.pool_file, "
        f"are rendered into it; dvc exp run -S cannot re-render it)."
        f"{detail}\nFix: python -m workflow.render_dvc (params.yaml already holds any -S values), then run "
        f"the same dvc command again without -S for those keys; commit dvc.yaml first for --queue/--temp runs."
    )


def write_stamp(path: str = GUARD_STAMP) -> None:
    """The guard's marker that its check passed (constant content; the stages depend on the guard through their
    code stamps); workflow/adopt.py writes it too after a Snakemake run."""
    write_json(path, {"dvc.yaml": "matches params.yaml and workflow/dag.py"})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", default="dvc.yaml")
    parser.add_argument("--check", action="store_true", help="exit 1 when --out is not up to date")
    parser.add_argument("--shape-only", action="store_true", help="with --check: compare the stages, not the plots")
    parser.add_argument("--stamp", help="with --check: write this marker file when --out is up to date")
    parser.add_argument(
        "--code-stamps",
        help="with --check: write each stage module's code stamp in this folder when --out is up to date",
    )
    args = parser.parse_args(argv)
    try:
        text = render(args.params)
    except ParamsError as error:
        print(error, file=sys.stderr)
        return 2
    path = Path(args.out)
    if args.check:
        current = path.read_text() if path.is_file() else ""
        if args.shape_only:
            stale = stages_of(current) != stages_of(text)
        else:
            stale = current != text
        if stale:
            print(stale_message(path, current, text), file=sys.stderr)
            return 1
        if args.stamp:
            write_stamp(args.stamp)
        if args.code_stamps:
            write_code_stamps(args.code_stamps)
        print(f"{path} is up to date")
        return 0
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
