"""Seeds: every random draw of a run derives its seed from the run's one seed (`base.seed`).

seed = derive_seed(params.base.seed, "propose", arm, gen)
"""

from __future__ import annotations

import hashlib


def derive_seed(base_seed: int, *parts: object) -> int:
    """A stable 31-bit seed per (run seed, stage, arm, generation, ...): the same parts give the same
    seed on every machine and Python version (a hash of their text, not Python's salted `hash`).

    >>> derive_seed(0, "propose", "population", 1) == derive_seed(0, "propose", "population", 1)
    True
    >>> 0 <= derive_seed(0, "update", "baseline", 0, "solo") < 2**31
    True
    """
    digest = hashlib.sha256(":".join(str(p) for p in (base_seed, *parts)).encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF
