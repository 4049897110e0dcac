"""PopuLoRA pipeline, Snakemake entry point. The DAG itself is declared in workflow/dag.py.

    snakemake --cores all --resources gpu=1        # whole run: both arms, every generation, benchmarks
    snakemake -n                                   # dry run
    snakemake --profile profiles/slurm             # on a SLURM cluster (grouped jobs: a few per generation)
    snakemake --report report.html                 # after a run: figures, report.md, per-job runtimes

Every job records its timings (`benchmark:` wall s, max RSS, CPU time; beside its log) and the
report stage tabulates them per stage (docs/dvc.md#per-job-timings-and-the-snakemake-report).

params.yaml is validated before any rule is built, so a bad value fails here, naming the key.

In a DVC project, DVC adopts what a successful run made (onsuccess below, workflow/adopt.py): `dvc status`
is clean after it and `dvc metrics diff` works without a second run (docs/dvc.md#one-run-both-engines).
"""

import os
import sys

sys.path.insert(0, workflow.basedir)

from populora.config import ParamsError, load_params
from populora.core.stagehost import USAGE_DIR_ENV
from workflow.adopt import after_snakemake
from workflow.dag import (
    REPORT_CAPTIONS,
    SCOPES,
    STAGES,
    TIMINGS_DIR,
    collected_paths,
    final_targets,
    gen_label,
    resolve_input,
    scope_items,
)
from workflow.time_model import runtime_minutes

try:
    PARAMS = load_params("params.yaml")
except ParamsError as error:
    sys.exit(str(error))

# a job run in a stage host (scripts/run_pipeline.sh starts one) writes its stage's own peak memory and CPU time
# beside its benchmark TSV (Snakemake measures the stand-in there): populora/core/stagehost/
os.environ[USAGE_DIR_ENV] = TIMINGS_DIR

GENERATIONS = PARAMS.dag.generations
LAST = gen_label(GENERATIONS - 1)
ITEMS = {scope: scope_items(scope, PARAMS) for scope in SCOPES}


report: f"{REPORT_CAPTIONS}/workflow.rst"  # the HTML report's front page; each stage's caption beside it


wildcard_constraints:
    arm="|".join(PARAMS.dag.arms),
    gen=r"\d{3}",
    part=r"\d+",
    bench="|".join(PARAMS.bench.benchmarks),


def _item(stage, wildcards):
    return ITEMS[stage.scope]["-".join(wildcards[name] for name in stage.wildcards)]


def _inputs(stage):
    def resolve(wildcards):
        item = _item(stage, wildcards)
        # a folder input (`collects`) waits for every job writing under it; the command gets the folder
        inputs = {
            k: collected_paths(stage, k, PARAMS, item) if k in stage.collects else resolve_input(stage, k, item, PARAMS)
            for k in stage.inputs
        }
        # files a param names (the pool a study made before), relative to the project like every input
        return {**inputs, **stage.named_inputs(PARAMS)}

    return resolve


def _outputs(stage):
    outs = {}
    for key, template in stage.outputs.items():
        path = template.replace("{last}", LAST)
        outs[key] = directory(path) if key in stage.directories else path
        if key in stage.shown:  # in `snakemake --report`'s HTML
            shown = stage.shown[key]
            outs[key] = report(
                outs[key],
                caption=stage.caption(),
                category=shown.category,
                subcategory=shown.subcategory,
                patterns=list(shown.patterns),
            )
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


def _runtime(stage):
    # SLURM's time limit (minutes) of a cluster job on a GPU run, from the time model (workflow/time_model.py,
    # docs/gpu.md), doubled on a retry; none on the CPU or for local rules: the profile's default applies
    if stage.local or PARAMS.model.device == "cpu":
        return {}

    def minutes(wildcards, attempt):
        return (runtime_minutes(stage.name, PARAMS, _item(stage, wildcards)) or 60) * attempt

    return {"runtime": minutes}


def _threads(stage):
    # an arm's update jobs share the chain's threads among those that run side by side (dag.update_side_by_side)
    if "arm" not in stage.wildcards:
        return stage.thread_count(PARAMS)
    return lambda wildcards: stage.thread_count(PARAMS, arm=wildcards.arm)


def _command(stage):
    # Snakemake evaluates `shell:` lazily inside the loop, where `stage` would already be the last
    # stage; a params function bound to this stage renders the whole command instead.
    def render(wildcards, input, output):
        item = _item(stage, wildcards)
        paths = {
            **{k: stage.inputs[k].format(**item) if k in stage.collects else getattr(input, k) for k in stage.inputs},
            **{k: getattr(input, k) for k in stage.named_inputs(PARAMS)},
            **{k: getattr(output, k) for k in stage.outputs},
            **{k: template.format(**item) for k, template in stage.side.items()},
        }  # live files, not declared
        return stage.command(
            paths, {w: wildcards[w] for w in stage.wildcards}, log=stage.log_template().format(**wildcards)
        )

    return render


for stage in STAGES:

    rule:
        name:
            stage.name
        input:
            unpack(_inputs(stage)),
        output:
            **_outputs(stage),
        log:
            stage.log_template(),
        benchmark:
            stage.timings_template()  # one TSV row per job; the report stage tabulates them
        priority: stage.priority  # the training chain before the benchmarks (workflow/dag.py Stage.priority)
        localrule: stage.local  # seconds-long CPU stages run on the submitting node, not as cluster jobs
        # a few cores per GPU job, not all; the sandbox stages one per worker (verify.workers).
        # Snakemake caps them at --cores (on a cluster: at the job's cpus-per-task, nothing local)
        threads: _threads(stage)
        resources:
            **_runtime(stage),
            gpu=stage.gpus(PARAMS),
        params:
            cfg=_params_of(stage),
            command=_command(stage),
        shell:
            "{params.command}"


rule all:
    default_target: True
    input:
        final_targets(PARAMS),


onsuccess:
    after_snakemake(workflow)  # DVC records this run's outputs as its own (nothing happens outside a DVC project)
