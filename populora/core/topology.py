"""Arm and slot topology: which adapter slots an arm has, which of them an update job trains, which
final members are benchmarked and in which bench job. Pure functions of the validated params
(`populora.config.Params`) over `populora.core.refs`; the DAG (workflow/dag.py), the stages and the
time model read the same answers from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from populora.core.refs import BASE_REF, ModelRef, arm_refs, arm_slots

if TYPE_CHECKING:
    from populora.config import Params


def members_of_arm(params: Params, arm: str) -> dict[str, list[str]]:
    """Slot names per role (`populora.core.refs.arm_slots`). Slots are stable names (adapter folders, benchmark
    stages); the member occupying a slot can change when evolution replaces it (lineage records who is where)."""
    return arm_slots(arm, params.population.teachers, params.population.students)


def slots_of_arm(params: Params, arm: str) -> list[str]:
    roles = members_of_arm(params, arm)
    return list(dict.fromkeys(roles["teachers"] + roles["students"]))


def update_part_slots(params: Params, arm: str, part: int) -> list[str]:
    """The slots update job `part` of an arm trains: every `dag.update_jobs`-th slot from the `part`-th
    (empty when the arm has fewer slots than jobs: the baseline's one adapter is job 0's)."""
    return slots_of_arm(params, arm)[part :: params.dag.update_jobs]


def update_side_by_side(params: Params, arm: str) -> int:
    """How many of an arm's update jobs run at once on the CPU, each on model.cpu_threads // that many threads:
    `dag.update_side_by_side`, never more than the jobs that train an adapter or model.cpu_threads (each job
    keeps a thread)."""
    jobs = min(params.dag.update_jobs, len(slots_of_arm(params, arm)))
    return max(1, min(params.dag.update_side_by_side, jobs, params.model.cpu_threads))


def benchmarked_refs(params: Params, arm: str) -> list[ModelRef]:
    """The `populora.core.refs.ModelRef`s of an arm whose final members are benchmarked: the slots of the
    roles in `bench.roles`, each once (the baseline's solo adapter plays both roles)."""
    refs = arm_refs(arm, params.population.teachers, params.population.students)
    return list(dict.fromkeys(ref for role in params.bench.roles for ref in refs[role]))


def runs_together(params: Params, benchmark: str) -> bool:
    """Whether `benchmark` runs in the together job (one per arm and one for the base model) rather than a job of
    its own: it is in `bench.together`, and the engine is not vllm (one engine per process)."""
    return params.sampler.engine != "vllm" and benchmark in params.bench.together


def together_benchmarks(params: Params) -> list[str]:
    """The benchmarks of `bench.benchmarks` that run in the together job, in their order there."""
    return [name for name in params.bench.benchmarks if runs_together(params, name)]


def own_job_benchmarks(params: Params) -> list[str]:
    """The benchmarks of `bench.benchmarks` that run in a job of their own per arm (and for the base model)."""
    grouped = together_benchmarks(params)
    return [name for name in params.bench.benchmarks if name not in grouped]


def benchmarked_models(params: Params) -> dict[str, list[ModelRef]]:
    """Benchmarked models (`ModelRef`s) per result folder of `results/bench`: the bare base under `base`,
    and per arm of `dag.arms` its final members of `bench.roles` (`population-student0`, ..., `baseline-solo`)."""
    return {"base": [BASE_REF], **{arm: benchmarked_refs(params, arm) for arm in params.dag.arms}}
