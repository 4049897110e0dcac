"""Stage pair: match teachers with students for this generation (TrueSkill PFSP or round robin).

    python -m stages.pair --params params.yaml --arm population --gen 0 \
        --state results/population/init --out results/population/gen000/pairing.json

Each student gets `solve.tasks_per_type` slots per task type; a slot names the teacher whose
task it solves. PFSP favours matchups with student win probability near 0.5; every student
gets tasks and every teacher gets at least one student. The baseline pairs `solo` with itself.
"""

from __future__ import annotations

from populora.io import write_json
from populora.ratings import pfsp_pairing
from populora.state import load_state
from stages._common import derive_seed, setup, stage_parser


def round_robin(teachers: list[str], students: list[str], slots: int) -> dict:
    counts = {t: {s: 0 for s in students} for t in teachers}
    position = 0
    for s in students:
        for _ in range(slots):
            counts[teachers[position % len(teachers)]][s] += 1
            position += 1
    return {"scheme": "round_robin", "teachers": teachers, "students": students, "counts": counts, "slots_per_student": slots}


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0])
    parser.add_argument("--state", required=True)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "pair")
    state = load_state(args.state)
    teachers, students = state["teachers"], state["students"]
    slots = params.solve.tasks_per_type
    if params.pairing.strategy == "pfsp":
        pairing = pfsp_pairing(
            teachers, students, state["ratings"], slots_per_student=slots, temperature=params.pairing.temperature,
            seed=derive_seed(params.base.seed, "pair", args.arm, args.gen), beta=params.ratings.beta,
        )
    else:
        pairing = round_robin(teachers, students, slots)
    write_json(args.out, pairing)
    log.info("pairing counts %s", pairing["counts"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
