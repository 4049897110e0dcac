"""The identity seeds as verifier input rows (code_o, code_i, code_f), for the verifier and sandbox tests."""

from __future__ import annotations

from populora.config import TASK_TYPES
from populora.tasks.tasks import IDENTITY_CODE_F_SEED, IDENTITY_SEED


def seed_rows() -> list[dict]:
    return [
        {"task_id": f"seed-identity-{t}", "type": t, **(IDENTITY_CODE_F_SEED if t == "code_f" else IDENTITY_SEED)}
        for t in TASK_TYPES
    ]
