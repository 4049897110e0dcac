"""`model.dtype: auto`: bfloat16 where the hardware computes it natively, float32 elsewhere.

On a CPU, bfloat16 matmuls are fast only with native instructions: `avx512_bf16` (AVX-512 BF16,
Cooper Lake / Zen 4 and later) or AMX (`amx_bf16`, Sapphire Rapids and later). There torch's CPU
matmul at SmolLM2's shapes runs 2.2-2.7x the float32 rate (issue 48); without them bfloat16 is
emulated and slower than float32. On CUDA, bfloat16 where the device supports it. The choice and
its reason are logged and recorded with the run (`runtime_record`), because `auto` can differ
between machine kinds: a study pins `float32` or `bfloat16` in its params instead.

Only the frozen base weights (and the sampler's stacked LoRA factors) take this dtype: the update's
trainable LoRA weights and AdamW moments stay float32 (PEFT keeps adapter weights of a bf16 base in
float32, `autocast_adapter_dtype`), as on a GPU.

    python -m populora.lm.dtype          # what `auto` picks here, and why
"""

from __future__ import annotations

import functools
import logging
import platform

log = logging.getLogger(__name__)

BF16_CPU_FLAGS = ("avx512_bf16", "amx_bf16")
RECORDED_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16", "amx_int8", "avx512_fp16")


@functools.lru_cache(maxsize=1)
def cpu_info() -> tuple[str, frozenset[str]]:
    """(CPU model name, its feature flags) from /proc/cpuinfo; ('', {}) where there is none."""
    name = platform.processor() or platform.machine()
    flags: frozenset[str] = frozenset()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and value.strip():
                    name = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = frozenset(value.split())
    except OSError:
        pass
    return name, flags


def resolve_dtype(requested: str, device: str = "cpu") -> tuple[str, str]:
    """(dtype name, reason) for `model.dtype` on `device` ('cpu', 'cuda', 'auto')."""
    if requested != "auto":
        return requested, "pinned in params (model.dtype)"
    import torch

    if device == "cuda" or (device == "auto" and torch.cuda.is_available()):
        if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
            return "bfloat16", f"auto: {torch.cuda.get_device_name()} supports bfloat16"
        return "float32", "auto: the CUDA device has no bfloat16"
    _, flags = cpu_info()
    native = [flag for flag in BF16_CPU_FLAGS if flag in flags]
    if native:
        return "bfloat16", f"auto: the CPU has {' and '.join(native)} (native bfloat16 matmuls)"
    return "float32", f"auto: the CPU has none of {', '.join(BF16_CPU_FLAGS)} (bfloat16 would be emulated)"


def runtime_record(requested: str, device: str = "cpu") -> dict:
    """What a run records about the numbers it computed with: the dtype, why, and the CPU's flags."""
    import torch

    dtype, reason = resolve_dtype(requested, device)
    name, flags = cpu_info()
    return {
        "dtype": dtype,
        "dtype_requested": requested,
        "dtype_reason": reason,
        "cpu": name,
        "cpu_flags": [flag for flag in RECORDED_FLAGS if flag in flags],
        "torch": torch.__version__,
    }


def log_choice(requested: str, device: str = "cpu") -> str:
    """Resolve and log the dtype (once per process and request); returns the dtype name."""
    dtype, reason = resolve_dtype(requested, device)
    _log_once(requested, device, dtype, reason)
    return dtype


@functools.lru_cache(maxsize=8)
def _log_once(requested: str, device: str, dtype: str, reason: str) -> None:
    log.info("model dtype %s (%s)", dtype, reason)


if __name__ == "__main__":
    import json

    print(json.dumps(runtime_record("auto"), indent=2))
