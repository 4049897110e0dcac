"""Stage pair: match teachers with students for this generation (TrueSkill PFSP or round robin).

    python -m stages.pair --params params.yaml --arm population --gen 0 \
        --state results/population/init --pairing results/population/gen000/pairing.json

Each student gets `solve.tasks_per_type` slots per task type; a slot names the teacher whose
task it solves. PFSP favours matchups with student win probability near 0.5; every student
gets tasks and every teacher gets at least one student (an extra slot when teachers outnumber
student slots). `pairs` (the ensemble control) gives teacher k's every slot to student k, and the
later stages keep each pair's buffer its own. The baseline pairs `solo` with itself. Schemes: `populora.population.ratings`.
"""

from __future__ import annotations

from populora.core.io import write_json
from populora.core.seeds import derive_seed
from populora.core.state import load_state
from populora.population.ratings import pairs_pairing, pfsp_pairing, round_robin_pairing
from stages._common import setup, stage_parser


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0])
    parser.add_argument("--state", required=True)
    parser.add_argument("--pairing", required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "pair")
    state = load_state(args.state)
    slots = params.solve.tasks_per_type
    if params.pairing.strategy == "pfsp":
        pairing = pfsp_pairing(
            state.teachers,
            state.students,
            state.ratings,
            slots_per_student=slots,
            temperature=params.pairing.temperature,
            seed=derive_seed(params.base.seed, "pair", args.arm, args.gen),
            beta=params.ratings.beta,
        )
    elif params.pairing.strategy == "pairs":  # the ensemble control: teacher k with student k only
        pairing = pairs_pairing(state.teachers, state.students, slots_per_student=slots)
    else:
        pairing = round_robin_pairing(state.teachers, state.students, slots_per_student=slots)
    write_json(args.pairing, pairing)
    log.info("pairing counts %s", pairing["counts"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
