"""A tiny randomly initialised Llama + tokenizer folder for tests (no download)."""

from __future__ import annotations

import json
from pathlib import Path

import torch


def tiny_model_dir(out_dir: str | Path, *, seed: int = 0, hidden_size: int = 32, heads: int = 4) -> Path:
    """Build a tiny randomly initialised Llama + tokenizer folder for tests (no download).

    vLLM's CPU attention needs a head size of 32 or more: its tests pass hidden_size=64, heads=2.

    The tokenizer is a byte-level BPE trained in memory on a small Python-flavoured corpus, with
    a ChatML chat template like SmolLM2's, so prompts, stop strings and parsing behave as with
    the real model, only the weights are random.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out_dir = Path(out_dir)
    if (out_dir / "config.json").is_file():
        return out_dir
    torch.manual_seed(seed)
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [
        "```python\ndef f(a, b):\n    return a + b\n```\n```input\n1, 2\n```\n```output\n3\n```",
        "def f(name: str, info: dict):\n    return name.upper() + str(len(info))",
        "```message\nWrite a function that returns whatever you input\n```",
        "A conversation between User and Assistant. <think> </think> <answer> </answer>",
        "'Hello world', [1, 2, 3], {'age': 20}, (1.1, 1.2), True, None, for x in range(10): if x % 2 == 0",
    ] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=400, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    chat_template = (
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token="<|im_start|>",
        unk_token="<|endoftext|>",
    )
    tokenizer.chat_template = chat_template
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=2,
        num_attention_heads=heads,
        num_key_value_heads=max(1, heads // 2),
        max_position_embeddings=2048,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(config)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    (out_dir / "populora_source.json").write_text(json.dumps({"source": "tiny-random", "seed": seed}) + "\n")
    return out_dir


def export_members(tmp_path: Path, tiny_model_dir: Path, seeds: dict[str, int]) -> Path:
    """An arm's export folder as stages/export.py writes it: <slot>/model.json + <slot>/adapter/,
    each adapter random noise (seeded), so members answer differently from the base and each other."""
    from populora.core.refs import STUDENT, TEACHER, ModelRef
    from populora.lm.adapters import create_adapters
    from populora.lm.model import load_base, lora_config

    models = tmp_path / "models" / "population"
    _, base = load_base(tiny_model_dir, device="cpu")
    for slot, seed in seeds.items():
        create_adapters(
            base,
            ["adapter"],
            models / slot,
            lora_cfg=lora_config(4, 8.0, 0.0, ["q_proj", "v_proj"]),
            seeds={"adapter": seed},
            init_std=0.5,
        )  # noise: the adapter changes the answers
        ref = ModelRef("population", slot, STUDENT if slot.startswith(STUDENT) else TEACHER)
        (models / slot / "model.json").write_text(
            json.dumps({**ref.fields(), "adapter": "adapter", "member": f"population/{slot}@g000"})
        )
    return models
