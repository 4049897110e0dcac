"""What the vLLM engines are given, checked without vLLM (a stand-in `vllm` module records the requests).

    python -m pytest tests/test_vllm_window.py -q

The window is `update.max_seq_len` for both engines (ours and lm-eval's `vllm` model): a row ends when
its context fills it, a prompt that already fills it gets no tokens; requests carry a seed only when
sampled with `sampler.request_seeds`; lm-eval's vllm model gets every request at once (batch_size auto).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest
import yaml

from populora.config import parse_params

REPO = Path(__file__).resolve().parents[1]


class FakeParams:
    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)


class FakeTokenizer:
    def decode(self, ids, **_):
        return " ".join(map(str, ids))

    def __call__(self, text, **_):
        return {"input_ids": [int(t) for t in text.split()]}

    def __len__(self):
        return 50


@pytest.fixture
def engine(monkeypatch):
    """A VllmEngine whose LLM is a stand-in that samples token 7 up to each request's max_tokens."""
    monkeypatch.setitem(sys.modules, "vllm", types.SimpleNamespace(SamplingParams=FakeParams))
    from populora.lm.vllm_engine import VllmEngine

    engine = VllmEngine.__new__(VllmEngine)
    engine.tokenizer, engine.eos, engine.max_model_len, engine.request_seeds = FakeTokenizer(), [0], 10, True
    engine.requests = []

    def generate(contexts, params, adapters):
        engine.requests += [(len(c), p) for c, p in zip(contexts, params)]
        return [
            types.SimpleNamespace(
                token_ids=[7] * p.max_tokens,
                text="x" * p.max_tokens,
                logprobs=[{7: types.SimpleNamespace(logprob=-0.5)}] * p.max_tokens,
            )
            for p in params
        ]

    engine._generate = generate
    return engine


def sample(engine, contexts, **kwargs):
    args = dict(
        budget=6, stops=(), suppress_first=None, temperature=1.0, top_p=1.0, seed=0, adapters=[None] * len(contexts)
    )
    return engine.sample_contexts(contexts, **{**args, **kwargs})


def test_rows_end_where_the_context_fills_the_window(engine):
    rows = sample(engine, [[1] * 2, [1] * 7, [1] * 10])
    assert [len(r.ids) for r in rows] == [6, 3, 0]  # the budget; the window (10 - 7); a full window: nothing
    assert [n + p.max_tokens for n, p in engine.requests] == [8, 10]  # the full row was never sent


def test_seeds_only_for_sampled_requests_and_only_when_asked(engine):
    sample(engine, [[1, 2]], temperature=0.0)
    assert [p.seed for _, p in engine.requests] == [None]  # greedy: a seed changes nothing
    engine.requests.clear()
    sample(engine, [[1, 2]])
    assert engine.requests[0][1].seed is not None
    engine.request_seeds, engine.requests = False, []
    sample(engine, [[1, 2]])
    assert [p.seed for _, p in engine.requests] == [None]


def test_greedy_texts_are_capped_by_the_window(engine):
    out = engine.generate_texts(["1 2 3", " ".join(["1"] * 12)], max_new_tokens=20, stops=[], adapters=[None, None])
    assert [len(ids) for _, ids in out] == [7, 0] and out[1] == ("", [])


def _params(**sections) -> object:
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    for name, values in sections.items():
        raw[name] = {**raw[name], **values}
    return parse_params(raw)


def test_lmeval_vllm_model_gets_the_window_and_every_request_at_once(monkeypatch, tmp_path):
    import lm_eval

    from populora.bench import lmeval as lmeval_runner
    from populora.lm.engines import pick_sampler

    args = pick_sampler(_params(update={"max_seq_len": 8192}, sampler={"engine": "vllm"})).lmeval_vllm_args()
    assert args["max_model_len"] == 8192
    seen = {}
    monkeypatch.setattr(
        lm_eval, "simple_evaluate", lambda **kwargs: seen.update(kwargs) or {"results": {}, "config": {}}
    )
    common = dict(
        base_model="base",
        adapter=None,
        data_dir=None,
        limit=2,
        max_new_tokens=16,
        batch_size=64,
        dtype="float32",
        device="cpu",
        harness_dir=tmp_path,
    )
    lmeval_runner.evaluate("gsm8k", vllm=args, **common)
    assert seen["model"] == "vllm" and seen["batch_size"] == "auto" and seen["model_args"]["max_model_len"] == 8192
    built = {}

    class FakeHF:  # lm-eval's hf model, built by the runner itself (its progress lines) before simple_evaluate
        @classmethod
        def create_from_arg_obj(cls, arguments, extra):
            built.update(arguments=arguments, **extra)
            return cls()

    monkeypatch.setattr(lmeval_runner, "_progress_lm_class", lambda: FakeHF)
    lmeval_runner.evaluate("gsm8k", **common)
    assert isinstance(seen["model"], FakeHF) and seen["batch_size"] == 64 and built["batch_size"] == 64
