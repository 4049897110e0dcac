"""Render `dvc.yaml` from workflow/dag.py and params.yaml (`--check`: fail if the file is stale).

    python -m workflow.render_dvc            # write dvc.yaml
    python -m workflow.render_dvc --check    # exit 1 when dvc.yaml differs from what would be written

Per-arm stages become `foreach` stages keyed by arm (`init@population`), per-generation stages
are keyed by arm and generation (`propose@population-001`), per-model ones by model. The generated commands are the
same strings the Snakefile runs. Re-render after changing `dag.generations` or `dag.arms`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import yaml

from populora.config import load_params
from workflow.dag import STAGES, Stage, gen_label, resolve_input, scope_items

HEADER = "# GENERATED from workflow/dag.py by `python -m workflow.render_dvc`; do not edit by hand.\n"
LIBRARY_DEPS = ["populora"]


ITEM_FIELDS = ("arm", "gen", "prev", "last", "model", "bench", "source")


def _ref_for(stage: Stage, params):
    placeholders = {name: "${item." + name + "}" for name in ITEM_FIELDS}
    expanded = (*stage.per_generation_inputs, *stage.per_bench_inputs, *stage.per_arm_inputs)

    def ref(kind: str, key: str, template: str) -> str:
        if kind == "input" and key in expanded:
            # expanded lists are literal paths, except the arm of per-generation inputs
            item = {**placeholders, "last": gen_label(params.dag.generations - 1)}
            return " ".join(resolve_input(stage, key, item, params))
        return template.format(**placeholders)

    return ref


def render_stage(stage: Stage, params) -> dict:
    ref = _ref_for(stage, params)
    deps = [path for key, template in stage.inputs.items() for path in ref("input", key, template).split(" ")]
    outs, metrics = [], []
    for key, template in stage.outputs.items():
        path = ref("output", key, template)
        (metrics if key in stage.metrics else outs).append(path)
    body = {
        "cmd": stage.argv(ref, lambda name: "${item." + name + "}", log=stage.log_template().format(
            **{name: "${item." + name + "}" for name in ITEM_FIELDS})),
        "deps": [f"stages/{stage.module.split('.')[-1]}.py", *LIBRARY_DEPS, *deps],
    }
    if stage.params:
        body["params"] = list(stage.params)
    if outs:
        body["outs"] = outs
    if metrics:
        body["metrics"] = list(metrics)  # cached by DVC, so experiments (results/ is git-ignored) keep them
    if stage.scope == "global":
        return body
    return {"foreach": scope_items(stage.scope, params), "do": body}


def render(params_path: str = "params.yaml") -> str:
    params = load_params(params_path)
    document = {"stages": {stage.name: render_stage(stage, params) for stage in STAGES}}
    document["plots"] = plots_section(params)
    return HEADER + yaml.dump(document, Dumper=_NoAliases, sort_keys=False, width=1000)


class _NoAliases(yaml.SafeDumper):
    """Write repeated values out in full: dvc.yaml is read by people, not only by DVC."""

    def ignore_aliases(self, data):
        return True


def plots_section(params) -> list:
    from workflow.plots import PLOTS

    return PLOTS(params)


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
