"""Who a model is: `ModelRef(arm, slot, role)`, the one place a model's name is built and slots are named.

Slots are stable names of an arm's adapters (`teacher0`, `student1`, the baseline's `solo`); the
member in a slot can change when evolution replaces it. A benchmarked model is the bare `base` or
one slot's final adapter, named `<arm>-<slot>` (`population-student0`, `baseline-solo`): that name
is a file name in `results/bench`, a key in `results/metrics.json` and a label in the report, and
it is only ever made by `ModelRef.name`. Export writes a ref's fields into `model.json` and bench
into every result, so readers take the arm and role from the artifact (`ModelRef.from_fields`)
instead of parsing names.

    >>> ref = ModelRef("population", "student0", STUDENT)
    >>> ref.name, ref.solves, ref.proposes
    ('population-student0', True, False)
    >>> ModelRef.from_fields(ref.fields()) == ref
    True
"""

from __future__ import annotations

from dataclasses import dataclass

BASE = "base"
TEACHER, STUDENT, SOLO = "teacher", "student", "solo"  # SOLO: the baseline's one adapter, both roles
ROLES = (TEACHER, STUDENT, SOLO)


def slot_names(role: str, count: int) -> list[str]:
    """The slots of `count` adapters of one role of a population: teacher0.., student0..."""
    if role not in (TEACHER, STUDENT):
        raise ValueError(f"a population has teacher and student slots, not {role!r}")
    return [f"{role}{index}" for index in range(count)]


def arm_slots(arm: str, teachers: int, students: int) -> dict[str, list[str]]:
    """{'teachers': [...], 'students': [...]} slot names of an arm; the baseline's one `solo` slot plays both."""
    if arm == "baseline":
        return {"teachers": [SOLO], "students": [SOLO]}
    return {"teachers": slot_names(TEACHER, teachers), "students": slot_names(STUDENT, students)}


def arm_refs(arm: str, teachers: int, students: int) -> dict[str, list[ModelRef]]:
    """`arm_slots` as refs, each with its role."""
    slots = arm_slots(arm, teachers, students)
    if arm == "baseline":
        return {key: [ModelRef(arm, SOLO, SOLO)] for key in slots}
    return {
        "teachers": [ModelRef(arm, s, TEACHER) for s in slots["teachers"]],
        "students": [ModelRef(arm, s, STUDENT) for s in slots["students"]],
    }


@dataclass(frozen=True)
class ModelRef:
    """A benchmarked model: the bare base (`ModelRef(BASE)`), or an arm's slot and the role it plays."""

    arm: str
    slot: str | None = None
    role: str | None = None

    def __post_init__(self) -> None:
        if self.arm == BASE:
            if self.slot is not None or self.role is not None:
                raise ValueError(f"the base model has no slot or role (got slot={self.slot!r}, role={self.role!r})")
            return
        if "-" in self.arm or not self.slot:
            raise ValueError(f"arm {self.arm!r} needs a slot and must not contain '-' (it separates arm from slot)")
        if self.role not in ROLES:
            raise ValueError(f"role of {self.arm}-{self.slot} must be one of {', '.join(ROLES)}, not {self.role!r}")

    @property
    def name(self) -> str:
        return BASE if self.arm == BASE else f"{self.arm}-{self.slot}"

    @property
    def is_base(self) -> bool:
        return self.arm == BASE

    @property
    def solves(self) -> bool:
        """Trained to solve: a student, or the baseline's solo adapter."""
        return self.role in (STUDENT, SOLO)

    @property
    def proposes(self) -> bool:
        """Trained to propose: a teacher, or the baseline's solo adapter."""
        return self.role in (TEACHER, SOLO)

    def fields(self) -> dict:
        """What an artifact records about its model: `model` (the name), `arm`, `slot`, `role`."""
        return {"model": self.name, "arm": self.arm, "slot": self.slot, "role": self.role}

    @classmethod
    def from_fields(cls, row: dict) -> ModelRef:
        """The ref an artifact recorded with `fields()`; fails naming the model when a field is missing."""
        missing = [key for key in ("arm", "slot", "role") if key not in row]
        if missing:
            raise KeyError(
                f"{row.get('model', 'a result')} records no {', '.join(missing)}: it was written before "
                "models were described by ModelRef. Fix: rerun its bench (or export) stage."
            )
        ref = cls(row["arm"], row["slot"], row["role"])
        if "model" in row and row["model"] != ref.name:
            raise ValueError(f"model {row['model']!r} does not match its arm and slot ({ref.name!r})")
        return ref


BASE_REF = ModelRef(BASE)
