"""Stage init: generation-zero state of one arm: fresh adapters, ratings, the verified seed buffer.

    python -m stages.init --params params.yaml --arm population --base-model results/base_model \
        --checkpoint results/population/init

Population arm: `population.teachers` teacher slots and `population.students` student slots.
Baseline arm: one slot, `solo`, that both proposes and solves (AZR-style self-play).
"""

from __future__ import annotations

from populora.core.io import replace_dir, staging_dir
from populora.core.rows import BufferEntry, write_rows
from populora.core.seeds import derive_seed
from populora.core.state import ADAPTERS, BUFFER, State, save_state
from populora.core.topology import members_of_arm, slots_of_arm
from populora.lm.adapters import create_adapters
from populora.lm.model import load_base, lora_config
from populora.population import ratings as rating_lib
from populora.population.evolution import founder_events, member_id
from populora.tasks.tasks import buffer_entry, is_copyable, program_keys, seed_proposals
from populora.verifier import IsolationError, verify_rows
from stages._common import setup, stage_parser, timed


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], gen=False)
    parser.add_argument("--base-model", required=True)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "init")
    roles = members_of_arm(params, args.arm)
    slots = slots_of_arm(params, args.arm)
    tmp = staging_dir(args.checkpoint)

    with timed(log, "verifying seed tasks"):
        try:
            code_f_inputs = params.propose.code_f_inputs
            seeds = verify_rows(
                seed_proposals(params.buffer.seeds, code_f_inputs), params.verify, code_f_inputs=code_f_inputs
            )
        except IsolationError as error:  # a layer of verify.required_layers is missing
            log.error("%s", error)
            return 3
    bad = [row["task_id"] for row in seeds if not row["valid"]]
    if bad:
        log.error("seed tasks failed verification: %s", bad)
        return 1
    if params.propose.reject_copyable:  # the identity seed would pay students for echoing
        seeds = [row for row in seeds if not is_copyable(row)]
    write_rows(tmp / BUFFER, [buffer_entry(row) for row in seeds], BufferEntry)

    _, model = load_base(args.base_model, dtype=params.model.dtype, device="cpu")
    cfg = lora_config(params.lora.rank, params.lora.alpha, params.lora.dropout, list(params.lora.target_modules))
    seeds_by_slot = {slot: derive_seed(params.base.seed, "init", args.arm, slot) for slot in slots}
    (tmp / ADAPTERS).mkdir()
    with timed(log, f"creating {len(slots)} adapters"):
        create_adapters(model, slots, tmp / ADAPTERS, lora_cfg=cfg, seeds=seeds_by_slot, init_std=params.lora.init_std)

    env = params.ratings.model_dump()
    members = {slot: member_id(args.arm, slot, 0) for slot in slots}
    # seed programs are known before anyone proposes: they never count as new coverage
    seed_programs = sorted(program_keys(row for row in seeds if row["type"] != "code_f"))
    state = State(
        arm=args.arm,
        generation=-1,
        teachers=roles["teachers"],
        students=roles["students"],
        members=members,
        ratings={slot: rating_lib.new_rating(env) for slot in slots},
        lineage=founder_events([members[s] for s in slots], 0, seeds=[seeds_by_slot[s] for s in slots], slots=slots),
        coverage_hashes=seed_programs,
        matched_coverage_hashes=seed_programs,
    )
    save_state(tmp, state)
    replace_dir(tmp, args.checkpoint)
    log.info("arm %s: slots %s, %d seed tasks", args.arm, slots, len(seeds))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
