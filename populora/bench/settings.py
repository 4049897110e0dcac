"""Everything one benchmark run needs from params.yaml, resolved once by the bench stage.

    settings = settings_for(params, "cruxeval_o", tasks_dir=TASKS_DIR)
    results = run_benchmark(settings, models, base_model, out, log)      # populora/bench/runners.py

`settings_for` is the only place a benchmark's limit (`bench.limits[<b>]`, else `bench.limit`),
its answer cap (CRUXEval: `bench.cruxeval.max_new_tokens`, else `bench.max_new_tokens`), its data
folder and its runner are worked out; the runners read the frozen `BenchSettings` and never the
params sections. The generation engine comes resolved too: `sampler` is what
`populora.lm.engines.pick_sampler` picked from `sampler.engine` (with its dtype, device, LoRA rank),
the same engine as in training.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from populora.bench import LIVECODEBENCH_BENCHMARKS, BenchError, benchmark_kind, resolve_data_dir

if TYPE_CHECKING:  # only for the annotations: the stage validated these sections before
    from populora.config import CruxevalSection, LiveCodeBenchSection, VerifySection
    from populora.lm.engines import HfSampler, VllmSampler

# which runner scores a benchmark, by its kind (LiveCodeBench is a code benchmark with its own runner)
RUNNER_OF_KIND = {"code": "evalplus", "math": "lm_eval", "cruxeval": "cruxeval"}


def runner_of(benchmark: str) -> str:
    """`evalplus`, `lm_eval`, `cruxeval` or `livecodebench`."""
    return "livecodebench" if benchmark in LIVECODEBENCH_BENCHMARKS else RUNNER_OF_KIND[benchmark_kind(benchmark)]


@dataclass(frozen=True)
class BenchSettings:
    """One benchmark's resolved settings (see the module docstring)."""

    benchmark: str
    runner: str
    limit: int | None  # the first `limit` problems in file order; None: all
    max_new_tokens: int  # the answer cap of this benchmark
    batch_size: int
    data_dir: Path | None  # None: the official downloads
    solve_mode: str  # CRUXEval with the project's prompt answers as the students do (`solve.mode`)
    cruxeval: CruxevalSection  # frozen: sections are validated pydantic models
    livecodebench: LiveCodeBenchSection
    verify: VerifySection  # the sandbox that grades CRUXEval and LiveCodeBench
    sampler: HfSampler | VllmSampler  # the engine sampler.engine picked (populora.lm.engines)
    dtype: str  # lm-eval's own hf model (the bare base on math)
    device: str
    tasks_dir: Path | None = None  # lm-eval task templates (math)

    def load_model(self, base_model: Path, adapters: dict[str, Path]):
        """Tokenizer and sampler of `sampler.engine`: the base with `adapters` (name -> PEFT folder)
        stacked on it (hf) or served as LoRA requests (vllm); every adapter at once, rows pick theirs.
        With hf the process keeps the last model it loaded and hands it out again for the same base,
        adapters and engine settings (a job running several benchmarks loads it once: stages/bench_together.py)."""
        key = (self.sampler, _files(base_model), tuple(sorted((name, _files(path)) for name, path in adapters.items())))
        if self.sampler.name == "hf" and key in _LOADED:
            return _LOADED[key]
        _LOADED.clear()  # one model at a time
        try:
            loaded = self.sampler.load(base_model, adapters)
        except Exception as error:  # safetensors, PEFT and transformers raise many kinds
            memory = "memory" in str(error).lower()
            fix = (
                "raise sampler.memory_fraction (vLLM reserves that share of the device's memory, its own process "
                "included on the CPU) or free memory"
                if memory
                else "re-run the base_model / export stages; an "
                "adapter must come from the same base model and LoRA settings"
            )
            raise BenchError(
                f"model {', '.join(adapters) or 'base'} did not load (base {base_model}, adapters "
                f"{', '.join(map(str, adapters.values())) or 'none'}): "
                f"{type(error).__name__}: {error}. Fix: {fix}."
            ) from error
        if self.sampler.name == "hf":  # vLLM: an engine's memory is only given back when its process ends
            _LOADED[key] = loaded
        return loaded


# the model this process loaded last (hf engine), by (sampler, base folder, adapters): see BenchSettings.load_model
_LOADED: dict[tuple, tuple] = {}


def _files(folder: str | Path) -> tuple:
    """A folder as the key of what was loaded from it: its path and files (names, sizes, modification times)."""
    folder = Path(folder).resolve()
    files = (
        sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file())
        if folder.is_dir()
        else []
    )
    return str(folder), tuple(files)


def settings_for(params, benchmark: str, tasks_dir: str | Path | None = None) -> BenchSettings:
    """Resolve `benchmark`'s settings from validated params (see the module docstring)."""
    from populora.lm.engines import pick_sampler
    from populora.lm.model import pick_device

    cruxeval = benchmark_kind(benchmark) == "cruxeval"
    sampler = pick_sampler(params)
    return BenchSettings(
        benchmark=benchmark,
        runner=runner_of(benchmark),
        limit=params.bench.limit_of(benchmark),
        max_new_tokens=params.bench.cruxeval.max_new_tokens if cruxeval else params.bench.max_new_tokens,
        batch_size=params.bench.batch_size,
        data_dir=resolve_data_dir(params.bench.data_dir),
        solve_mode=params.solve.mode,
        cruxeval=params.bench.cruxeval,
        livecodebench=params.bench.livecodebench,
        verify=params.verify,
        sampler=sampler,
        dtype=sampler.dtype,
        device=str(pick_device(params.model.device)),
        tasks_dir=Path(tasks_dir) if tasks_dir else None,
    )
