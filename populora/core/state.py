"""The checkpoint folder a generation starts from, and what it holds.

    <checkpoint>/state.json         `State`: arm, generation, roles, members per slot, ratings,
                                    fitness records, lineage, coverage hashes
    <checkpoint>/buffer.jsonl       every valid task so far (seeds first), one row per task
    <checkpoint>/adapters/<slot>/   PEFT adapter (adapter_model.safetensors + adapter_config.json)
    <checkpoint>/optimizer/<slot>.safetensors   AdamW moments, so a resumed run continues exactly
    <checkpoint>/replaced/<slot>/   the trained adapter of a member that evolution replaced after this
                                    generation (hard link): with `trained_members`, what was trained

`results/<arm>/init` and `results/<arm>/genNNN/checkpoint` share this layout. Stages read and
write `state.json` only through `State`, so its keys are spelled once, here.

A generation's other folders reuse these names and add their own, also spelled once, here:

    <trained>/adapters/<slot>/, <trained>/optimizer/<slot>.safetensors   what `stages.update` trained
    <trained>/update_stats.json     UPDATE_STATS: every trained adapter's update statistics
    <evolved>/adapters/<slot>/      a child evolution made (`stages.evolve`)
    <evolved>/ratings.json          RATINGS: the ratings after evolution
    <evolved>/evolution.json        EVOLUTION: events, rankings, members, reward records
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from populora.core.io import link_or_copy, link_tree, read_json, write_json
from populora.core.refs import SOLO, STUDENT, TEACHER, ModelRef

STATE = "state.json"
REPLACED = "replaced"
BUFFER = "buffer.jsonl"
ADAPTERS = "adapters"
OPTIMIZER = "optimizer"
UPDATE_STATS = "update_stats.json"
RATINGS = "ratings.json"
EVOLUTION = "evolution.json"


@dataclass(frozen=True)
class State:
    """Everything about an arm between two generations that is not a tensor or a task.

    * `members`: slot -> id of the member occupying it (`population/teacher0@g000`); a slot's
      member changes when evolution replaces it, the slot name (adapter folder) does not.
    * `ratings`: slot -> TrueSkill `{"mu", "sigma"}`.
    * `fitness`: slot -> `{"sum", "count"}` of the rewards that rank the member for replacement
      (see `populora.population.evolution.fitness_of`); reset (to the parents' mean) when a child is born.
    * `lineage`: one event per member ever born (`populora.population.evolution.founder_events`, ...).
    * `coverage_hashes`: normalised-AST hashes of every program seen so far (seeds included);
      `matched_coverage_hashes`: the same over the equal-size proposal subsamples only.
    * `trained_members` / `trained_ratings`: the members trained in this generation and their
      ratings before any replacement: what a benchmark of the final population evaluates
      (`trained_adapter_dir`), never an untrained child.
    """

    arm: str
    generation: int
    teachers: list[str]
    students: list[str]
    members: dict[str, str]
    ratings: dict[str, dict[str, float]]
    lineage: list[dict]
    coverage_hashes: list[str] = field(default_factory=list)
    matched_coverage_hashes: list[str] = field(default_factory=list)
    fitness: dict[str, dict[str, float]] = field(default_factory=dict)
    trained_members: dict[str, str] = field(default_factory=dict)
    trained_ratings: dict[str, dict[str, float]] = field(default_factory=dict)

    @property
    def slots(self) -> list[str]:
        """Every adapter slot, teachers first (the baseline's `solo` once)."""
        return list(dict.fromkeys(self.teachers + self.students))

    def ref(self, slot: str) -> ModelRef:
        """The slot's `ModelRef`: its arm and the role it plays (solo when both)."""
        teaches, studies = slot in self.teachers, slot in self.students
        if not (teaches or studies):
            raise KeyError(f"{self.arm} has no slot {slot!r} (slots: {', '.join(self.slots)})")
        return ModelRef(self.arm, slot, SOLO if teaches and studies else TEACHER if teaches else STUDENT)

    def evolve(self, **changes) -> State:
        return replace(self, **changes)

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, raw: dict, source: str = STATE) -> State:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(raw) - known)
        if unknown:
            raise ValueError(
                f"{source}: unknown keys {unknown}. Fix: this checkpoint was written by another "
                "version of the pipeline; rerun from `init` (delete results/<arm>/)."
            )
        return cls(**raw)


def load_state(folder: str | Path) -> State:
    path = Path(folder) / STATE
    return State.from_json(read_json(path), str(path))


def save_state(folder: str | Path, state: State) -> None:
    write_json(Path(folder) / STATE, state.to_json())


def load_buffer(folder: str | Path) -> list[dict]:
    """The arm's task buffer (`populora.core.rows.BufferEntry` rows)."""
    from populora.core.rows import BufferEntry, read_rows

    return read_rows(Path(folder) / BUFFER, BufferEntry)


def adapter_dirs(folder: str | Path, slots: list[str]) -> dict[str, Path]:
    return {slot: Path(folder) / ADAPTERS / slot for slot in slots}


def trained_adapter_dir(folder: str | Path, state: State, slot: str) -> Path:
    """The adapter of the member trained in `slot` during the checkpoint's generation (before
    evolution replaced it, if it did)."""
    replaced = Path(folder) / REPLACED / slot
    return replaced if replaced.is_dir() else Path(folder) / ADAPTERS / slot


def link_checkpoint_adapters(
    out: str | Path, slots: list[str], trained: str | Path, evolved: str | Path, children: set[str]
) -> None:
    """Hard-link into a checkpoint `out` each slot's adapter and optimizer moments: the trained ones, or for
    a slot evolution gave a child (`children`) the child's, from `evolved`, with the trained adapter kept
    under replaced/ (the benchmarks of a final population use it). A child carries its first parent's
    moments, which evolve wrote under the child's slot's names."""
    out, trained, evolved = Path(out), Path(trained), Path(evolved)
    for slot in slots:
        source = evolved if slot in children else trained
        link_tree(source / ADAPTERS / slot, out / ADAPTERS / slot)
        if slot in children:
            link_tree(trained / ADAPTERS / slot, out / REPLACED / slot)
        moments = source / OPTIMIZER / f"{slot}.safetensors"
        if moments.is_file():
            link_or_copy(moments, out / OPTIMIZER / moments.name)
