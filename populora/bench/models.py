"""The models one benchmark stage runs: the bare base, or the final members an arm's export folder
holds (`<slot>/model.json` + `<slot>/adapter/`), each with who it is (`ModelRef`) and its adapter.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from populora.bench import BenchError
from populora.core.io import read_json
from populora.core.paths import MODEL_DESCRIPTION
from populora.core.refs import BASE_REF, ModelRef


@dataclass(frozen=True)
class BenchModel:
    """One benchmarked model: the base, or an arm's slot (`ref`) with its exported adapter folder."""

    ref: ModelRef
    adapter: Path | None = None
    member: str | None = None  # the lineage id of the member (None for the base)

    @property
    def name(self) -> str:
        return self.ref.name

    @property
    def adapters(self) -> dict[str, Path]:
        return {self.name: self.adapter} if self.adapter is not None else {}


def base_model_entry() -> BenchModel:
    return BenchModel(BASE_REF)


def exported_models(models_dir: Path) -> list[BenchModel]:
    """The members an export folder holds (`<slot>/model.json` + `<slot>/adapter/`), by slot name."""
    folders = sorted(path.parent for path in Path(models_dir).glob(f"*/{MODEL_DESCRIPTION}"))
    if not folders:
        raise BenchError(
            f"{models_dir} holds no exported member (<slot>/model.json). Fix: run the export stage of this arm first."
        )
    models = []
    for folder in folders:
        described = read_json(folder / MODEL_DESCRIPTION)
        try:
            ref = ModelRef.from_fields(described)
        except (KeyError, ValueError) as error:
            raise BenchError(f"{folder / MODEL_DESCRIPTION}: {error}") from None
        models.append(BenchModel(ref, adapter_of(folder), described.get("member")))
    return models


def adapter_of(model_dir: Path) -> Path:
    """The adapter folder named by an export folder's model.json."""
    description_path = model_dir / MODEL_DESCRIPTION
    if not description_path.is_file():
        raise BenchError(
            f"{description_path} not found: {model_dir} is not an export folder. "
            "Fix: run the export stage for this model first."
        )
    adapter = read_json(description_path).get("adapter")
    if adapter is None:
        raise BenchError(f"{description_path} names no adapter. Fix: re-run the export stage of this arm.")
    folder = model_dir / adapter
    missing = [name for name in ("adapter_config.json", "adapter_model.safetensors") if not (folder / name).is_file()]
    if missing:
        raise BenchError(
            f"adapter folder {folder} lacks {', '.join(missing)}. "
            "Fix: re-run the export stage for this model (its checkpoint may be incomplete)."
        )
    return folder
