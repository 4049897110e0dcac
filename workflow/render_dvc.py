"""Render `dvc.yaml` from workflow/dag.py and params.yaml (`--check`: fail if the file is stale).

    python -m workflow.render_dvc            # write dvc.yaml
    python -m workflow.render_dvc --check    # exit 1 when dvc.yaml differs from what would be written

Per-arm stages become `foreach` stages keyed by arm (`init@population`), per-generation stages
are keyed by arm and generation (`propose@population-g001`). The generated commands are the
same strings the Snakefile runs. Re-render after changing `dag.generations` or `dag.arms`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from populora.config import load_params
from workflow.dag import STAGES, Stage, gen_label, prev_dir

HEADER = "# GENERATED from workflow/dag.py by `python -m workflow.render_dvc`; do not edit by hand.\n"
LIBRARY_DEPS = ["populora"]


def _ref_for(stage: Stage, generations: int):
    def ref(kind: str, key: str, template: str) -> str:
        if kind == "input" and key in stage.per_generation_inputs:
            return " ".join(template.format(arm="${item.arm}", gen=gen_label(g)) for g in range(generations))
        return template.format(arm="${item.arm}", gen="${item.gen}", prev="${item.prev}", last=gen_label(generations - 1))

    return ref


def _paths(stage: Stage, generations: int) -> tuple[list[str], list]:
    ref = _ref_for(stage, generations)
    deps = []
    for key, template in stage.inputs.items():
        deps.extend(ref("input", key, template).split(" "))
    outs = []
    for key, template in stage.outputs.items():
        path = ref("output", key, template)
        outs.append({path: {"cache": False}} if key in stage.metrics else path)
    return deps, outs


def render_stage(stage: Stage, arms: list[str], generations: int) -> dict:
    deps, outs = _paths(stage, generations)
    body = {
        "cmd": stage.argv(_ref_for(stage, generations), arm="${item.arm}", gen="${item.gen}",
                          log=stage.log_template().format(arm="${item.arm}", gen="${item.gen}")),
        "deps": [f"stages/{stage.module.split('.')[-1]}.py", *LIBRARY_DEPS, *deps],
        "params": list(stage.params),
        "outs": [o for o in outs if not isinstance(o, dict)],
    }
    metrics = [o for o in outs if isinstance(o, dict)]
    if metrics:
        body["metrics"] = metrics
    if not body["params"]:
        del body["params"]
    if stage.scope == "global":
        body["cmd"] = body["cmd"].replace(" --arm ${item.arm}", "")
        return body
    if stage.scope == "arm":
        items = {arm: {"arm": arm} for arm in arms}
    else:
        items = {
            f"{arm}-g{gen_label(g)}": {"arm": arm, "gen": gen_label(g), "prev": prev_dir(arm, g)}
            for arm in arms
            for g in range(generations)
        }
    return {"foreach": items, "do": body}


def render(params_path: str = "params.yaml") -> str:
    params = load_params(params_path)
    arms, generations = list(params.dag.arms), params.dag.generations
    document = {"stages": {stage.name: render_stage(stage, arms, generations) for stage in STAGES}}
    document["plots"] = plots_section(arms)
    return HEADER + yaml.safe_dump(document, sort_keys=False, width=1000)


def plots_section(arms: list[str]) -> list:
    from workflow.plots import PLOTS

    return PLOTS(arms)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--out", default="dvc.yaml")
    parser.add_argument("--check", action="store_true", help="exit 1 when --out is not up to date")
    args = parser.parse_args(argv)
    text = render(args.params)
    path = Path(args.out)
    if args.check:
        if not path.is_file() or path.read_text() != text:
            print(f"{path} is out of date with workflow/dag.py; run: python -m workflow.render_dvc", file=sys.stderr)
            return 1
        print(f"{path} is up to date")
        return 0
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
