"""Old code against new at the study's solve shape: the sampler's tokens per second, side by side.

Each measurement is a child process that imports `populora` from one source tree (`--old`: a
`git worktree` of the commit before, `--new`: this checkout), builds the same random-weight model of
`--shape` in `--dtype` with the same 4 random LoRA adapters (rank 8, q/k/v/o), and times one
`populora.lm.sampling.sample_batch` call (after a small warm-up call) on the solve shape:

    --prompts 4 prompts, one per adapter (a student each), of ~300 tokens (`--prompt-tokens`, +-25 on the
    part of their own) that share their first `--shared-prefix` tokens (instruction + worked example),
    `--samples` 8 samples of each (32 rows in one batch, as solve.batch_size), `--tokens` 48 new
    tokens per row (EOS off), temperature 0.5.

Each child runs `--threads` torch threads (default 1: the CPU pipeline's model stages take one thread
each, two side by side; on a busy machine two threads also stall each other at every barrier).
Children run interleaved (old, new, old, new, ... per dtype, `--repeats` rounds) so that load on the
machine falls on both alike; medians and the ratio old/new of the seconds (= new/old tokens per
second) are written with the commits and the CPU's flags:

    python perf/generation_speedup.py --old /tmp/populora-old --repeats 3 --dtypes float32 bfloat16 \
        --json perf/measured/generation_speedup.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve()
SHAPES = {
    "smollm2-135m": dict(
        vocab_size=49152,
        hidden_size=576,
        intermediate_size=1536,
        num_hidden_layers=30,
        num_attention_heads=9,
        num_key_value_heads=3,
        tie_word_embeddings=True,
    ),
    "tiny": dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=True,
    ),
}


def workload(args, vocab: int) -> tuple[list[list[int]], list[str]]:
    """(contexts, adapter per row): prompts sharing a prefix, each repeated `samples` times."""
    import torch

    g = torch.Generator().manual_seed(0)
    prefix = torch.randint(1, vocab, (args.shared_prefix,), generator=g).tolist()
    own = args.prompt_tokens - args.shared_prefix
    contexts, adapters = [], []
    for p in range(args.prompts):
        length = int(torch.randint(own - 25, own + 26, (1,), generator=g))
        prompt = prefix + torch.randint(1, vocab, (length,), generator=g).tolist()
        contexts += [prompt] * args.samples
        adapters += [f"a{p % args.adapters}"] * args.samples
    return contexts, adapters


def child(args) -> dict:
    """One timed call in this process, `populora` imported from PYTHONPATH (the tree measured)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    import populora
    from populora.lm.model import lora_config
    from populora.lm.multilora import attach_multilora
    from populora.lm.sampling import sample_batch

    dtype = getattr(torch, args.dtype)
    config = LlamaConfig(
        **SHAPES[args.shape], max_position_embeddings=4096, bos_token_id=None, eos_token_id=None, pad_token_id=0
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(dtype).eval().requires_grad_(False)
    model.generation_config.eos_token_id = None
    from peft import get_peft_model

    with tempfile.TemporaryDirectory() as tmp:
        peft_model = get_peft_model(model, lora_config(8, 16.0, 0.0, ["q_proj", "k_proj", "v_proj", "o_proj"]))
        folders = {}
        for i in range(args.adapters):
            torch.manual_seed(1000 + i)
            for name, parameter in peft_model.named_parameters():
                if "lora_" in name:
                    torch.nn.init.normal_(parameter, std=0.02)
            folders[f"a{i}"] = Path(tmp) / f"a{i}"
            peft_model.save_pretrained(folders[f"a{i}"])
        model = peft_model.unload()
        stacked = attach_multilora(model, folders)
    contexts, adapters = workload(args, config.vocab_size)

    class Tok:
        pad_token_id, eos_token_id = 0, None

    def run(rows: list[int], budget: int):
        start = time.perf_counter()
        out = sample_batch(
            stacked,
            Tok(),
            [contexts[i] for i in rows],
            budget=budget,
            stops=(),
            suppress_first=None,
            temperature=0.5,
            top_p=1.0,
            generator=torch.Generator().manual_seed(0),
            adapters=[adapters[i] for i in rows],
        )
        return time.perf_counter() - start, out

    run([0, 1], 4)  # warm-up: kernels, allocator
    seconds, out = run(list(range(len(contexts))), args.tokens)
    return {
        "tree": str(Path(populora.__file__).resolve().parents[1]),
        "dtype": args.dtype,
        "seconds": seconds,
        "tok_s": len(contexts) * args.tokens / seconds,
        "first_ids": out[0].ids[:8],
        "logprob_sum": sum(sum(s.logprobs) for s in out),
        "threads": torch.get_num_threads(),
    }


def git_commit(tree: Path) -> str:
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout.strip()
    return head.stdout.strip() + ("+dirty" if dirty else "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old", type=Path, help="source tree of the code before (a git worktree)")
    parser.add_argument("--new", type=Path, default=HERE.parents[1])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--adapters", type=int, default=4)
    parser.add_argument("--prompt-tokens", type=int, default=300)
    parser.add_argument("--shared-prefix", type=int, default=200)
    parser.add_argument("--tokens", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads per child (the CPU stages run one thread each, side by side)",
    )
    parser.add_argument("--dtype", default="float32", help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return 0
    if args.old is None or args.json is None:
        parser.error("--old and --json are needed (the child mode is internal)")
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    shape_args = [
        "--shape",
        args.shape,
        "--prompts",
        str(args.prompts),
        "--samples",
        str(args.samples),
        "--adapters",
        str(args.adapters),
        "--prompt-tokens",
        str(args.prompt_tokens),
        "--shared-prefix",
        str(args.shared_prefix),
        "--tokens",
        str(args.tokens),
    ]
    commits = {name: git_commit(tree) for name, tree in trees.items()}  # before: the trees may change meanwhile
    runs: dict[str, dict[str, list[dict]]] = {d: {"old": [], "new": []} for d in args.dtypes}
    for repeat in range(args.repeats):
        for dtype in args.dtypes:
            for name, tree in trees.items():
                env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(args.threads)}
                done = subprocess.run(
                    [sys.executable, str(HERE), "--child", "--dtype", dtype, *shape_args],
                    env=env,
                    cwd=tree,
                    capture_output=True,
                    text=True,
                    check=True,
                )
                row = json.loads(done.stdout.strip().splitlines()[-1])
                runs[dtype][name].append(row)
                print(f"repeat {repeat} {dtype} {name}: {row['seconds']:.2f} s, {row['tok_s']:.1f} tok/s", flush=True)
    from populora.lm.dtype import cpu_info

    cpu, flags = cpu_info()
    result = {
        "shape": args.shape,
        "prompts": args.prompts,
        "samples_per_prompt": args.samples,
        "rows": args.prompts * args.samples,
        "adapters": args.adapters,
        "prompt_tokens": args.prompt_tokens,
        "shared_prefix_tokens": args.shared_prefix,
        "new_tokens_per_row": args.tokens,
        "repeats": args.repeats,
        "commits": commits,
        "cpu": cpu,
        "cpu_flags": sorted(f for f in flags if f.startswith(("avx512", "amx", "avx2"))),
        "threads": runs[args.dtypes[0]]["new"][0]["threads"],
        "by_dtype": {},
    }
    for dtype, by_tree in runs.items():
        median = {name: statistics.median(r["seconds"] for r in rows) for name, rows in by_tree.items()}
        result["by_dtype"][dtype] = {
            "seconds": {name: [round(r["seconds"], 3) for r in rows] for name, rows in by_tree.items()},
            "median_s": {name: round(value, 3) for name, value in median.items()},
            "tok_s": {name: round(result["rows"] * args.tokens / value, 1) for name, value in median.items()},
            "speedup": round(median["old"] / median["new"], 2),
            "same_first_tokens": by_tree["old"][0]["first_ids"] == by_tree["new"][0]["first_ids"],
            "logprob_sum": {name: round(rows[0]["logprob_sum"], 4) for name, rows in by_tree.items()},
        }
    if "float32" in runs and "bfloat16" in runs:
        f32, bf16 = (statistics.median(r["seconds"] for r in runs[d]["old"]) for d in ("float32", "bfloat16"))
        new_bf16 = statistics.median(r["seconds"] for r in runs["bfloat16"]["new"])
        result["speedup_old_float32_over_new_bfloat16"] = round(f32 / new_bf16, 2)
        result["old_float32_over_old_bfloat16"] = round(f32 / bf16, 2)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({d: v["speedup"] for d, v in result["by_dtype"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
