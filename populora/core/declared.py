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

Only attribute reads are guarded; a section's own methods (`bench.limit_of`) read its other keys unseen,
which the static check of tests/test_dvc_shape.py covers.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import BaseModel


class UndeclaredParamError(RuntimeError):
    """A stage read a params key its DAG entry does not declare."""


class DeclaredParams:
    """`params` limited to the `declared` keys of `stage` (dotted: `propose`, `model.dtype`); a section some of
    whose keys are declared is a view too (its `prefix`, e.g. `model.`)."""

    __slots__ = ("_target", "_prefix", "_declared", "_stage")

    def __init__(self, params: BaseModel, declared: Iterable[str], stage: str, prefix: str = ""):
        object.__setattr__(self, "_target", params)
        object.__setattr__(self, "_prefix", prefix)
        object.__setattr__(self, "_declared", frozenset(declared))
        object.__setattr__(self, "_stage", stage)

    def __getattr__(self, name: str):
        if name.startswith("_"):  # copy and pickle probe dunders, and no params key starts with _
            raise AttributeError(name)
        key = f"{self._prefix}{name}"
        value = getattr(self._target, name)
        if key in self._declared or any(key.startswith(d + ".") for d in self._declared):
            return value  # the key, or a section inside a declared one
        if isinstance(value, BaseModel) and any(d.startswith(key + ".") for d in self._declared):
            return DeclaredParams(value, self._declared, self._stage, key + ".")  # some keys of this section
        if callable(value) and not hasattr(BaseModel, name):
            return value  # a section's own method (bench.limit_of); pydantic's (model_dump) would read every key
        raise UndeclaredParamError(
            f"stage {self._stage!r} reads params key {key!r}, which its entry in workflow/dag.py does not declare "
            f"(it declares: {', '.join(sorted(self._declared)) or 'nothing'}): DVC and Snakemake would not rerun it "
            f"when {key} changes. Fix: add {key!r} to Stage({self._stage!r}).params in workflow/dag.py and run "
            "`python -m workflow.render_dvc`, or stop reading it"
        )

    def __setattr__(self, name: str, value) -> None:
        raise AttributeError(f"params are read-only ({self._prefix}{name})")

    def __reduce__(self):  # a pickle (a worker process) gets the same view
        return DeclaredParams, (self._target, self._declared, self._stage, self._prefix)

    def __repr__(self) -> str:
        return f"DeclaredParams({self._stage!r}, {self._prefix or 'params'} limited to {sorted(self._declared)})"
