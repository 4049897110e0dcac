"""What a killed bench job keeps: finished work under `<results>.partial/`, taken back by a rerun.

    partial = Partial(Path(f"{results}.partial"), settings, base_model)     # stages/bench.py
    outputs = generate_in_pieces(partial, models, ids, generate, size=piece_size(settings, len(models)), ...)

The bench stage hands every runner a `Partial`: the folder beside `--results` and, per model, a key
of everything its result depends on (`model_key`: the benchmark's resolved settings, the project's
code, the base model's and the adapter's files). The stage removes the folder once the results are
in place; a failure, a SLURM time-out or a SIGKILL leaves it for the rerun.

* The runners that generate in the project's code (CRUXEval, EvalPlus, LiveCodeBench) generate in
  pieces of consecutive problems (`generate_in_pieces`). After each piece, every model's outputs of
  it are written, atomically, to `_pieces/<model>/piece-NNNNN.json` with the model's key and the
  piece's problem ids; a rerun takes back every piece whose files all hold the current key and ids
  and generates only the others. Pieces depend on the problem list alone (file order,
  `piece_size`), so a rerun generates the remaining problems in exactly the batches an
  uninterrupted run would have and ends with the same answers. Scoring (the sandbox, evalplus's
  checks) and the gold answers' log-likelihood run over every problem after generation, each time.
* lm-eval: its request cache (`use_cache`, a sqlite file per model that lm-eval fills as requests
  finish: batch by batch with its hf model; with its vllm model, which is given every request at
  once, when the model's generation ends) at `lm_eval_cache(model)`, `_lm_eval/<model>-<key>`. The
  stacked members' pass generates every member's answers at the first member's requests, so it
  keeps them itself, per batch, in `_lm_eval/members-<key>.jsonl` (populora/bench/lmeval.py): a
  per-model cache would hold only the first member's.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
from collections.abc import Callable
from pathlib import Path

from populora.core.io import ArtifactError, read_json, write_json
from populora.core.progress import Progress

PIECES = "_pieces"  # underscores: never a model's name (base, <arm>-<slot>)
LM_EVAL = "_lm_eval"
PIECE_BATCHES = 4  # a piece holds about this many batches of rows: what a kill can cost

_CODE_ROOT = Path(__file__).resolve().parents[2]


@functools.cache
def code_hash(root: Path = _CODE_ROOT) -> str:
    """The project's code (any change: run again)."""
    return hashlib.sha256(
        b"".join(
            p.read_bytes()
            for folder in ("populora", "stages", "workflow/lm_eval_tasks")
            for p in sorted((root / folder).rglob("*.py"))
        )
    ).hexdigest()


def _files(folder: Path) -> list:
    return sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in Path(folder).iterdir() if p.is_file())


def model_key(settings, base_model: Path, model) -> str:
    """What a model's result depends on: the benchmark's resolved settings (what it reads of params), the
    project's code, the base model's and the adapter's files (names, sizes, modification times)."""
    parts = {
        "settings": repr(settings),
        "code": code_hash(),
        "base": _files(base_model),
        "adapter": _files(model.adapter) if model.adapter else None,
        "model": model.name,
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def piece_size(settings, models: int) -> int:
    """Problems per piece: every model's rows of a problem go in the same piece, about
    `PIECE_BATCHES` batches of rows a piece (hf: `bench.batch_size` rows a batch; vllm:
    `sampler.max_num_seqs` rows in flight)."""
    per_batch = settings.sampler.max_num_seqs if settings.sampler.name == "vllm" else settings.batch_size
    return max(1, PIECE_BATCHES * per_batch // max(1, models))


class Partial:
    """The `<results>.partial/` folder of one bench job (see the module docstring)."""

    def __init__(self, folder: Path, settings, base_model: Path):
        self.folder, self.settings, self.base_model = Path(folder), settings, Path(base_model)
        self._keys: dict[str, str] = {}

    def key(self, model) -> str:
        if model.name not in self._keys:
            self._keys[model.name] = model_key(self.settings, self.base_model, model)
        return self._keys[model.name]

    def _piece(self, model, number: int) -> Path:
        return self.folder / PIECES / model.name / f"piece-{number:05d}.json"

    def take_piece(self, number: int, ids: list[str], models) -> dict[str, list] | None:
        """Every model's outputs of piece `number` when all were kept with the current key and ids, else None."""
        outputs = {}
        for model in models:
            path = self._piece(model, number)
            try:
                record = read_json(path) if path.is_file() else None
            except ArtifactError:
                record = None
            if not record or record.get("key") != self.key(model) or record.get("ids") != ids:
                return None
            outputs[model.name] = record["outputs"]
        return outputs

    def keep_piece(self, number: int, ids: list[str], models, outputs: dict[str, list]) -> None:
        for model in models:
            write_json(self._piece(model, number), {"key": self.key(model), "ids": ids, "outputs": outputs[model.name]})

    def lm_eval_cache(self, model) -> str:
        """lm-eval's `use_cache` for `model` (lm-eval appends `_rank<N>.db`)."""
        (self.folder / LM_EVAL).mkdir(parents=True, exist_ok=True)
        return str(self.folder / LM_EVAL / f"{model.name}-{self.key(model)[:16]}")

    def members_store(self, models) -> Path:
        """The stacked members' generations (populora.bench.lmeval), keyed by every member's key."""
        joint = hashlib.sha256("".join(self.key(model) for model in models).encode()).hexdigest()
        (self.folder / LM_EVAL).mkdir(parents=True, exist_ok=True)
        return self.folder / LM_EVAL / f"members-{joint[:16]}.jsonl"


def generate_in_pieces(
    partial: Partial | None,
    models,
    ids: list[str],
    generate: Callable[[list[int], Progress], dict[str, list]],
    *,
    size: int,
    cost: Callable[[int], int],
    desc: str,
    unit: str,
    log: logging.Logger,
) -> dict[str, list]:
    """Every model's output per problem (model name -> outputs in the order of `ids`).

    `generate(indices, progress)` generates the problems at `indices` (positions in `ids`) for every
    model and returns {model name: [one JSON value per index]}; it advances `progress` by `cost(i)`
    units per problem i (summed over the models). Problems go in pieces of `size`; with `partial`,
    each piece is kept as soon as it is generated and pieces kept before are taken back."""
    names = [model.name for model in models]
    pieces = [list(range(start, min(start + size, len(ids)))) for start in range(0, len(ids), size)]
    outputs: dict[str, list] = {name: [None] * len(ids) for name in names}
    todo = []
    for number, piece in enumerate(pieces):
        kept = partial.take_piece(number, [ids[i] for i in piece], models) if partial is not None else None
        if kept is None:
            todo.append((number, piece))
            continue
        for name in names:
            for i, output in zip(piece, kept[name]):
                outputs[name][i] = output
    remaining = [i for _, piece in todo for i in piece]
    if len(remaining) < len(ids):
        assert partial is not None  # pieces are kept only with a partial
        log.info(
            "%s: %d of %d problems kept from an earlier attempt (%s)",
            desc,
            len(ids) - len(remaining),
            len(ids),
            partial.folder,
        )
    done_before = sum(cost(i) for i in range(len(ids))) - sum(cost(i) for i in remaining)
    with Progress(
        done_before + sum(cost(i) for i in remaining), desc, unit=unit, log=log, initial=done_before
    ) as progress:
        for number, piece in todo:
            made = generate(piece, progress)
            for name in names:
                for i, output in zip(piece, made[name]):
                    outputs[name][i] = output
            if partial is not None:
                partial.keep_piece(number, [ids[i] for i in piece], models, made)
    log.info(
        "%s: generated %d problems for %d model(s) in %d piece(s) of up to %d",
        desc,
        len(remaining),
        len(models),
        len(todo),
        size,
    )
    return outputs
