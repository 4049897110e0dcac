"""The checkpoint folder a generation starts from, and what it holds.

    <checkpoint>/state.json         arm, generation, members per slot, ratings, lineage, counters
    <checkpoint>/buffer.jsonl       every valid task so far (seeds first), one row per task
    <checkpoint>/adapters/<slot>/   PEFT adapter (adapter_model.safetensors + adapter_config.json)
    <checkpoint>/optimizer/<slot>.safetensors   AdamW moments, so a resumed run continues exactly

`results/<arm>/init` and `results/<arm>/genNNN/checkpoint` share this layout.
"""

from __future__ import annotations

from pathlib import Path

from populora.io import read_json, read_jsonl

STATE = "state.json"
BUFFER = "buffer.jsonl"
ADAPTERS = "adapters"
OPTIMIZER = "optimizer"


def load_state(folder: str | Path) -> dict:
    return read_json(Path(folder) / STATE)


def load_buffer(folder: str | Path) -> list[dict]:
    return read_jsonl(Path(folder) / BUFFER)


def adapter_dirs(folder: str | Path, slots: list[str]) -> dict[str, Path]:
    return {slot: Path(folder) / ADAPTERS / slot for slot in slots}

