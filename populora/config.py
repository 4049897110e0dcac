"""The one validated configuration: `params.yaml` -> frozen pydantic models.

`load_params(path)` is called first by the Snakefile (at parse time), by `workflow.render_dvc`
and by every stage, so a malformed file fails before any model loads. Errors name the key,
what was wrong, and how to fix it:

    params.yaml: population.students: Input should be greater than or equal to 1 (got 0).
      Fix: At least one student is needed; students solve the teachers' tasks.

Where things are. Each section's keys (type, default, bounds, help, fix) are in
`populora/core/sections.py` (what a run does) and `populora/core/measure_sections.py` (what
measures it), the held-out pool's below; here are `Params`, the checks between sections (a value
valid alone but not with another's), and the error messages. A key's help is its field's
description, written once: params.yaml's comments are rendered from it (`python -m
workflow.render_params`) and a wrong value's "Fix:" is the field's `json_schema_extra` fix, else
"Expected <description>". Keys renamed to the field's names are refused with the new name
(`RENAMED`). Which slots an arm has and who trains or is benchmarked where:
`populora.core.topology`.

Check a file by hand with `python -m populora.config params.yaml`.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Literal

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from populora.core.measure_sections import (
    BenchSection,
    ControlSection,
    CruxevalSection,
    LiveCodeBenchSection,
    TrackingSection,
)
from populora.core.sections import (
    KNOWN_OPERATORS,
    TASK_TYPES,
    BaseSection,
    BufferSection,
    DagSection,
    EvolveSection,
    LoraSection,
    ModelSection,
    PairingSection,
    PopulationSection,
    ProposeSection,
    RatingsSection,
    RewardSection,
    SamplerSection,
    Section,
    SolveSection,
    UpdateSection,
    VerifySection,
    WarmStartSection,
)

# the sections' names, for `from populora.config import VerifySection, ...` (the sections live in populora.core)
__all__ = [
    "KNOWN_OPERATORS",
    "TASK_TYPES",
    "BaseSection",
    "BenchSection",
    "BufferSection",
    "ControlSection",
    "CruxevalSection",
    "DagSection",
    "EvolveSection",
    "HeldoutSection",
    "LiveCodeBenchSection",
    "LoraSection",
    "ModelSection",
    "PairingSection",
    "Params",
    "ParamsError",
    "PopulationSection",
    "ProposeSection",
    "RatingsSection",
    "RewardSection",
    "SamplerSection",
    "SolveSection",
    "TrackingSection",
    "UpdateSection",
    "VerifySection",
    "cannot_learn",
    "load_params",
    "merge",
    "parse_params",
]


class ParamsError(ValueError):
    """params.yaml is invalid; the message lists every offending key with a fix."""


class HeldoutSection(Section):
    """The held-out pool (populora/heldout/): verified code_o/code_i tasks made once by the base
    model as teacher, never proposed, solved or trained on, answered greedily by every member after every
    generation, or every `every`-th and the last (stages.heldout_pool, stages.heldout)."""

    per_type: int = Field(
        8,
        ge=0,
        description="Pool tasks per trained type (code_o, code_i among propose.types); 0: no pool, nothing scored.",
    )
    seed: int = Field(
        0,
        description="Seed of the pool (proposals, worked examples), independent of base.seed so "
        "that every run of a study shares one pool.",
    )
    max_rounds: int = Field(
        12,
        ge=1,
        description="Rounds of base-model proposals (one batch, propose.batch_size, each) before "
        "the pool is taken as it is, short (logged and recorded in base.json).",
    )
    roles: tuple[Literal["students", "teachers"], ...] = Field(
        ("students",),
        min_length=1,
        description="Whose members answer the pool every generation (the "
        "baseline's one adapter is both): [students, teachers] also scores the teachers, twice the cost of a 2T-2S "
        "generation.",
    )
    every: int = Field(
        1,
        ge=1,
        description="Greedy verdicts after generations g with (g + 1) % every == 0, and always after the last; "
        "between, the heldout stage writes an empty record and loads no model unless pass rates are due "
        "(sample_every). On the CPU greedy scoring of a 256-task pool costs about as much as a generation's "
        "training: 5 scores a 10-generation study after generations 4 and 9.",
    )
    samples: int = Field(
        0,
        ge=0,
        le=256,
        description="Answers per pool task at temperature 1 for the continuous measure, the mean pass "
        "rate (heldout.<member>.pass_rate), beside the greedy verdicts; 0: greedy only (each answer costs about as "
        "much as a greedy one).",
    )
    sample_every: int = Field(
        1,
        ge=1,
        description="With heldout.samples: the pass rates after generations g with (g + 1) % sample_every == 0 "
        "(a study's endpoint needs them at its last generation: 10 for a 10-generation study).",
    )
    pool_file: str | None = Field(
        "data/pool-v3/pool.jsonl",
        description="A pool made before (a pool.jsonl of `python -m populora.heldout.ruler` "
        "or of a heldout_pool stage) to reuse instead of proposing one: its tasks are verified again, the first "
        "per_type of each type kept, the base model scored on them. The DAG passes the file to the stage as an "
        "input (both engines track its content; a change of this key asks for `python -m workflow.render_dvc`); a "
        "path relative to the project root. The default is pool v3 (data/pool-v3/), made on "
        "SmolLM2-135M's warm base. null: the base model proposes the pool (do so for another base model).",
    )

    @field_validator("pool_file")
    @classmethod
    def _pool_file_exists(cls, value: str | None) -> str | None:
        from populora.core.paths import project_path

        if value is not None and not project_path(value).is_file():
            raise ValueError(
                f"no such file: {value} (resolved to {project_path(value)}, from the project root); point "
                "heldout.pool_file at a pool.jsonl written by the heldout_pool stage or the ruler, or set it to null"
            )
        return value


class Params(Section):
    """Every section of params.yaml, and the checks between sections (a key whose valid values depend on another's)."""

    base: BaseSection = BaseSection()
    model: ModelSection = ModelSection()
    warm_start: WarmStartSection = WarmStartSection()
    lora: LoraSection = LoraSection()
    sampler: SamplerSection = SamplerSection()
    population: PopulationSection = PopulationSection()
    dag: DagSection = DagSection()
    propose: ProposeSection = ProposeSection()
    solve: SolveSection = SolveSection()
    verify: VerifySection = VerifySection()
    buffer: BufferSection = BufferSection()
    reward: RewardSection = RewardSection()
    update: UpdateSection = UpdateSection()
    ratings: RatingsSection = RatingsSection()
    pairing: PairingSection = PairingSection()
    evolve: EvolveSection = EvolveSection()
    bench: BenchSection = BenchSection()
    control: ControlSection = ControlSection()
    heldout: HeldoutSection = HeldoutSection()
    tracking: TrackingSection = TrackingSection()

    @model_validator(mode="after")
    def _cross_checks(self):
        if self.evolve.replace > 0:
            smallest = min(self.population.teachers, self.population.students)
            if "population" in self.dag.arms and self.evolve.replace >= smallest and smallest > 1:
                raise ValueError(
                    f"evolve.replace = {self.evolve.replace} would replace every member of a sub-population of "
                    f"{smallest}; set evolve.replace below min(population.teachers, population.students)"
                )
        copied_types = {"code_o", "code_i"} & set(self.propose.types)
        if self.propose.reject_copyable and self.buffer.seeds == "identity" and copied_types:
            raise ValueError(
                "propose.reject_copyable leaves the identity seed, the only one of buffer.seeds: identity, out of the "
                f"buffer, so {sorted(copied_types)} would start with no task; set buffer.seeds: builtin"
            )
        return self

    @model_validator(mode="after")
    def _token_budgets_fit_the_window(self):
        """Every generated row must fit update.max_seq_len with its prompt: the window a rollout is trained in
        (left-truncated past it) and, on vLLM, the engine's window (max_model_len) for every pass, benchmarks
        included. The hf engine's benchmark passes are not trained and have no window of ours."""
        window = self.update.max_seq_len
        budgets = {
            "propose.max_new_tokens": self.propose.max_new_tokens,
            "solve.max_new_tokens": self.solve.max_new_tokens,
        }
        if self.sampler.engine == "vllm":
            budgets |= {
                "bench.max_new_tokens": self.bench.max_new_tokens,
                "bench.cruxeval.max_new_tokens": self.bench.cruxeval.max_new_tokens,
            }
        where = (
            "the window a rollout is trained in and vLLM's max_model_len"
            if self.sampler.engine == "vllm"
            else "the window a rollout is trained in (left-truncated past it)"
        )
        errors = [
            InitErrorDetails(
                type=PydanticCustomError(
                    "token_budget",
                    f"{budget} new tokens leave no room for the prompt in update.max_seq_len = {window}, {where}",
                    {
                        "fix": f"Lower {key} below update.max_seq_len ({window}), leaving room for the prompt, or "
                        "raise update.max_seq_len (it costs update memory and, on vLLM, KV cache)."
                    },
                ),
                loc=tuple(key.split(".")),
                input=budget,
            )
            for key, budget in budgets.items()
            if budget >= window
        ]
        if errors:  # keyed errors, formatted as the fields' own (a plain ValueError here would have no key)
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self

    @model_validator(mode="after")
    def _pairs_are_pairs(self):
        """`pairing.strategy: pairs` needs one teacher per student, and no evolution (a child would carry one
        pair's weights into another's slot)."""
        teachers, students = self.population.teachers, self.population.students
        problems = (
            []
            if self.pairing.strategy != "pairs" or "population" not in self.dag.arms
            else [
                *(
                    [
                        (
                            "population.teachers",
                            teachers,
                            f"pairing.strategy pairs teacher k with student k, so needs as many "
                            f"teachers as students ({students})",
                            "Set population.teachers equal to population.students, or use pairing.strategy: pfsp.",
                        )
                    ]
                    if teachers != students
                    else []
                ),
                *(
                    [
                        (
                            "evolve.replace",
                            self.evolve.replace,
                            "pairing.strategy: pairs keeps the pairs independent, but "
                            "evolution would copy one pair's weights into another's slot",
                            "Set evolve.replace: 0 (the ensemble "
                            "control has no evolution), or use pairing.strategy: pfsp.",
                        )
                    ]
                    if self.evolve.replace and teachers > 1
                    else []
                ),
            ]
        )
        if problems:
            raise ValidationError.from_exception_data(
                type(self).__name__,
                [
                    InitErrorDetails(
                        type=PydanticCustomError("pairs", problem, {"fix": fix}), loc=tuple(key.split(".")), input=value
                    )
                    for key, value, problem, fix in problems
                ],
            )
        return self

    @model_validator(mode="after")
    def _every_role_can_learn(self):
        """Refuse settings under which every advantage of a role is 0 by construction (the run would
        train on nothing): a group of one rollout, or a group whose rollouts are identical, gets A = 0
        (populora.rl.advantages). See `cannot_learn` for the cases."""
        errors = [
            InitErrorDetails(
                type=PydanticCustomError("cannot_learn", problem, {"fix": fix}), loc=tuple(key.split(".")), input=value
            )
            for key, value, problem, fix in cannot_learn(self)
        ]
        if errors:
            raise ValidationError.from_exception_data(type(self).__name__, errors)
        return self


_Problem = tuple[str, object, str, str]  # (key, value, problem, fix): one of `cannot_learn`'s


def cannot_learn(params: Params) -> list[tuple[str, object, str, str]]:
    """(key, value, problem, fix) for each role whose every advantage is 0 by construction.

    * propose: proposals always use TRR++ groups (adapter, propose, type) of `propose.per_type` rollouts;
      one per group whitens to 0.
    * solve, per_task: groups (adapter, task) of `solve.samples` answers; one per group, or identical
      answers (greedy decoding of one prompt: temperature 0 with no worked examples drawn per sample), give 0.
    * solve, trr++: groups (adapter, solve, type) of slots x samples answers; a student has exactly
      `solve.tasks_per_type` slots in the baseline arm and in a population whose students' slots cover
      its teachers (else pairing adds slots), so 1 x 1, or 1 task with identical answers, gives 0.
    """
    identical = _identical_answers(params.solve)
    checks = (
        _lone_proposals(params),
        _per_task_without_spread(params, identical),
        _trr_without_spread(params, identical),
    )
    return [problem for problem in checks if problem is not None]


def _identical_answers(solve: SolveSection) -> bool:
    """Whether every sample of a task gets one prompt and greedy decoding, so its answers are all alike."""
    return solve.temperature == 0 and solve.worked_examples == 0


def _lone_proposals(params: Params) -> _Problem | None:
    """One proposal per teacher and type: alone in its TRR++ group, so every proposer advantage is 0."""
    if params.propose.per_type >= 2:
        return None
    return (
        "propose.per_type",
        params.propose.per_type,
        "one proposal per teacher and task type is alone in its TRR++ group (adapter, propose, type), "
        "so every proposer advantage is 0 and teachers never learn",
        "Set propose.per_type to 2 or more.",
    )


def _per_task_without_spread(params: Params, identical: bool) -> _Problem | None:
    """Under the per_task baseline: one answer per task, or identical ones, leave nothing to compare with."""
    solve = params.solve
    if params.reward.advantage_baseline != "per_task":
        return None
    if solve.samples < 2:
        return (
            "solve.samples",
            solve.samples,
            "reward.advantage_baseline: per_task compares an answer with the other answers to its task, "
            "and with one sample there are none, so every solve advantage is 0",
            "Set solve.samples to 2 or more, or reward.advantage_baseline: trr++.",
        )
    if identical:
        return (
            "solve.temperature",
            solve.temperature,
            "greedy answers (temperature 0, solve.worked_examples 0: one prompt per task) are identical, so "
            "with reward.advantage_baseline: per_task every solve advantage is 0",
            "Sample the answers (solve.temperature above 0, e.g. 0.5), draw worked examples per sample "
            "(solve.worked_examples 1 or more), or use reward.advantage_baseline: trr++.",
        )
    return None


def _trr_without_spread(params: Params, identical: bool) -> _Problem | None:
    """Under the trr++ baseline: a student's (adapter, solve, type) group of exactly one task with one answer,
    or identical ones, has no spread."""
    solve = params.solve
    exact_slots = "baseline" in params.dag.arms or (
        params.population.teachers <= params.population.students * solve.tasks_per_type
    )
    if not (
        params.reward.advantage_baseline == "trr++"
        and exact_slots
        and solve.tasks_per_type == 1
        and (solve.samples == 1 or identical)
    ):
        return None
    what = "one answer" if solve.samples == 1 else "identical greedy answers (temperature 0, no worked examples)"
    return (
        "solve.tasks_per_type",
        solve.tasks_per_type,
        f"one task per student and type with {what} leaves each TRR++ group (adapter, solve, type) "
        "without a spread, so every solve advantage is 0",
        "Set solve.tasks_per_type to 2 or more, or solve.samples to 2 or more with sampled answers "
        "(solve.temperature above 0).",
    )


# keys renamed to TRL's and verl's names (docs/design.md, "The update's knobs"): old key -> the fix, given its value
RENAMED = {
    "update.loss_reduction": lambda value: (
        f"Write update.loss_type: {value if value in ('sequence', 'token') else 'sequence'} "
        "(same values; constant is Dr. GRPO's)."
    ),
    "update.importance_cap": lambda value: (
        "Write update.importance_sampling_mode: auto (the correction on in bfloat16, "
        "off in float32, as importance_cap: null did)."
        if value is None
        else f"Write update.importance_sampling_mode: token_truncate and update.importance_sampling_cap: {value}."
    ),
}


def _format_errors(error: ValidationError, source: str) -> str:
    lines = [f"{source} is invalid:"]
    for item in error.errors():
        key = ".".join(str(part) for part in item["loc"]) or "(top level)"
        if item["type"] == "extra_forbidden" and key in RENAMED:
            lines.append(f"  {key}: renamed to the field's name (issue 49). Fix: {RENAMED[key](item.get('input'))}")
            continue
        if item["type"] == "extra_forbidden":
            section = key.rsplit(".", 1)[0] if "." in key else None
            known = sorted((Params.model_fields if section is None else _section_fields(section)) or [])
            lines.append(f"  {key}: unknown key. Fix: Remove it or use one of: {', '.join(known)}.")
            continue
        message = item["msg"].removeprefix("Value error, ")
        got = f" (got {item.get('input')!r})" if item["loc"] else ""
        fix = (item.get("ctx") or {}).get("fix") or field_fix(key) or _describe(key)
        lines.append(f"  {key}: {message}{got}.{' Fix: ' + fix if fix else ''}")
    return "\n".join(lines)


def _field(key: str):
    """The pydantic field of a dotted key (`lora.rank`, `bench.cruxeval.max_new_tokens`), or None."""
    model, info = Params, None
    for part in key.split("."):
        info = (getattr(model, "model_fields", None) or {}).get(part)
        if info is None:
            return None
        model = info.annotation
    return info


def field_fix(key: str) -> str | None:
    """The fix a key's field names for a wrong value (`json_schema_extra={"fix": ...}`), if any: a
    sentence starting with a capital letter (tests/test_config.py checks)."""
    info = _field(key)
    return (info.json_schema_extra or {}).get("fix") if info and isinstance(info.json_schema_extra, dict) else None


def _section_fields(section: str):
    field = _field(section)
    return getattr(field.annotation, "model_fields", None) if field else None


def lower_first(text: str) -> str:
    """`text` with its first letter lowercased to follow "expected", unless its first word is an acronym
    or a name with capitals inside (LoRA, CPU-time, TrueSkill, PFSP), which keep their case.

    >>> lower_first("Sampling temperature."), lower_first("LoRA rank r."), lower_first("CPU-time limit.")
    ('sampling temperature.', 'LoRA rank r.', 'CPU-time limit.')
    """
    word = text.split(maxsplit=1)[0] if text.strip() else ""
    return text[:1].lower() + text[1:] if word[1:] == word[1:].lower() else text


def _describe(key: str) -> str:
    info = _field(key)
    return f"Expected {lower_first(info.description)}" if info and info.description else ""


def parse_params(raw: dict | None, source: str = "params.yaml") -> Params:
    """Validate a params mapping; raise ParamsError naming each bad key and its fix."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ParamsError(
            f"{source} must be a YAML mapping of sections (base, model, lora, ...), got {type(raw).__name__}"
        )
    try:
        return Params.model_validate(raw)
    except ValidationError as error:
        raise ParamsError(_format_errors(error, source)) from None


def load_params(path: str | Path = "params.yaml") -> Params:
    path = Path(path)
    if not path.is_file():
        raise ParamsError(f"{path} not found. Fix: Run from the repository root or pass --params PATH.")
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:
        raise ParamsError(f"{path} is not valid YAML: {error}") from None
    return parse_params(raw, str(path))


def overlaid(path: str | Path, overlays=(), *changes: dict) -> dict:
    """The params mapping of `path` with each overlay file, then each mapping of `changes`, merged over it in
    order (later ones win); not validated (`parse_params` does)."""
    raw = yaml.safe_load(Path(path).read_text())
    for overlay in overlays:
        raw = merge(raw, yaml.safe_load(Path(overlay).read_text()) or {})
    for change in changes:
        raw = merge(raw, change)
    return raw


def load_overlaid(path: str | Path, overlays=(), *changes: dict) -> Params:
    """`overlaid`, validated: the params a tool outside the DAG runs with (the ruler, the controls, the studies)."""
    return parse_params(overlaid(path, overlays, *changes), " + ".join([str(path), *map(str, overlays)]))


def merge(base: dict, overlay: dict) -> dict:
    """Overlay values onto a params mapping, section by section (lists and scalars are replaced).

    >>> merge({"a": {"x": 1, "y": 2}}, {"a": {"y": 3}})
    {'a': {'x': 1, 'y': 3}}
    """
    merged = dict(base)
    for key, value in overlay.items():
        merged[key] = merge(base[key], value) if isinstance(value, dict) and isinstance(base.get(key), dict) else value
    return merged


def main(argv: list[str] | None = None) -> int:
    """`python -m populora.config [PARAMS]` validates; `--overlay FILE` (repeatable, applied in order)
    prints PARAMS merged with the overlays."""
    import argparse

    parser = argparse.ArgumentParser(description="Validate params.yaml, or merge overlays into it.")
    parser.add_argument("params", nargs="?", default="params.yaml")
    parser.add_argument(
        "--overlay",
        action="append",
        default=[],
        help="YAML overlay (e.g. params/gpu-paper.yaml), repeatable: later ones win; the merged file goes to stdout",
    )
    args = parser.parse_args(argv)
    try:
        if args.overlay:
            raw = overlaid(args.params, args.overlay)
            parse_params(raw, " + ".join([args.params, *args.overlay]))
            print(yaml.safe_dump(raw, sort_keys=False), end="")
            return 0
        load_params(args.params)
    except ParamsError as error:
        print(error, file=sys.stderr)
        return 2
    print(f"{args.params}: OK", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
