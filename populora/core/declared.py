"""What a stage may read of the params: a read-only view of exactly the keys its DAG entry declares.

Each stage of workflow/dag.py lists the params it depends on (`Stage.params`: whole sections such as
`propose`, or single keys such as `model.dtype`); both engines rerun the stage when one of them changes, and
only then. A read of any other key would be a setting the stage uses but DVC and Snakemake never watch: an
edit of it leaves stale results in place. `DeclaredParams` makes such a read fail at once, naming the stage,
the key and the fix, under either engine and in every test that runs the stage (stages._common.setup wraps
the params it loads).

    view = DeclaredParams(params, ("propose", "model.dtype"), stage="propose")
    view.propose.per_type      # declared section: read as usual
    view.model.dtype           # declared key
    view.model.device          # UndeclaredParamError: stage 'propose' reads model.device, ...

A section's own methods (`bench.limit_of`) run on the view, so what they read is guarded too; pydantic's
(`model_dump`, which reads every key) are refused.

The other direction, a declared key no stage code reads (a needless rerun when it changes), is seen from the
reads: the view records every key it hands out (`reads_of`), and with `POPULORA_PARAM_READS=<folder>` in the
environment a stage writes them there when it exits (`record_reads`); tests/test_pipeline_smoke.py runs the
whole DAG that way and checks that every stage reads every key it declares.
"""

from __future__ import annotations

import atexit
import json
import os
from collections.abc import Iterable
from pathlib import Path

from pydantic import BaseModel

READS_ENV = "POPULORA_PARAM_READS"  # a folder: each stage process writes the params keys it read there


class UndeclaredParamError(RuntimeError):
    """A stage read a params key its DAG entry does not declare."""


class DeclaredParams:
    """`params` limited to the `declared` keys of `stage` (dotted: `propose`, `model.dtype`); a section some of
    whose keys are declared is a view too (its `prefix`, e.g. `model.`)."""

    __slots__ = ("_target", "_prefix", "_declared", "_stage", "_reads")

    def __init__(
        self, params: BaseModel, declared: Iterable[str], stage: str, prefix: str = "", reads: set[str] | None = None
    ):
        object.__setattr__(self, "_target", params)
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "_declared", frozenset(declared))
        object.__setattr__(self, "_stage", stage)
        object.__setattr__(self, "_reads", set() if reads is None else reads)  # shared by a view's sections

    def __getattr__(self, name: str):
        if name.startswith("_"):  # copy and pickle probe dunders, and no params key starts with _
            raise AttributeError(name)
        key = f"{self._prefix}{name}"
        value = getattr(self._target, name)
        if key in self._declared or any(key.startswith(d + ".") for d in self._declared):
            self._reads.add(key)
            return value  # the key, or a section inside a declared one
        if isinstance(value, BaseModel) and any(d.startswith(key + ".") for d in self._declared):
            return DeclaredParams(value, self._declared, self._stage, key + ".", self._reads)  # some of its keys
        if callable(value) and not hasattr(BaseModel, name):
            # a section's own method (bench.limit_of), run on the view so its reads are guarded and recorded;
            # pydantic's (model_dump) would read every key
            return getattr(type(self._target), name).__get__(self)
        raise UndeclaredParamError(
            f"stage {self._stage!r} reads params key {key!r}, which its entry in workflow/dag.py does not declare "
            f"(it declares: {', '.join(sorted(self._declared)) or 'nothing'}): DVC and Snakemake would not rerun it "
            f"when {key} changes. Fix: add {key!r} to Stage({self._stage!r}).params in workflow/dag.py and run "
            "`python -m workflow.render_dvc`, or stop reading it"
        )

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"params are read-only ({self._prefix}{name})")

    def __reduce__(self):  # a pickle (a worker process) gets the same view (its reads are its own)
        return DeclaredParams, (self._target, self._declared, self._stage, self._prefix)

    def __repr__(self) -> str:
        return f"DeclaredParams({self._stage!r}, {self._prefix or 'params'} limited to {sorted(self._declared)})"


def reads_of(view: DeclaredParams) -> set[str]:
    """The keys `view` (and its sections) handed out so far: a declared key, or a key inside a declared section."""
    return set(object.__getattribute__(view, "_reads"))


def unread(declared: Iterable[str], reads: Iterable[str]) -> list[str]:
    """The declared keys none of `reads` touches: neither read themselves, nor a key inside them, nor inside a
    section read whole.

    >>> unread(["propose", "model.dtype", "model.device"], ["propose.per_type", "model.dtype"])
    ['model.device']
    """
    reads = list(reads)
    return sorted(
        d for d in declared if not any(r == d or r.startswith(d + ".") or d.startswith(r + ".") for r in reads)
    )


def record_reads(view: DeclaredParams, folder: str | os.PathLike | None = None) -> None:
    """At exit, write the keys `view` handed out to `<folder>/<stage>-<pid>-<id>.json` (`folder` defaults to
    $POPULORA_PARAM_READS; nothing is recorded when neither is set)."""
    folder = folder or os.environ.get(READS_ENV)
    if not folder:
        return
    stage = object.__getattribute__(view, "_stage")

    def write() -> None:
        path = Path(folder) / f"{stage}-{os.getpid()}-{id(view)}.json"  # a process may make several views
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"stage": stage, "reads": sorted(reads_of(view))}))

    atexit.register(write)
