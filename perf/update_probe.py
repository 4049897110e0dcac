"""Peak memory and time of the paper overlay's update at a model's shape: random weights, no download.

    python perf/update_probe.py --shape qwen2-7b --json perf/measured/update_probe_7b.json     # on a GPU
    python perf/update_probe.py --shape tiny --device cpu --runs 2x64,1x128 --json /tmp/probe.json   # here

params/gpu-paper.yaml's update: the base in bf16 (built on the device in code, `perf/generation.py`'s
SHAPES), rank-16 LoRA on all 7 linear modules (float32, Adam), Accelerate's bf16 autocast, gradient
checkpointing, one optimizer step (`populora.rl.update.reinforce_steps`) per run of ROWSxTOKENS
(default 8 x 1,024 and 1 x 8,192: 8,192 tokens per micro-batch either way, update.max_seq_len). Writes, per
run, the seconds and the peak memory (CUDA: torch.cuda.max_memory_allocated; CPU: the process's peak RSS),
with the device, the versions and the command. tests/test_engine_gpu.py and scripts/device_check.sh run it.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import sys
import time
from datetime import date
from pathlib import Path
from types import SimpleNamespace

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from generation import SHAPES  # perf/generation.py: the model shapes

from populora.lm.model import lora_config

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def build(shape: str, device: torch.device):
    """A bf16 model of `shape`, random weights, made on `device` (no float32 copy on the way)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    family, dims = SHAPES[shape]
    config_cls, model_cls = (LlamaConfig, LlamaForCausalLM) if family == "llama" else (Qwen2Config, Qwen2ForCausalLM)
    torch.manual_seed(0)
    with device:
        model = model_cls._from_config(config_cls(**dims, max_position_embeddings=32768), dtype=torch.bfloat16)
    return model.requires_grad_(False)


def peak_bytes(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated()
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def probe(shape: str, device: torch.device, runs: list[tuple[int, int]], rank: int = 16) -> dict:
    """One optimizer step per (rows, tokens) run; the seconds and the peak memory of each."""
    from accelerate import Accelerator
    from peft import get_peft_model

    from populora.config import UpdateSection
    from populora.rl.update import reinforce_steps

    model = build(shape, device)
    weights = sum(p.numel() * p.element_size() for p in model.parameters())
    model = get_peft_model(model, lora_config(rank, 2.0 * rank, 0.0, TARGETS), adapter_name="probe")
    accelerator = Accelerator(mixed_precision="bf16", cpu=device.type == "cpu")
    model = accelerator.prepare_model(model)
    vocab, window = model.config.vocab_size, max(rows * tokens for rows, tokens in runs)
    longest = max(tokens for _, tokens in runs)
    results = []
    for rows, length in runs:
        half = length // 2
        rollouts = [
            {
                "role": "solve",
                "advantage": 1.0 if i % 2 else -1.0,
                "reward": None,
                "segments": [
                    {"text": "", "train": False, "ids": torch.randint(0, vocab, (half,)).tolist()},
                    {
                        "text": "",
                        "train": True,
                        "ids": torch.randint(0, vocab, (half,)).tolist(),
                        "keep": half,
                        "logprobs": [None] * half,
                        "sampling": {"temperature": 1.0, "top_p": 1.0, "suppress_first": None},
                    },
                ],
            }
            for i in range(rows)
        ]
        config = UpdateSection(
            steps=1,
            learning_rate=1e-5,
            micro_batch=rows,
            max_seq_len=longest,
            max_tokens_per_micro_batch=window,
            gradient_checkpointing=True,
            mixed_precision="bf16",
        )
        if device.type == "cuda":
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        stats = reinforce_steps(
            accelerator,
            model,
            SimpleNamespace(pad_token_id=0),
            "probe",
            rollouts,
            config,
            optimizer_file=None,
            optimizer_out=None,
        )
        if device.type == "cuda":
            torch.cuda.synchronize()
        results.append(
            {
                "rows": rows,
                "tokens_per_row": length,
                "optimizer_steps": stats["optimizer_steps"],
                "seconds": round(time.perf_counter() - start, 2),
                "max_memory_allocated_bytes": peak_bytes(device),
                "max_memory_allocated_gib": round(peak_bytes(device) / 2**30, 2),
            }
        )
    return {"weights_bytes": weights, "runs": results}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", choices=sorted(SHAPES), default="qwen2-7b")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--runs", default="8x1024,1x8192", help="ROWSxTOKENS,...: one optimizer step each")
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--json", required=True)
    args = parser.parse_args(argv)
    import transformers

    device = torch.device(args.device)
    runs = [tuple(int(x) for x in run.split("x")) for run in args.runs.split(",")]
    measured = probe(args.shape, device, runs, args.rank)
    record = {
        "date": date.today().isoformat(),
        "host": platform.node(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "transformers": transformers.__version__,
        "device": torch.cuda.get_device_name(0) if device.type == "cuda" else platform.machine(),
        "command": "python perf/update_probe.py " + " ".join(argv or sys.argv[1:]),
        "what": f"params/gpu-paper.yaml's update at the {args.shape} shape, random bf16 weights; LoRA rank {args.rank} "
        "on q,k,v,o,gate,up,down (fp32, Adam); bf16 autocast; gradient checkpointing; one optimizer step per run",
        "peak_memory_kind": "cuda max_memory_allocated" if device.type == "cuda" else "process peak RSS",
        **measured,
    }
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    for run in measured["runs"]:
        print(
            f"{run['rows']} x {run['tokens_per_row']} tokens: {run['seconds']} s, peak {run['max_memory_allocated_gib']} GiB"
        )
    return 0 if all(run["optimizer_steps"] == 1 for run in measured["runs"]) else 1


if __name__ == "__main__":
    raise SystemExit(main())
