"""Math benchmarks through lm-evaluation-harness (`lm_eval.simple_evaluate`, HF backend).

The project's task YAMLs (`workflow/lm_eval_tasks/`, documented in its README.md) run as shipped,
from that folder (`lm_eval --include_path workflow/lm_eval_tasks` works the same by hand). The
data location goes through lm-eval's own mechanism, the task metadata: `TaskManager(metadata=
{"data_dir": ...})` here, `--metadata '{"data_dir": ...}'` on the command line; each task's
`custom_dataset` reads `<data_dir>/math/<name>/test.jsonl`, or with `bench.data_dir: null`
(`data_dir: official`) the published files (`OFFICIAL_MATH_DATA`, the AZR evaluation data).
`max_gen_toks` comes from `bench.max_new_tokens` through `gen_kwargs`. lm-eval's built-in tasks
are left out of the index (`include_defaults=False`): nothing else is loaded or downloaded.

The bare base model is `hf` with `pretrained=<base folder>`, greedy, chat template applied,
`<|im_end|>` among the stop strings. The members of an arm (`evaluate_members`) go through the
same HF backend on a model holding every member's adapter stacked (`populora.lm.multilora`):
lm-eval runs once per member, but the first run generates the answers of all members in one
pass (each row through its member's adapter) and the others take theirs from it, so prompts,
post-processing, filters and metrics are lm-eval's own for every member. `limit=N` makes
lm-eval evaluate the first N documents of the test file, in file order.

A killed job's finished requests are kept for the rerun (`populora.bench.partial`): lm-eval's own
request cache (`use_cache`) for a model run alone, and for the members' pass a store of every
member's generated ids per batch (lm-eval's cache is per model, and the first member's requests
generate everyone's answers). Progress: one unit per finished request, as plain log lines off a
terminal (`populora.core.progress`), instead of lm-eval's tqdm bar.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import time
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING

from populora.bench import BenchError, data_file, data_source, relative_data_file
from populora.bench.math_grading import extract_answer
from populora.core.io import write_json, write_jsonl
from populora.core.progress import Progress

if TYPE_CHECKING:  # annotations only: the runner table (runners.py) imports this module
    from populora.bench.models import BenchModel
    from populora.bench.partial import Partial
    from populora.bench.settings import BenchSettings

log = logging.getLogger(__name__)

TASKS_DIR = Path(__file__).resolve().parents[2] / "workflow" / "lm_eval_tasks"
# The files of ../shared/benchmarks/math are the AZR evaluation data; this is where they are
# published (used only when bench.data_dir is null; not reachable from the offline build machine).
OFFICIAL_MATH_DATA = (
    "https://raw.githubusercontent.com/LeapLabTHU/Absolute-Zero-Reasoner/master/evaluation/math_eval/eval/data"
)


def task_name(benchmark: str) -> str:
    return f"populora_{benchmark}"


def task_metadata(benchmark: str, data_dir: Path | None) -> dict:
    """lm-eval task metadata choosing the data: `{"data_dir": <absolute folder>}` after checking the
    benchmark's file exists (a clear error naming it), or `{"data_dir": "official"}`."""
    if data_dir is None:
        return {"data_dir": "official"}
    data_file(data_dir, benchmark)
    return {"data_dir": str(Path(data_dir).resolve())}


def check_tasks_dir(tasks_dir: Path) -> Path:
    if not (Path(tasks_dir) / "_populora_math.yaml").is_file():
        raise BenchError(
            f"{tasks_dir} holds no lm-eval task files (_populora_math.yaml). "
            "Fix: pass --tasks workflow/lm_eval_tasks (the repository's task folder)."
        )
    return Path(tasks_dir)


def model_args(base_model: str | Path, adapter: str | Path | None, dtype: str, vllm: dict | None = None) -> dict:
    """lm-eval's model arguments: its `hf` model (adapter as `peft`), or with `vllm` (engine
    settings: gpu_memory_utilization, enforce_eager, max_lora_rank, ...) its `vllm` model (adapter
    as `lora_local_path`, served as a LoRARequest)."""
    args = {"pretrained": str(base_model), "dtype": dtype}
    if vllm is not None:
        args.update(vllm)
        if adapter is not None:
            args["lora_local_path"] = str(adapter)
        else:
            args.pop("max_lora_rank", None)
    elif adapter is not None:
        args["peft"] = str(adapter)
    return args


def evaluate(
    benchmark: str,
    *,
    base_model: str | Path,
    adapter: str | Path | None,
    data_dir: Path | None,
    limit: int | None,
    max_new_tokens: int,
    batch_size: int,
    dtype: str,
    device: str,
    harness_dir: Path,
    tasks_dir: Path = TASKS_DIR,
    vllm: dict | None = None,
    cache: str | None = None,
) -> dict:
    """Run one math benchmark; returns lm-eval's results dict (with per-sample logs). With `vllm`
    (engine settings, see `model_args`) lm-eval's own `vllm` model generates, given every request at
    once (`batch_size` is then unused); else lm-eval's `hf` model, reporting progress as the project's
    loops do (`populora.core.progress`). `cache`: lm-eval's request cache (`use_cache`), which keeps
    every finished request and answers it again on a rerun (`populora.bench.partial`).

    `tasks_dir` holds the task files; `harness_dir/tasks` receives copies of those that ran and the
    metadata and generation arguments passed to lm-eval (`lm_eval_args.json`)."""
    metadata, gen_kwargs, manager = _prepare_task(benchmark, data_dir, max_new_tokens, tasks_dir, [Path(harness_dir)])
    arguments = model_args(base_model, adapter, dtype, vllm)
    try:  # the model is built inside: an adapter that does not load is explained too
        results = _simple_evaluate(
            benchmark,
            limit,
            manager,
            gen_kwargs,
            **_model_to_evaluate(benchmark, arguments, vllm, batch_size, device),
            device=device,
            use_cache=cache,
        )
    except Exception as error:  # re-raised with the context a user needs
        raise BenchError(_explain(error, benchmark, base_model, adapter, metadata["data_dir"])) from error
    if results is None:
        raise BenchError(f"lm-eval returned no results for {benchmark}")
    if vllm is None:  # recorded as when simple_evaluate is given the model's name and arguments
        results["config"].update(model="hf", model_args=arguments)
    return results


def _prepare_task(
    benchmark: str, data_dir: Path | None, max_new_tokens: int, tasks_dir: Path, harness_dirs: list[Path]
) -> tuple[dict, dict, object]:
    """(task metadata, generation arguments, lm-eval's task manager) for one benchmark, after checking the
    task folder and the data file, with the task files and arguments recorded in every harness folder."""
    from lm_eval.tasks import TaskManager

    tasks_dir = check_tasks_dir(Path(tasks_dir))
    metadata = task_metadata(benchmark, data_dir)
    gen_kwargs = {"max_gen_toks": max_new_tokens}
    for harness_dir in harness_dirs:
        _record_task_files(tasks_dir, Path(harness_dir), benchmark, metadata, gen_kwargs)
    manager = TaskManager(include_path=str(tasks_dir), include_defaults=False, metadata=metadata)
    return metadata, gen_kwargs, manager


def _model_to_evaluate(benchmark: str, arguments: dict, vllm: dict | None, batch_size: int, device: str) -> dict:
    """simple_evaluate's model arguments: lm-eval's own vllm model by name, or (vllm None) lm-eval's hf model
    as simple_evaluate builds it, with the project's progress lines."""
    if vllm is not None:
        # every request at once (batch_size auto), so vLLM's continuous batching fills the KV cache
        # (`sampler.max_num_seqs` rows in flight) instead of each chunk waiting for its longest row
        return {"model": "vllm", "model_args": arguments, "batch_size": "auto"}
    model = _hf_model(arguments, batch_size, device)
    model.progress_desc = f"{benchmark} (lm-eval)"
    return {"model": model, "model_args": None, "batch_size": batch_size}


def _simple_evaluate(benchmark: str, limit: int | None, manager, gen_kwargs: dict, **model) -> dict | None:
    """lm-eval's simple_evaluate of the benchmark's task with the project's fixed choices (chat template,
    per-sample logs, every seed 0); `model`: the model and whatever else its caller gives simple_evaluate."""
    import lm_eval

    return lm_eval.simple_evaluate(
        **model,
        tasks=[task_name(benchmark)],
        limit=limit,
        apply_chat_template=True,
        log_samples=True,
        task_manager=manager,
        gen_kwargs=gen_kwargs,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=0,
    )


def _hf_model(arguments: dict, batch_size: int, device: str):
    """lm-eval's hf model for `arguments`, kept by the process for the next benchmark with the same ones (the
    bare base's math benchmarks in one job load it once: stages/bench_together.py). The folder's files are in
    the key, so a model rewritten in place is loaded again."""
    from populora.bench.settings import _files

    key = (json.dumps(arguments, sort_keys=True), _files(arguments["pretrained"]), batch_size, device)
    if key not in _HF_MODELS:
        _HF_MODELS.clear()  # one at a time
        _HF_MODELS[key] = _progress_lm_class().create_from_arg_obj(
            arguments, {"batch_size": batch_size, "device": device}
        )
    return _HF_MODELS[key]


_HF_MODELS: dict = {}


class _CountingHook:
    """lm-eval's cache hook (called once per finished request), also advancing a progress."""

    def __init__(self, hook, advance):
        self.hook, self.advance = hook, advance

    def add_partial(self, attr, req, res) -> None:
        self.hook.add_partial(attr, req, res)
        self.advance()


@functools.cache
def _progress_lm_class():
    """`ProgressHFLM`: lm-eval's HF model whose `generate_until` reports through
    `populora.core.progress` (one unit per finished request) instead of lm-eval's tqdm bar; defined
    on first use (importing lm-eval's HF backend takes seconds)."""
    from lm_eval.models.huggingface import HFLM

    class ProgressHFLM(HFLM):
        progress_desc = "lm-eval"

        def generate_until(self, requests, disable_tqdm: bool = False):
            with Progress(len(requests), self.progress_desc, unit="requests", log=log) as progress:
                hook = self.cache_hook  # type: ignore[has-type]  # lm-eval's LM sets it untyped in __init__
                self.cache_hook = _CountingHook(hook, progress.update)
                try:
                    return super().generate_until(requests, disable_tqdm=True)
                finally:
                    self.cache_hook = hook

    return ProgressHFLM


def _row_key(ids: list[int], new_tokens: int, stop, kwargs: dict) -> str:
    """One generation row of the members' pass: the prompt's ids, the budget, the stops and lm-eval's
    other generation arguments."""
    text = json.dumps([ids, new_tokens, list(stop), sorted((k, repr(v)) for k, v in kwargs.items())])
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def _members_lm_class():
    """`MembersHFLM`, defined on first use (importing lm-eval's HF backend takes seconds)."""
    import torch

    class MembersHFLM(_progress_lm_class()):
        """lm-eval's HF model over a stacked multi-LoRA model: set `member`, then evaluate. A batch
        is generated for every member at once (the batch repeated per member, rows routed to their
        adapters) the first time any member asks for it; every member's generated ids are kept per row
        (`rows`, and with `store` a JSONL file appended after each batch, which a rerun reads back:
        `populora.bench.partial`), and the other members take theirs from there."""

        def __init__(self, multilora, tokenizer, members: list[str], batch_size: int, store: Path | None = None):
            super().__init__(pretrained=multilora.model, tokenizer=tokenizer, batch_size=batch_size)
            self.multilora, self.members, self.member = multilora, list(members), members[0]
            self.store = store
            self.generated: set[str] = set()
            self.asked: dict[str, set[str]] = {name: set() for name in self.members}
            self.rows = _read_store(store)  # row key -> member -> generated ids
            self.kept_rows = len(self.rows)

        def _model_generate(self, context, max_length, stop, **generation_kwargs) -> torch.Tensor:
            mask = generation_kwargs.pop("attention_mask", None)
            keys = _row_keys(context, mask, max_length, stop, generation_kwargs)
            self.asked[self.member].update(keys)
            missing = [r for r, key in enumerate(keys) if self.member not in self.rows.get(key, {})]
            if missing:
                self._generate_for_every_member(context, mask, missing, keys, max_length, stop, generation_kwargs)
            generated = [self.rows[key][self.member] for key in keys]
            return _with_generated(context, generated, self.tokenizer.pad_token_id)

        def _generate_for_every_member(self, context, mask, missing, keys, max_length, stop, generation_kwargs):
            """The batch's rows `missing` generated for every member at once, each through its adapter;
            kept in `rows` (and appended to `store`)."""
            rows, copies = context[missing], len(self.members)
            extra = dict(generation_kwargs)
            if mask is not None:
                extra["attention_mask"] = mask[missing].repeat(copies, 1)
            with self.multilora.select([name for name in self.members for _ in missing]):
                output = super()._model_generate(rows.repeat(copies, 1), max_length, stop, **extra)
            made = _ids_per_member(
                output, context.shape[1], self.members, [keys[r] for r in missing], self.tokenizer.pad_token_id
            )
            for key, outputs in made.items():
                self.rows.setdefault(key, {}).update(outputs)
            self.generated.update(made)
            if self.store is not None:
                _append_line(self.store, json.dumps(made))

        def unasked(self) -> dict[str, int]:
            """Rows this run generated that a member never asked for (members asking different batches: a bug)."""
            return {name: len(self.generated - asked) for name, asked in self.asked.items() if self.generated - asked}

    return MembersHFLM


def _read_store(store: Path | None) -> dict[str, dict[str, list[int]]]:
    """Every member's generated ids per row key that the members' pass kept in `store` (empty without one)."""
    rows: dict[str, dict[str, list[int]]] = {}
    for line in store.read_text().splitlines() if store is not None and store.is_file() else []:
        try:
            batch = json.loads(line)
        except json.JSONDecodeError:  # a line cut by a kill: its batch runs again
            continue
        for key, outputs in batch.items():
            rows.setdefault(key, {}).update(outputs)
    return rows


def _row_keys(context, mask, max_length: int, stop, generation_kwargs: dict) -> list[str]:
    """`_row_key` of each row of a left-padded batch: the prompt's ids are those the attention mask keeps,
    so a prompt has one key whatever the batch it lands in."""
    width = context.shape[1]
    return [
        _row_key(
            context[r][mask[r].bool()].tolist() if mask is not None else context[r].tolist(),
            max_length - width,
            stop,
            generation_kwargs,
        )
        for r in range(context.shape[0])
    ]


def _ids_per_member(output, width: int, members: list[str], keys: list[str], pad) -> dict[str, dict[str, list[int]]]:
    """Row key -> member -> generated ids, from a generation over the rows of `keys` repeated once per member
    (member by member) whose prompts were `width` wide."""
    made: dict[str, dict[str, list[int]]] = {}
    for m, name in enumerate(members):
        for k, key in enumerate(keys):
            ids = output[m * len(keys) + k, width:].tolist()
            while ids and ids[-1] == pad:  # the batch's padding, skipped when decoded anyway
                ids.pop()
            made.setdefault(key, {})[name] = ids
    return made


def _with_generated(context, generated: list[list[int]], pad):
    """The batch `context` with each row's generated ids after it, padded to the longest: what HF's
    `generate` returns and lm-eval's `_model_generate` callers expect."""
    import torch

    longest = max((len(ids) for ids in generated), default=0)
    tail = torch.full((len(generated), longest), pad, dtype=context.dtype, device=context.device)
    for r, ids in enumerate(generated):
        tail[r, : len(ids)] = torch.tensor(ids, dtype=context.dtype)
    return torch.cat([context, tail], dim=1)


def _append_line(path: Path, line: str) -> None:
    """One line appended and flushed to disk (a kill leaves at most a cut last line, skipped when read)."""
    with open(path, "a", encoding="utf-8") as handle:
        handle.write(line + "\n")
        handle.flush()
        os.fsync(handle.fileno())


def evaluate_members(
    benchmark: str,
    *,
    multilora,
    tokenizer,
    members: dict[str, Path],
    base_model: str | Path,
    adapters: dict[str, Path],
    data_dir: Path | None,
    limit: int | None,
    max_new_tokens: int,
    batch_size: int,
    tasks_dir: Path = TASKS_DIR,
    store: Path | None = None,
    log=log,
) -> dict[str, dict]:
    """Run one math benchmark for every member (name -> harness folder) of a stacked multi-LoRA
    model, generating for all of them in one pass; lm-eval's results dict per member, whose
    `config.model_args` names the base and the member's adapter as for the `hf` model. `store`: the
    file the pass keeps its generations in, batch by batch, and a rerun takes them back from."""
    metadata, gen_kwargs, manager = _prepare_task(
        benchmark, data_dir, max_new_tokens, tasks_dir, list(members.values())
    )
    lm = _members_lm_class()(multilora, tokenizer, list(members), batch_size, store=store)
    if lm.kept_rows:
        log.info("%s: %d generated rows kept from an earlier attempt (%s)", benchmark, lm.kept_rows, store)
    results = {}
    for name in members:
        where = (base_model, adapters[name], metadata["data_dir"])
        result = _evaluate_member(lm, name, benchmark, limit, manager, gen_kwargs, where)
        dtype = str(multilora.model.dtype).removeprefix("torch.")
        result["config"]["model_args"] = {
            **model_args(base_model, adapters[name], dtype),
            "stacked_with": list(members),
        }
        results[name] = result
    if lm.unasked():  # every member asks for the same rows; anything left means they did not
        raise BenchError(
            f"{benchmark}: lm-eval asked the members for different rows ({lm.unasked()} generated "
            "and never asked for); report this as a bug"
        )
    log.info(
        "%s: generated %d rows for %d member(s) (%d kept from an earlier attempt)",
        benchmark,
        len(lm.generated),
        len(members),
        lm.kept_rows,
    )
    return results


def _evaluate_member(lm, name: str, benchmark: str, limit: int | None, manager, gen_kwargs: dict, where: tuple):
    """lm-eval's results dict for the member `name` of the members' model `lm`. `where`: the base model, the
    member's adapter folder and the math data, for the message of a failure (the folder to re-export)."""
    base_model, adapter, math_data = where
    lm.member = name
    lm.progress_desc = f"{benchmark} {name} (lm-eval)"
    try:
        result = _simple_evaluate(benchmark, limit, manager, gen_kwargs, model=lm)
    except Exception as error:  # re-raised with the context a user needs
        raise BenchError(_explain(error, benchmark, f"{base_model} (members stacked)", adapter, math_data)) from error
    if result is None:
        raise BenchError(f"lm-eval returned no results for {benchmark} ({name})")
    return result


@contextlib.contextmanager
def _tqdm_on_in_children():
    """Processes started inside get tqdm on, still throttled by TQDM_MININTERVAL (`stages/__init__.py`).
    vLLM's offline `generate`, which lm-eval's vllm model calls with its bar on, divides by the bar's
    elapsed time, which a disabled bar leaves at 0 (ZeroDivisionError in
    vllm/entrypoints/common/offline.py). TQDM_DISABLE is set to "" rather than removed: a spawned child
    imports `stages` again, whose setdefault would turn it back on; tqdm reads "" as False."""
    before = os.environ.get("TQDM_DISABLE")
    os.environ["TQDM_DISABLE"] = ""
    try:
        yield
    finally:
        if before is None:
            del os.environ["TQDM_DISABLE"]
        else:
            os.environ["TQDM_DISABLE"] = before


def _record_task_files(tasks_dir: Path, harness_dir: Path, benchmark: str, metadata: dict, gen_kwargs: dict) -> None:
    """Copy the task files a run used, and the arguments given to lm-eval, into `harness_dir/tasks`."""
    (harness_dir / "tasks").mkdir(parents=True, exist_ok=True)
    for name in ("_populora_math.yaml", f"{task_name(benchmark)}.yaml", "utils.py"):
        shutil.copy2(tasks_dir / name, harness_dir / "tasks" / name)
    (harness_dir / "tasks" / "lm_eval_args.json").write_text(
        json.dumps(
            {"include_path": str(tasks_dir), "metadata": metadata, "gen_kwargs": gen_kwargs}, indent=1, sort_keys=True
        )
    )


def _explain(error: Exception, benchmark: str, base_model, adapter, math_data: str) -> str:
    text = f"{type(error).__name__}: {error}"
    lowered = text.lower()
    if adapter is not None and any(word in lowered for word in ("adapter", "peft", "safetensor", "lora")):
        fix = f"the adapter folder {adapter} does not load on {base_model}; re-run the export stage for this model"
    elif any(word in lowered for word in ("data_files", "filenotfound", "doesn't exist", "no such file")):
        fix = f"check the data location {math_data}"
    else:
        fix = "see the traceback above and lm-eval's messages in the stage log"
    model = f"{base_model}" + (f" + adapter {adapter}" if adapter is not None else "")
    return f"lm-eval failed on {benchmark} for {model} ({text}). Fix: {fix}."


def sample_rows(results: dict, benchmark: str) -> list[dict]:
    """Per-problem rows: question, gold, the model's response, the extracted answer, the verdict."""
    rows = []
    for sample in results["samples"][task_name(benchmark)]:
        response = sample["resps"][0][0] if sample["resps"] and sample["resps"][0] else ""
        doc = sample["doc"]
        arguments = sample.get("arguments") or [[""]]
        rows.append(
            {
                "doc_id": sample["doc_id"],
                "question": doc["populora_question"],
                "gold": doc["populora_gold"],
                "prompt": arguments[0][0],
                "response": response,
                "extracted": extract_answer(response, benchmark),
                "correct": bool(sample["accuracy"]),
            }
        )
    return sorted(rows, key=lambda row: row["doc_id"])


def accuracy(results: dict, benchmark: str) -> float:
    return float(results["results"][task_name(benchmark)]["accuracy,none"])


def stderr(results: dict, benchmark: str) -> float | None:
    """lm-eval's standard error of the accuracy (None when it reports none, e.g. N/A for one sample)."""
    value = results["results"][task_name(benchmark)].get("accuracy_stderr,none")
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value if value == value else None  # NaN -> None


def jsonable(value):
    """lm-eval's results hold numpy scalars, functions and NaN stderrs: a JSON-safe copy (NaN -> null)."""
    return json.loads(json.dumps(value, default=str), parse_constant=lambda _: None)


def evaluate_jsonable(benchmark: str, **kwargs) -> dict:
    """`evaluate` in a worker process (the `vllm` engine: one process per model): its result comes
    back pickled, so as its JSON-safe copy (lm-eval's own holds local functions)."""
    return jsonable(evaluate(benchmark, **kwargs))


# ---------------------------------------------------------------- the runner


def run(
    settings: BenchSettings, models: list[BenchModel], base_model: Path, out: Path, log, partial: Partial | None = None
) -> dict[str, dict]:
    """The lm-eval math task of every model; samples and lm-eval's own files under `out/<model>/`.
    The bare base runs as lm-eval's `hf` model; members share one generation pass (stacked adapters).
    With `partial` (`populora.bench.partial`) finished requests are kept there for a rerun: lm-eval's
    request cache per model, the members' pass its own store of every member's generations."""
    bench = settings.benchmark
    tasks_dir = settings.tasks_dir or TASKS_DIR  # settings_for without tasks_dir: evaluate's default
    log.info(
        "%s through lm-eval (%s, first %s problems), %d model(s)",
        bench,
        settings.data_dir or "official data",
        settings.limit or "all",
        len(models),
    )
    members = [model for model in models if model.adapter is not None]
    vllm = settings.sampler.lmeval_vllm_args()  # None: lm-eval's hf model and the project's stacked model
    runs: dict[str, dict] = {}
    start = time.perf_counter()
    if vllm is not None:
        runs = _evaluate_in_vllm_processes(settings, models, base_model, out, tasks_dir, vllm, partial)
        members = []  # every model has run: no stacked pass
    for model in models:
        if model.adapter is None and model.name not in runs:
            runs[model.name] = _evaluate_base(settings, model, base_model, out, tasks_dir, partial)
    if members:
        runs.update(_evaluate_members_in_one_pass(settings, members, base_model, out, tasks_dir, partial, log))
    run_s = time.perf_counter() - start  # the lm-eval runs whole, generation included
    results = {}
    for model in models:
        rows = _write_samples(runs[model.name], bench, out / model.name)
        results[model.name] = {
            "n": len(rows),
            "per_problem": {str(row["doc_id"]): int(row["correct"]) for row in rows},
            "metrics": {"accuracy": accuracy(runs[model.name], bench)},
            "stderr": {"accuracy": stderr(runs[model.name], bench)},
            "harness": f"lm_eval {version('lm_eval')}",
            "run_s": round(run_s, 1),
            "models_in_pass": len(members) if model.adapter is not None else 1,
            "data": data_source(settings.data_dir, relative_data_file(bench), OFFICIAL_MATH_DATA),
        }
    return results


def _evaluate_in_vllm_processes(
    settings: BenchSettings,
    models: list[BenchModel],
    base_model: Path,
    out: Path,
    tasks_dir: Path,
    vllm: dict,
    partial: Partial | None,
) -> dict[str, dict]:
    """Every model through lm-eval's own vllm model, one engine per model, each in a process of its own."""
    # an engine's memory (weights, KV cache reservation) is only given back when its process ends
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    runs = {}
    for model in models:
        with (
            _tqdm_on_in_children(),
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as pool,
        ):
            runs[model.name] = pool.submit(
                evaluate_jsonable,
                settings.benchmark,
                **_evaluate_arguments(settings, model, base_model, out, tasks_dir, partial),
                vllm=vllm,
            ).result()
    return runs


def _evaluate_base(
    settings: BenchSettings, model: BenchModel, base_model: Path, out: Path, tasks_dir: Path, partial: Partial | None
) -> dict:
    """A model without adapter through lm-eval's hf model."""
    return evaluate(settings.benchmark, **_evaluate_arguments(settings, model, base_model, out, tasks_dir, partial))


def _evaluate_arguments(
    settings: BenchSettings, model: BenchModel, base_model: Path, out: Path, tasks_dir: Path, partial: Partial | None
) -> dict:
    """`evaluate`'s arguments for one model (its adapter, its harness folder, its resume cache)."""
    return {
        "base_model": base_model,
        "adapter": model.adapter,
        "data_dir": settings.data_dir,
        "limit": settings.limit,
        "max_new_tokens": settings.max_new_tokens,
        "batch_size": settings.batch_size,
        "dtype": settings.dtype,
        "device": settings.device,
        "harness_dir": out / model.name / "harness",
        "tasks_dir": tasks_dir,
        "cache": partial.lm_eval_cache(model) if partial is not None else None,
    }


def _evaluate_members_in_one_pass(
    settings: BenchSettings,
    members: list[BenchModel],
    base_model: Path,
    out: Path,
    tasks_dir: Path,
    partial: Partial | None,
    log,
) -> dict[str, dict]:
    """Every member through lm-eval in one generation pass of the base with their adapters stacked."""
    adapters = {m.name: m.adapter for m in members if m.adapter is not None}
    tokenizer, multilora = settings.load_model(base_model, adapters)
    return evaluate_members(
        settings.benchmark,
        multilora=multilora,
        tokenizer=tokenizer,
        members={m.name: out / m.name / "harness" for m in members},
        base_model=base_model,
        adapters=adapters,
        data_dir=settings.data_dir,
        limit=settings.limit,
        max_new_tokens=settings.max_new_tokens,
        batch_size=settings.batch_size,
        tasks_dir=tasks_dir,
        store=partial.members_store(members) if partial is not None else None,
        log=log,
    )


def _write_samples(run: dict, bench: str, folder: Path) -> list[dict]:
    """One model's samples.jsonl and lm-eval's own samples and results under `folder`; returns the sample rows."""
    rows = sample_rows(run, bench)
    write_jsonl(folder / "samples.jsonl", rows)
    write_jsonl(folder / "harness" / "lm_eval_samples.jsonl", jsonable(run["samples"][task_name(bench)]))
    write_json(folder / "harness" / "results.json", jsonable({k: v for k, v in run.items() if k != "samples"}))
    return rows
