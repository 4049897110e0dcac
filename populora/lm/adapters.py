"""Create, read and write PEFT adapter folders (adapter_model.safetensors + adapter_config.json).

An adapter folder is the unit everything passes around: lm-eval's `peft=`, evalplus codegen,
the evolution operators (which work on its state dict) and PeftModel.from_pretrained.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import save_file

from populora.core.io import naming, write_point
from populora.core.paths import ADAPTER_CONFIG, ADAPTER_WEIGHTS

WEIGHTS, CONFIG = ADAPTER_WEIGHTS, ADAPTER_CONFIG


def create_adapters(
    model, slots: list[str], out_dir: Path, *, lora_cfg, seeds: dict[str, int], init_std: float
) -> None:
    """Write one freshly initialised adapter per slot to out_dir/<slot>/.

    PEFT's init (A ~ Kaiming-uniform, B = 0) makes every member start as the base model; with
    `init_std > 0`, B gets seeded Gaussian noise so members differ from the start.
    """
    from peft import get_peft_model

    peft_model = get_peft_model(model, lora_cfg)
    for slot in slots:
        torch.manual_seed(seeds[slot])
        for module in peft_model.modules():
            if hasattr(module, "reset_lora_parameters") and "default" in getattr(module, "lora_A", {}):
                module.reset_lora_parameters("default", True)
                if init_std > 0:
                    torch.nn.init.normal_(module.lora_B["default"].weight, std=init_std)
        tmp = out_dir / f".{slot}.tmp"
        peft_model.save_pretrained(tmp)
        normalize_config(tmp)
        shutil.move(str(tmp), str(out_dir / slot))
    peft_model.unload()  # give the caller its plain base model back


def normalize_config(folder: str | Path) -> None:
    """Rewrite adapter_config.json byte-stably: PEFT stores target_modules from a set, so their
    order follows Python's per-process hash seed and identical adapters would differ on disk."""
    path = Path(folder) / CONFIG
    config = json.loads(path.read_text())
    if isinstance(config.get("target_modules"), list):
        config["target_modules"] = sorted(config["target_modules"])
    path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")


def read_state_dict(folder: str | Path) -> dict[str, torch.Tensor]:
    from populora.core.io import load_safetensors  # fails naming the file and the fix when it is damaged

    return load_safetensors(Path(folder) / WEIGHTS)


def write_adapter(folder: str | Path, state: dict[str, torch.Tensor], config_from: str | Path) -> None:
    """Write `state` as an adapter folder, copying the adapter_config.json of `config_from`."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    with naming(folder / WEIGHTS):
        save_file({k: v.contiguous() for k, v in state.items()}, str(folder / WEIGHTS))
    write_point("adapter weights written", folder / WEIGHTS)
    shutil.copy(Path(config_from) / CONFIG, folder / CONFIG)


def copy_adapter(src: str | Path, dst: str | Path) -> None:
    dst = Path(dst)
    dst.mkdir(parents=True, exist_ok=True)
    for name in (WEIGHTS, CONFIG):
        shutil.copy(Path(src) / name, dst / name)


def save_trained_adapter(peft_model, slot: str, dst: str | Path) -> None:
    """Save one adapter of a (possibly multi-adapter) PeftModel as a plain PEFT folder at `dst`
    (`adapter_model.safetensors` + normalised `adapter_config.json`). PEFT writes a non-default
    adapter into a subfolder named after it; this puts either layout at `dst`."""
    dst = Path(dst)
    scratch = dst.parent / f".{dst.name}.save"
    shutil.rmtree(scratch, ignore_errors=True)
    with naming(dst / WEIGHTS):
        peft_model.save_pretrained(scratch, selected_adapters=[slot])
    saved = scratch / slot if (scratch / slot).is_dir() else scratch
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(saved), str(dst))
    normalize_config(dst)
    shutil.rmtree(scratch, ignore_errors=True)
    write_point("adapter saved", dst)


def delta_norm(state: dict[str, torch.Tensor]) -> float:
    """How far an adapter has moved its model from the base: the sum over adapted modules of
    ||B A||_F (the LoRA update before PEFT's constant alpha / r scaling). Unlike max |B|, it does
    not depend on how the factors are split (operators refactor B A with sqrt of the singular
    values). Computed from r x r Gram matrices: ||B A||_F^2 = trace((B^T B)(A A^T))."""
    total = 0.0
    for name, a in state.items():
        if "lora_A" not in name:
            continue
        b = state[name.replace("lora_A", "lora_B")].double()
        a = a.double()
        total += float(torch.trace((b.T @ b) @ (a @ a.T)).clamp(min=0).sqrt())
    return total


def carry_moments(src: str | Path, dst: str | Path, src_slot: str, dst_slot: str) -> bool:
    """Write the AdamW moments file `src` (saved for adapter `src_slot`) as `dst`, for adapter `dst_slot`;
    False when `src` holds none (an adapter that has taken no step yet: `dst` then starts fresh, as it).

    The update keys moments by parameter name, which holds the adapter's name (`...lora_A.<slot>.weight.exp_avg`):
    a child born into another slot takes its parent's moments under its own names, or it would find
    none and start fresh without a word."""
    from populora.core.io import load_safetensors

    old, new = f".{src_slot}.", f".{dst_slot}."
    tensors = {key.replace(old, new): value.contiguous() for key, value in load_safetensors(Path(src)).items()}
    if tensors and old != new and not any(new in key for key in tensors):
        raise ValueError(f"{src}: no moments of adapter {src_slot!r} (keys like {next(iter(tensors))!r})")
    Path(dst).parent.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(dst))
    return bool(tensors)
