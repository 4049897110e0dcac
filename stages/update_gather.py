"""Stage update_gather: the generation's update jobs' parts, linked into one trained/ folder.

    python -m stages.update_gather --params params.yaml --arm population --gen 0 \
        --parts results/population/gen000/update --trained results/population/gen000/trained

Update job k (`--parts`/k, see stages/update.py) holds the arm's adapters k, k+J, ... of the
`dag.update_jobs` = J jobs. This writes what one job training every adapter wrote before the update
was split: trained/adapters/<slot>/ and trained/optimizer/<slot>.safetensors (hard links to the
parts' files, no copy) and trained/update_stats.json (every adapter's statistics), the layout
`stages.evolve` and `stages.checkpoint` read. Each adapter is taken from the job that trains it
under the current params; a part folder left from other params is ignored; a missing adapter stops
the stage naming the job to rerun.
"""

from __future__ import annotations

from pathlib import Path

from populora.core.io import link_or_copy, link_tree, read_json, replace_dir, staging_dir, write_json
from populora.core.paths import ADAPTER_WEIGHTS
from populora.core.state import ADAPTERS, OPTIMIZER, UPDATE_STATS
from populora.core.topology import slots_of_arm, update_part_slots
from stages._common import setup, stage_parser


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0])
    parser.add_argument("--parts", required=True, help="the folder of the generation's update jobs (one folder each)")
    parser.add_argument("--trained", required=True)
    args = parser.parse_args(argv)
    params, log = setup(args, "update_gather")
    jobs = params.dag.update_jobs
    parts = Path(args.parts)
    tmp = staging_dir(args.trained)
    stats = {}
    for part in range(min(jobs, len(slots_of_arm(params, args.arm)))):
        folder = parts / str(part)
        slots = update_part_slots(params, args.arm, part)
        part_stats = read_json(folder / UPDATE_STATS) if (folder / UPDATE_STATS).is_file() else {}
        for slot in slots:
            adapter = folder / ADAPTERS / slot
            if slot not in part_stats or not (adapter / ADAPTER_WEIGHTS).is_file():
                log.error(
                    "%s has no trained adapter %s. Fix: rerun update job %d of %s generation %d "
                    "(snakemake %s, or dvc repro update@%s-gen%d-%d)",
                    folder,
                    slot,
                    part,
                    args.arm,
                    args.gen,
                    folder,
                    args.arm,
                    args.gen,
                    part,
                )
                return 1
            link_tree(adapter, tmp / ADAPTERS / slot)
            moments = folder / OPTIMIZER / f"{slot}.safetensors"
            if moments.is_file():
                link_or_copy(moments, tmp / OPTIMIZER / moments.name)
            stats[slot] = part_stats[slot]
    write_json(tmp / UPDATE_STATS, stats)
    replace_dir(tmp, args.trained)
    log.info("gathered %d adapters from %d update jobs", len(stats), min(jobs, len(stats)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
