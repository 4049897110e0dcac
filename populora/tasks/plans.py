"""What the sampler is asked to generate: a `Plan` is a prompt and the `Step`s that follow it.

A step appends its `prefill` (a scaffold such as "```python\ndef f(") to the text so far and then
samples until one of its stops; `populora.lm.sampling.run_plans` (and the vLLM engine, through the
same seam) runs plans, `populora.tasks.prompts` builds them for proposing and solving, the
benchmarks for CRUXEval and LiveCodeBench.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FENCE = "```"


@dataclass(frozen=True)
class Step:
    """Append `prefill` to the text so far, then generate until `stop` (a string or several, the
    earliest wins; None: until EOS), at most `max_tokens` tokens (None: the stage's `max_new_tokens`)."""

    prefill: str
    stop: str | tuple[str, ...] | None = FENCE
    max_tokens: int | None = None
    must_stop: bool = True  # False: running out of tokens before `stop` is not a truncation
    non_empty: bool = False  # True: the first token may not end the block (no fence, line break, EOS)

    @property
    def stops(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)


@dataclass(frozen=True)
class Plan:
    prompt: str
    steps: tuple[Step, ...]
    meta: dict = field(default_factory=dict, compare=False)
