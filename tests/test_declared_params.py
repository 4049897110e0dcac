"""A stage reads only the params its DAG entry declares (populora.core.declared, stages._common.declared): the
view's rules, and that every stage's entry names keys that exist. The pipeline tests run every stage through
the view under both engines, so a stage that reads an undeclared key fails them with its name."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import pytest

from populora.config import Params
from populora.core.declared import READS_ENV, DeclaredParams, UndeclaredParamError, reads_of, unread
from stages._common import declared
from tests.conftest import REPO
from workflow.dag import STAGES, param_value


def test_declared_sections_and_keys_read_as_usual():
    params = Params()
    view = DeclaredParams(params, ("propose", "model.dtype", "bench"), stage="propose")
    assert view.propose == params.propose
    assert view.propose.per_type == params.propose.per_type
    assert view.model.dtype == params.model.dtype
    assert view.bench.limit_of(params.bench.benchmarks[0]) == params.bench.limit_of(params.bench.benchmarks[0])


@pytest.mark.parametrize(
    "read, key",
    [
        (lambda view: view.update, "update"),
        (lambda view: view.update.learning_rate, "update"),
        (lambda view: view.model.device, "model.device"),
        (lambda view: view.model_dump(), "model_dump"),
        (lambda view: view.model.model_dump(), "model.model_dump"),
    ],
)
def test_any_other_read_raises_with_the_stage_the_key_and_the_fix(read, key):
    view = DeclaredParams(Params(), ("propose", "model.dtype"), stage="propose")
    with pytest.raises(UndeclaredParamError) as raised:
        read(view)
    message = str(raised.value)
    assert f"stage 'propose' reads params key '{key}'" in message
    assert "Stage('propose').params in workflow/dag.py" in message
    assert "propose, model.dtype" in message or "model.dtype, propose" in message


def test_a_missing_key_is_still_an_attribute_error():
    view = DeclaredParams(Params(), ("propose",), stage="propose")
    with pytest.raises(AttributeError):
        _ = view.propose.no_such_key
    with pytest.raises(AttributeError):
        _ = view.no_such_section


def test_the_view_is_read_only_and_survives_a_pickle():
    view = DeclaredParams(Params(), ("propose", "model.dtype"), stage="propose")
    with pytest.raises(AttributeError, match="read-only"):
        view.propose = None
    again = pickle.loads(pickle.dumps(view))
    assert again.model.dtype == Params().model.dtype
    with pytest.raises(UndeclaredParamError):
        _ = again.model.device


@pytest.mark.parametrize("stage", STAGES, ids=lambda s: s.name)
def test_every_declared_key_exists_and_reads_through_the_stage_view(stage):
    params = Params()
    view = declared(params, stage.name)
    for key in stage.params:
        assert param_value(view, key) == param_value(params, key), key


def test_a_stage_view_refuses_what_the_stage_does_not_declare():
    """The mutation the view exists for: `pair` reading the learning rate (it declares no update key)."""
    assert not any(key.startswith("update") for key in next(s for s in STAGES if s.name == "pair").params)
    with pytest.raises(UndeclaredParamError, match="stage 'pair' reads params key 'update'"):
        _ = declared(Params(), "pair").update.learning_rate


def test_a_section_method_runs_on_the_view():
    """`bench.limit_of` reads `bench.limits` and `bench.limit`: declared, it answers as the section does; with
    only `bench.limit` declared, its read of `bench.limits` is refused like any other."""
    params = Params()
    name = params.bench.benchmarks[0]
    both = DeclaredParams(params, ("bench.limit", "bench.limits"), stage="bench")
    assert both.bench.limit_of(name) == params.bench.limit_of(name)
    assert {"bench.limit", "bench.limits"} & reads_of(both)
    with pytest.raises(UndeclaredParamError, match="reads params key 'bench.limits'"):
        DeclaredParams(params, ("bench.limit",), stage="bench").bench.limit_of(name)


def test_the_view_records_the_keys_it_hands_out():
    view = DeclaredParams(Params(), ("propose", "model.dtype", "model.device"), stage="propose")
    _ = view.propose.per_type, view.model.dtype
    assert reads_of(view) == {"propose", "model.dtype"}  # `model` alone (a view of some keys) is no read
    assert unread(("propose", "model.dtype", "model.device"), reads_of(view)) == ["model.device"]
    assert unread(("propose.per_type", "verify"), {"propose", "verify.workers"}) == []


def test_a_stage_process_writes_its_reads_at_exit(tmp_path):
    """With $POPULORA_PARAM_READS the stage's view writes the keys it read when the process exits."""
    code = (
        "from populora.config import Params\nfrom stages._common import declared\n"
        "view = declared(Params(), 'pair')\nview.ratings.beta\n"
    )
    env = {**os.environ, READS_ENV: str(tmp_path / "reads"), "PYTHONPATH": str(REPO)}
    subprocess.run([sys.executable, "-c", code], env=env, check=True, cwd=tmp_path)
    (written,) = (tmp_path / "reads").glob("pair-*.json")
    assert json.loads(written.read_text()) == {"stage": "pair", "reads": ["ratings.beta"]}
