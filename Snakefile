"""PopuLoRA pipeline, Snakemake entry point. The DAG itself is declared in workflow/dag.py.

    snakemake --cores all --resources gpu=1        # whole run: both arms, every generation
    snakemake -n                                   # dry run

params.yaml is validated before any rule is built, so a bad value fails here, naming the key.
"""

import sys

sys.path.insert(0, workflow.basedir)

from populora.config import ParamsError, load_params
from workflow.dag import STAGES, gen_label, prev_dir

try:
    PARAMS = load_params("params.yaml")
except ParamsError as error:
    sys.exit(str(error))

ARMS = list(PARAMS.dag.arms)
GENERATIONS = PARAMS.dag.generations
LAST = gen_label(GENERATIONS - 1)

wildcard_constraints:
    arm="|".join(ARMS),
    gen=r"\d{3}",


def _inputs(stage):
    def resolve(wildcards):
        fields = dict(arm=wildcards.get("arm", ""), gen=wildcards.get("gen", ""), last=LAST)
        if "gen" in wildcards.keys():
            fields["prev"] = prev_dir(wildcards.arm, int(wildcards.gen))
        resolved = {}
        for key, template in stage.inputs.items():
            if key in stage.per_generation_inputs:
                resolved[key] = [template.format(arm=fields["arm"], gen=gen_label(g)) for g in range(GENERATIONS)]
            else:
                resolved[key] = template.format(**fields)
        return resolved

    return resolve


def _outputs(stage):
    outs = {}
    for key, template in stage.outputs.items():
        path = template.replace("{last}", LAST)
        outs[key] = directory(path) if key in stage.directories else path
    return outs


def _params_of(stage):
    def snapshot(wildcards):
        # Snakemake reruns a job when this value changes (rerun trigger "params").
        dump = PARAMS.model_dump(mode="json")
        values = {}
        for key in stage.params:
            section, _, name = key.partition(".")
            values[key] = dump[section][name] if name else dump[section]
        return values

    return snapshot


def _snakemake_ref(stage):
    def ref(kind, key, template):
        return "{" + kind + "." + key + "}"

    return ref


for stage in STAGES:

    rule:
        name:
            stage.name
        input:
            unpack(_inputs(stage)),
        output:
            **_outputs(stage),
        params:
            cfg=_params_of(stage),
        log:
            stage.log_template(),
        resources:
            gpu=stage.gpu,
        shell:
            stage.argv(_snakemake_ref(stage), arm="{wildcards.arm}", gen="{wildcards.gen}", log="{log}")


rule all:
    default_target: True
    input:
        expand("results/{arm}/dynamics.json", arm=ARMS),
        expand("results/{arm}/summary.json", arm=ARMS),
