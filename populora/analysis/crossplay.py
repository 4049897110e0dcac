"""The cross-play matrix of a finished run: every generation's students on a frozen sample of every
generation's teachers' valid tasks, greedy, graded by the project's grader (issue 51). Steady progress
shows as rows that rise down every column (later students solve earlier and later tasks better);
cycling as later students losing what earlier ones solved; TrueSkill, fitted to the games actually
played, cannot tell the two apart.

    python -m populora.analysis.crossplay results --arm population --params params.yaml --out results/crossplay \
        [--tasks-per-gen 8] [--types code_o code_i] [--gens 0 3 6 9] [--no-base]

Reads `<results>/<arm>/genNNN/tasks.jsonl` (the verified proposals of generation NNN, written by its
teachers) and `<results>/<arm>/genNNN/checkpoint` (its students as trained in that generation,
`populora.core.state.trained_adapter_dir`, never a child evolution put in their place), and the base
the adapters were trained on (`<results>/warm_base` where the run made one, else `<results>/base_model`,
unless `--base-model`; the raw base of a warm-started run is refused). Per teacher generation at most `--tasks-per-gen`
valid tasks are drawn (seeded, types in turn); each task gets fixed worked examples drawn once from the
verified seed tasks (`populora.heldout.pool.attach_examples`), so every student of every generation
sees exactly the same prompt: the tasks and their prompts are frozen, only the students change. Every
student answers every task once, greedy, with the solver's settings (`solve.mode`, `solve.max_new_tokens`,
`solve.batch_size`; the shared-prefix sampler prefills each prompt's common part once per adapter); the
sandboxed grader (`stages.grade`'s) gives the verdicts.

Cost: (generations x students + 1) x generations x tasks-per-gen greedy answers (10 generations, 2
students, 8 tasks: 1,680 answers of at most `solve.max_new_tokens` tokens). `--gens` keeps a subset.

Writes `<out>/crossplay.json` (`crossplay_matrix`: the matrix [student generation][teacher generation]
of the students' mean verdict, the same per task type and per student, the base model's row, the
triangles, every verdict, every sampled task and the command) and `<out>/crossplay.png` (the heatmap).
A cell with student generation >= teacher generation may hold tasks those students trained on
(generation t's tasks are solved in generation t); cells above the diagonal never do.
"""

from __future__ import annotations

import argparse
import logging
import random
import sys
from pathlib import Path
from statistics import mean

from populora.core.io import write_figure, write_json
from populora.core.paths import check_adapter_base, model_base
from populora.core.rows import Task, read_rows
from populora.core.seeds import derive_seed
from populora.core.state import load_state, trained_adapter_dir
from populora.heldout.pool import BASE, POOL_FIELDS, attach_examples
from populora.tasks.tasks import is_valid_task

log = logging.getLogger("crossplay")
GEN_PREFIX = "gen"


def generation_dirs(results: Path, arm: str, gens: list[int] | None = None) -> dict[int, Path]:
    """generation -> `<results>/<arm>/genNNN` for every generation with a checkpoint and tasks (or `gens`)."""
    found = {}
    for folder in sorted((Path(results) / arm).glob(f"{GEN_PREFIX}[0-9][0-9][0-9]")):
        if (folder / "checkpoint" / "state.json").is_file() and (folder / "tasks.jsonl").is_file():
            found[int(folder.name[len(GEN_PREFIX) :])] = folder
    if gens is not None:
        missing = sorted(set(gens) - set(found))
        if missing:
            raise ValueError(
                f"generations {missing} have no checkpoint/state.json and tasks.jsonl under {Path(results) / arm}"
            )
        found = {g: found[g] for g in sorted(gens)}
    return found


def sample_tasks(tasks: list[dict], cap: int, seed: int, types: tuple[str, ...]) -> list[dict]:
    """At most `cap` valid tasks of `types`, drawn without replacement, the types taken in turn (each
    type shuffled with `seed`), so a generation rich in one type still shows the others."""
    rng = random.Random(seed)
    by_type = {}
    for task_type in types:
        pool = sorted((t for t in tasks if t["type"] == task_type and is_valid_task(t)), key=lambda t: t["task_id"])
        rng.shuffle(pool)
        by_type[task_type] = pool
    out: list[dict] = []
    while len(out) < cap and any(by_type.values()):
        for task_type in types:
            if by_type[task_type] and len(out) < cap:
                out.append(by_type[task_type].pop(0))
    return [{**{k: t.get(k) for k in POOL_FIELDS}, "teacher": t.get("teacher"), "gen": t.get("gen")} for t in out]


def member_name(gen: int, slot: str) -> str:
    """The adapter (and verdict-table) name of generation `gen`'s student in `slot`."""
    return f"g{gen:03d}-{slot}"


def _cell(verdicts: dict[str, dict[str, int]], members: list[str], ids: list[str]) -> float | None:
    values = [verdicts.get(m, {}).get(i, 0) for m in members for i in ids]
    return round(mean(values), 6) if values else None


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(mean(values), 6) if values else None


def crossplay_matrix(
    verdicts: dict[str, dict[str, int]],
    tasks_by_gen: dict[int, list[dict]],
    students_by_gen: dict[int, list[str]],
    base: str | None = BASE,
) -> dict:
    """The matrix from verdicts (member -> task_id -> 0|1; a missing verdict counts wrong).

    `matrix[i][j]`: the mean verdict of student generation `student_gens[i]`'s students on teacher
    generation `teacher_gens[j]`'s sampled tasks (None where a side is empty); `by_type` the same per task
    type, `per_student` one row per student, `base` the base model's row (where `base` has verdicts).
    `triangles`: the mean cell on the diagonal (s = t), below it (s > t: later students on earlier tasks)
    and above it (s < t: earlier students on later tasks), `row_means` (a generation's students on every
    task) and `column_means` (a generation's tasks for every student)."""
    teacher_gens, student_gens = sorted(tasks_by_gen), sorted(students_by_gen)
    ids = {g: [t["task_id"] for t in tasks_by_gen[g]] for g in teacher_gens}
    types = list(dict.fromkeys(t["type"] for g in teacher_gens for t in tasks_by_gen[g]))
    matrix = _student_rows(verdicts, tasks_by_gen, students_by_gen)
    out = {
        "student_gens": student_gens,
        "teacher_gens": teacher_gens,
        "matrix": matrix,
        "students": {str(s): list(students_by_gen[s]) for s in student_gens},
        "tasks": {str(g): ids[g] for g in teacher_gens},
        "n_tasks": [len(ids[g]) for g in teacher_gens],
        "by_type": {tt: _student_rows(verdicts, tasks_by_gen, students_by_gen, tt) for tt in types},
        "n_tasks_by_type": {tt: [sum(t["type"] == tt for t in tasks_by_gen[g]) for g in teacher_gens] for tt in types},
        "per_student": {
            m: [_cell(verdicts, [m], ids[g]) for g in teacher_gens] for s in student_gens for m in students_by_gen[s]
        },
        "triangles": _triangles(matrix, student_gens, teacher_gens),
        "row_means": [
            _cell(verdicts, students_by_gen[s], [i for g in teacher_gens for i in ids[g]]) for s in student_gens
        ],
        "column_means": [
            _cell(verdicts, [m for s in student_gens for m in students_by_gen[s]], ids[g]) for g in teacher_gens
        ],
    }
    if base is not None and base in verdicts:
        out.update(_base_rows(verdicts, tasks_by_gen, base, types))
    return out


def _student_rows(
    verdicts: dict[str, dict[str, int]],
    tasks_by_gen: dict[int, list[dict]],
    students_by_gen: dict[int, list[str]],
    only: str | None = None,
) -> list[list[float | None]]:
    """[student generation][teacher generation] the students' mean verdict, on the tasks of type `only` if given."""
    return [
        [
            _cell(verdicts, students_by_gen[s], [t["task_id"] for t in tasks_by_gen[g] if only in (None, t["type"])])
            for g in sorted(tasks_by_gen)
        ]
        for s in sorted(students_by_gen)
    ]


def _triangles(matrix: list[list[float | None]], student_gens: list[int], teacher_gens: list[int]) -> dict:
    """The mean cell on the diagonal, below it and above it: steady progress and cycling differ there."""
    cells = {(s, t): matrix[i][j] for i, s in enumerate(student_gens) for j, t in enumerate(teacher_gens)}
    return {
        "diagonal": _mean(v for (s, t), v in cells.items() if s == t),
        "later_students_on_earlier_tasks": _mean(v for (s, t), v in cells.items() if s > t),
        "earlier_students_on_later_tasks": _mean(v for (s, t), v in cells.items() if s < t),
    }


def _base_rows(
    verdicts: dict[str, dict[str, int]], tasks_by_gen: dict[int, list[dict]], base: str, types: list[str]
) -> dict:
    """The base model's row (`base`) and the same per task type (`base_by_type`)."""
    teacher_gens = sorted(tasks_by_gen)
    return {
        "base": [_cell(verdicts, [base], [t["task_id"] for t in tasks_by_gen[g]]) for g in teacher_gens],
        "base_by_type": {
            tt: [
                _cell(verdicts, [base], [t["task_id"] for t in tasks_by_gen[g] if t["type"] == tt])
                for g in teacher_gens
            ]
            for tt in types
        },
    }


def plot_matrix(doc: dict, path: Path) -> None:
    """The heatmap: student generations down (the base on top where scored), teacher generations across,
    each cell's accuracy in points."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    labels = [f"students g{s}" for s in doc["student_gens"]]
    rows = list(doc["matrix"])
    if doc.get("base") is not None:
        labels, rows = ["base model", *labels], [doc["base"], *rows]
    values = np.array([[np.nan if v is None else 100 * v for v in row] for row in rows], dtype=float)
    fig, ax = plt.subplots(figsize=(max(6.0, 2.5 + 0.75 * len(doc["teacher_gens"])), 1.6 + 0.5 * max(len(rows), 3)))
    image = ax.imshow(
        values,
        cmap="viridis",
        vmin=0,
        vmax=max(10.0, float(np.nanmax(values)) if np.isfinite(values).any() else 10.0),
        aspect="auto",
    )
    for i in range(values.shape[0]):
        for j in range(values.shape[1]):
            if np.isfinite(values[i, j]):
                ax.text(
                    j,
                    i,
                    f"{values[i, j]:.0f}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="white" if values[i, j] < 0.6 * image.get_clim()[1] else "black",
                )
    ax.set_xticks(
        range(len(doc["teacher_gens"])),
        [f"g{t}\n(n={n})" for t, n in zip(doc["teacher_gens"], doc["n_tasks"])],
        fontsize=8,
    )
    ax.set_yticks(range(len(labels)), labels, fontsize=8)
    ax.set_xlabel("teachers' generation (frozen sample of its valid tasks)")
    ax.set_title(
        f"cross-play ({doc.get('arm', '')}): students' greedy accuracy (points)\n"
        "on every generation's teachers' tasks, frozen",
        fontsize=9,
    )
    fig.colorbar(image, ax=ax, label="points")
    fig.tight_layout()
    write_figure(path, fig)
    plt.close(fig)


def crossplay(
    params,
    results: Path,
    arm: str,
    base_model: Path,
    *,
    tasks_per_gen: int,
    types: tuple[str, ...],
    seed: int = 0,
    gens: list[int] | None = None,
    with_base: bool = True,
) -> dict:
    """Sample, answer and grade (see the module docstring); returns the crossplay.json document."""
    from populora.heldout.pool import verified_seeds
    from populora.heldout.scoring import score_members
    from populora.lm.engines import load_sampler
    from populora.verifier import sandbox_for

    folders = generation_dirs(results, arm, gens)
    if not folders:
        raise ValueError(f"no generation with checkpoint/state.json and tasks.jsonl under {Path(results) / arm}")
    adapters, students_by_gen, members = _trained_students(folders)
    with sandbox_for(params.verify) as sandbox:
        seeds = verified_seeds(params, sandbox)
        tasks_by_gen = {
            g: _frozen_tasks(params, folder, seeds, arm, g, tasks_per_gen=tasks_per_gen, types=types, seed=seed)
            for g, folder in folders.items()
        }
        pool = [t for g in tasks_by_gen for t in tasks_by_gen[g]]
        if not pool:
            raise ValueError(
                f"no valid task of types {list(types)} in any generation's tasks.jsonl under {Path(results) / arm}"
            )
        answerers = [*adapters, *([None] if with_base else [])]
        log.info(
            "%d students of %d generations (+ base: %s) x %d tasks: %d greedy answers",
            len(adapters),
            len(folders),
            with_base,
            len(pool),
            len(answerers) * len(pool),
        )
        tokenizer, model = load_sampler(base_model, adapters, params)
        _, verdicts = score_members(params, model, tokenizer, pool, answerers, {}, sandbox)
    doc = crossplay_matrix(verdicts, tasks_by_gen, students_by_gen, BASE if with_base else None)
    return {
        "arm": arm,
        "results": str(results),
        "tasks_per_gen": tasks_per_gen,
        "types": list(types),
        "seed": seed,
        **doc,
        "members": members,
        "verdicts": verdicts,
        "sampled_tasks": {
            str(g): [{k: t[k] for k in ("task_id", "type", "teacher", "program", "inputs", "outputs")} for t in ts]
            for g, ts in tasks_by_gen.items()
        },
    }


def _trained_students(folders: dict[int, Path]) -> tuple[dict[str, Path], dict[int, list[str]], dict[str, dict]]:
    """Every generation's students as trained in it: their adapters by name, their names by generation, and
    what crossplay.json records of each (generation, slot, the member, the adapter)."""
    adapters: dict[str, Path] = {}
    students_by_gen: dict[int, list[str]] = {}
    members: dict[str, dict] = {}
    for g, folder in folders.items():
        state = load_state(folder / "checkpoint")
        students_by_gen[g] = []
        for slot in state.students:
            name = member_name(g, slot)
            # the adapter trained in generation g, never a child evolution put in the slot after it
            adapters[name] = trained_adapter_dir(folder / "checkpoint", state, slot)
            members[name] = {
                "generation": g,
                "slot": slot,
                "member": state.trained_members.get(slot, state.members[slot]),
                "adapter": str(adapters[name]),
            }
            students_by_gen[g].append(name)
    return adapters, students_by_gen, members


def _frozen_tasks(
    params,
    folder: Path,
    seeds: list[dict],
    arm: str,
    gen: int,
    *,
    tasks_per_gen: int,
    types: tuple[str, ...],
    seed: int,
) -> list[dict]:
    """Generation `gen`'s seeded sample of its teachers' valid tasks, each with worked examples drawn once:
    the prompts are frozen, so every student of every generation sees exactly the same ones."""
    return attach_examples(
        sample_tasks(
            read_rows(folder / "tasks.jsonl", Task), tasks_per_gen, derive_seed(seed, "crossplay", arm, gen), types
        ),
        seeds,
        params.solve.worked_examples,
        derive_seed(seed, "crossplay-examples", gen),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", help="the run's results folder (holding <arm>/genNNN/ and its base)")
    parser.add_argument("--arm", default="population")
    parser.add_argument("--params", default="params.yaml", help="the run's params (solver, verifier, engine settings)")
    parser.add_argument(
        "--base-model",
        help="the base the run's adapters were trained on (default: <results>/warm_base where it exists, else "
        "<results>/base_model: populora.core.paths.model_base)",
    )
    parser.add_argument("--out", required=True, help="folder for crossplay.json and crossplay.png")
    parser.add_argument(
        "--tasks-per-gen", type=int, default=8, help="valid tasks drawn per teacher generation (default 8)"
    )
    parser.add_argument("--types", nargs="+", default=None, help="task types drawn (default: propose.types)")
    parser.add_argument("--gens", nargs="+", type=int, default=None, help="generations to include (default: all)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the task sample and the worked examples")
    parser.add_argument("--no-base", action="store_true", help="leave the base model's row out")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from populora.config import ParamsError, load_params
    from populora.verifier import IsolationError

    try:
        params = load_params(args.params)
        types = tuple(args.types or params.propose.types)
        base_model = Path(args.base_model) if args.base_model else model_base(args.results)
        check_adapter_base(base_model)
        doc = crossplay(
            params,
            Path(args.results),
            args.arm,
            base_model,
            tasks_per_gen=args.tasks_per_gen,
            types=types,
            seed=args.seed,
            gens=args.gens,
            with_base=not args.no_base,
        )
    except (ParamsError, ValueError, OSError, IsolationError) as error:
        print(f"crossplay: {error}", file=sys.stderr)
        return 1
    doc["base_model"] = str(base_model)
    doc["command"] = "python -m populora.analysis.crossplay " + " ".join(argv if argv is not None else sys.argv[1:])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "crossplay.json", doc)
    plot_matrix(doc, out / "crossplay.png")
    print(
        f"cross-play matrix of {len(doc['student_gens'])} x {len(doc['teacher_gens'])} generations in "
        f"{out}/crossplay.json, crossplay.png",
        file=sys.stderr,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
