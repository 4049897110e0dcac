"""The `vllm` generation engine: vLLM serving the frozen base with every member a LoRARequest.

`sampler.engine: vllm` in params makes propose, solve and the CRUXEval / EvalPlus /
LiveCodeBench passes sample here instead of the project's own decode loop
(`populora.lm.sampling.sample_batch`), through the same seam: `VllmEngine.sample_contexts` takes
token-id contexts, one adapter name per row, a token budget, stop strings, first-token
suppression, temperature and top-p, and returns what `sample_batch` returns (`Sampled`: the
sampled ids, the one that completed a stop or EOS included, and the sampler's log-probability of
each). `populora.lm.sampling.run_plans` builds the recorded segments from them as with `hf`, so the
update, the verifier and the artifacts do not change.

How the contract is kept on vLLM:
- adapters are the PEFT folders on disk, one `LoRARequest` (own integer id) per name; rows of all
  adapters share the engine's batches (`max_loras` resident at once);
- prompts go in as token ids (`TokensPrompt`), so a plan's later steps continue exactly the
  context the update will score; the samples of one prompt share it through prefix caching;
- log-probabilities are vLLM's `processed_logprobs` (after temperature and top-p), the quantity
  `populora.lm.sampling.process_logits` gives the update; the update reports the gap;
- first-token suppression (a fenced block must not start empty) is a one-token request restricted
  to the allowed ids (`allowed_token_ids`), then the row continues from context + that token;
- stops: vLLM stops on the stop strings and EOS, and each row is then cut at the first token where
  `sample_batch`'s own rule (a stop string in the decoded tail, or an EOS id) fires, so both
  engines end rows at the same token;
- the context window is `update.max_seq_len` (`max_model_len`): a row ends when its context reaches
  it, since the update could not score tokens past it (`rollout_sequences` drops the oldest); vLLM
  then also sizes nothing for the model's own 32k window;
- seeds: a sampled request carries its own seed only with `sampler.request_seeds` (reruns repeat on
  the CPU; on a GPU vLLM samples seeded rows on a slower path and batch composition changes the
  numbers anyway, so the GPU overlays turn it off); greedy requests never carry one.

vLLM starts its engine in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0: no worker process, no
`__main__` guard needed by callers). Install with `bash scripts/setup_vllm_env.sh` (.venv-vllm).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

from populora.lm.sampling import Sampled, stop_window

log = logging.getLogger(__name__)
# LoRA ranks vLLM compiles kernels for (vllm.config.lora: MaxLoRARanks)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def supported_rank(rank: int) -> int:
    """The smallest rank vLLM accepts as `max_lora_rank` that holds adapters of `rank`."""
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest ({VLLM_LORA_RANKS[-1]})")


def _stop_fired(tokenizer, ids: list[int], stops: tuple[str, ...]) -> bool:
    """sample_batch's stop rule on the last token: a stop string in the decoded tail."""
    if not stops or not ids:
        return False
    tail = tokenizer.decode(ids[-stop_window(stops) :], skip_special_tokens=True, clean_up_tokenization_spaces=False)
    return any(stop in tail for stop in stops)


def cut_at_stop(tokenizer, ids: list[int], eos: set[int], stops: tuple[str, ...]) -> tuple[list[int], bool]:
    """`ids` up to the first token where `sample_batch` would have ended the row: an EOS id, or a
    stop string in the decoded tail of the last tokens. Returns (ids, ended on EOS)."""
    window = stop_window(stops)
    for position, token in enumerate(ids):
        if token in eos:
            return ids[: position + 1], True
        if stops:
            tail = tokenizer.decode(
                ids[max(0, position + 1 - window) : position + 1],
                skip_special_tokens=True,
                clean_up_tokenization_spaces=False,
            )
            if any(stop in tail for stop in stops):
                return ids[: position + 1], False
    return ids, False


def lmeval_vllm_args(
    *, memory_fraction: float, enforce_eager: bool, max_num_seqs: int, lora_rank: int, max_model_len: int
) -> dict:
    """Engine settings for lm-eval's `vllm` model (math benchmarks), the same as our engine's
    (`populora.lm.engines.VllmSampler.lmeval_vllm_args`): its context window is `update.max_seq_len`
    too (lm-eval cuts a longer prompt's oldest tokens to leave room for the answer cap)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    return {
        "gpu_memory_utilization": memory_fraction,
        "enforce_eager": enforce_eager,
        "max_num_seqs": max_num_seqs,
        "max_lora_rank": supported_rank(lora_rank),
        "max_model_len": max_model_len,
    }


class VllmEngine:
    """A vLLM `LLM` over the base model folder with `adapters` (name -> PEFT folder) as LoRA requests."""

    def __init__(
        self,
        base_model: str | Path,
        adapters: Mapping[str, str | Path],
        *,
        dtype: str,
        lora_rank: int,
        memory_fraction: float,
        max_loras: int | None = None,
        max_num_seqs: int = 256,
        enforce_eager: bool = True,
        max_model_len: int | None = None,
        seed: int = 0,
        request_seeds: bool = True,
    ):
        os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        from vllm import LLM
        from vllm.lora.request import LoRARequest
        from vllm.platforms import current_platform

        slots = max_loras or len(adapters)
        platform_args = {}
        if current_platform.is_cpu():
            # vLLM's CPU runner cannot rewind a seeded request's generator after a partial (chunked)
            # prefill ("CPU Generator does not use offset"): every request here is seeded, so prompts
            # are prefilled whole on CPU
            platform_args["enable_chunked_prefill"] = False
            # vLLM's CPU LoRA ops pick each row's factors as `weights[index]` and a row without adapter
            # has index -1: Python indexing gives it the LAST slot's adapter (vllm/lora/ops/torch_ops,
            # bgmv_shrink). One slot more than adapters, never filled, keeps those rows on the base.
            slots = len(adapters) + 1
        lora = (
            {
                "enable_lora": True,
                "max_loras": slots,
                "max_cpu_loras": slots,
                "max_lora_rank": supported_rank(lora_rank),
            }
            if adapters
            else {}
        )
        self.llm = LLM(
            model=str(base_model),
            tokenizer=str(base_model),
            dtype=dtype,
            seed=seed,
            gpu_memory_utilization=memory_fraction,
            enforce_eager=enforce_eager,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            enable_prefix_caching=True,
            logprobs_mode="processed_logprobs",
            max_logprobs=0,
            **lora,
            **platform_args,
        )
        self.tokenizer = self.llm.get_tokenizer()
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        self.request_seeds = request_seeds
        self.requests = {
            name: LoRARequest(name, index + 1, str(path)) for index, (name, path) in enumerate(adapters.items())
        }
        from populora.lm.sampling import _eos_ids

        self.eos = _eos_ids(self, self.tokenizer)

    @property
    def generation_config(self):
        from transformers import GenerationConfig

        path = Path(self.llm.llm_engine.model_config.model)
        return GenerationConfig.from_pretrained(path) if (path / "generation_config.json").is_file() else None

    def _lora(self, adapter: str | None):
        if adapter is None:
            return None
        if adapter not in self.requests:
            raise ValueError(f"row names adapter {adapter!r}, not loaded on the engine ({', '.join(self.requests)})")
        return self.requests[adapter]

    def _generate(self, contexts: list[list[int]], params: list, adapters: list[str | None]):
        from vllm.inputs import TokensPrompt

        outputs = self.llm.generate(
            [TokensPrompt(prompt_token_ids=list(c)) for c in contexts],
            params,
            lora_request=[self._lora(a) for a in adapters],
            use_tqdm=False,
        )
        return [output.outputs[0] for output in outputs]

    def _room(self, context: list[int], ids: list[int]) -> int:
        """Tokens a row may still add before its context fills the window (`max_model_len`)."""
        return self.max_model_len - len(context) - len(ids)

    def _params(
        self,
        *,
        max_tokens: int,
        temperature: float,
        top_p: float,
        seed: int,
        stops: tuple[str, ...],
        allowed: list[int] | None = None,
    ):
        from vllm import SamplingParams

        request_seed = seed if self.request_seeds and temperature > 0 else None  # seeds only where they change a draw
        return SamplingParams(
            n=1,
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            seed=request_seed,
            stop=list(stops) or None,
            stop_token_ids=self.eos,
            include_stop_str_in_output=True,
            logprobs=0,
            allowed_token_ids=allowed,
            skip_special_tokens=True,
            spaces_between_special_tokens=False,
            detokenize=bool(stops),
        )

    def sample_contexts(
        self,
        contexts: list[list[int]],
        *,
        budget: int,
        stops: tuple[str, ...],
        suppress_first: list[int] | None,
        temperature: float,
        top_p: float,
        seed: int,
        adapters: list[str | None],
    ) -> list[Sampled]:
        """`populora.lm.sampling.sample_batch`'s contract on vLLM (see the module docstring)."""
        seeds = [(seed * 1_000_003 + row) % 2**62 for row in range(len(contexts))]  # vLLM's seeds are int64
        rows = [Sampled([], [], False) for _ in contexts]
        ended = [self._room(context, []) <= 0 for context in contexts]  # a full window: nothing to sample
        if any(ended):
            log.warning(
                "%d of %d rows start with a context of max_model_len = %d tokens or more "
                "(update.max_seq_len) and get no tokens",
                sum(ended),
                len(ended),
                self.max_model_len,
            )
        if suppress_first:  # the first token alone, drawn from the allowed ids
            banned = set(suppress_first)
            allowed = [i for i in range(len(self.tokenizer)) if i not in banned]
            first = [r for r in range(len(rows)) if not ended[r]]
            self._extend(
                rows,
                ended,
                first,
                contexts,
                adapters,
                budget,
                [
                    self._params(
                        max_tokens=1, temperature=temperature, top_p=top_p, seed=seeds[r], stops=(), allowed=allowed
                    )
                    for r in first
                ],
                stops,
            )
        for round_ in range(1, budget + 1):  # every round adds at least one token to each open row
            open_rows = [r for r in range(len(rows)) if not ended[r]]
            if not open_rows:
                break
            self._extend(
                rows,
                ended,
                open_rows,
                contexts,
                adapters,
                budget,
                [
                    self._params(
                        max_tokens=min(budget - len(rows[r].ids), self._room(contexts[r], rows[r].ids)),
                        temperature=temperature,
                        top_p=top_p,
                        seed=(seeds[r] + 7919 * round_) % 2**62,
                        stops=stops,
                    )
                    for r in open_rows
                ],
                stops,
            )
        return rows

    def _extend(
        self,
        rows: list[Sampled],
        ended: list[bool],
        which,
        contexts,
        adapters,
        budget: int,
        params,
        stops: tuple[str, ...],
    ) -> None:
        """Continue rows `which` by one request each; mark those `sample_batch` would have ended."""
        which = list(which)
        tails = self._generate([contexts[r] + rows[r].ids for r in which], params, [adapters[r] for r in which])
        for r, tail in zip(which, tails):
            row = rows[r]
            sampled, logprobs = row.ids + list(tail.token_ids), row.logprobs + _scores(tail)
            ids, hit_eos = cut_at_stop(self.tokenizer, sampled, set(self.eos), stops)
            # A row ends where sample_batch's own rule fires (a stop in the decoded ids, EOS) or at the
            # budget. vLLM's stop check reads its incremental detokenization, which can see a stop the
            # ids do not decode to (runs of invalid UTF-8 byte tokens): such a row samples on.
            ended[r] = (
                hit_eos
                or len(ids) >= budget
                or _stop_fired(self.tokenizer, ids, stops)
                or self._room(contexts[r], ids) <= 0
            )
            rows[r] = Sampled(ids, logprobs[: len(ids)], hit_eos)

    def generate_texts(
        self, prompts: list[str], *, max_new_tokens: int, stops: list[str], adapters: list[str | None]
    ) -> list[tuple[str, list[int]]]:
        """Greedy completions of text prompts (EvalPlus): (text, sampled ids) per prompt, stop strings kept
        in the text as `model.generate(stop_strings=...)` keeps them."""
        from vllm import SamplingParams

        contexts = [self.tokenizer(p, add_special_tokens=False)["input_ids"] for p in prompts]
        rows = [r for r, context in enumerate(contexts) if self._room(context, []) > 0]
        if len(rows) < len(contexts):
            log.warning(
                "%d of %d prompts fill max_model_len = %d tokens (update.max_seq_len): empty answers",
                len(contexts) - len(rows),
                len(contexts),
                self.max_model_len,
            )
        params = [
            SamplingParams(
                n=1,
                max_tokens=min(max_new_tokens, self._room(contexts[r], [])),
                temperature=0.0,
                stop=stops or None,
                stop_token_ids=self.eos,
                include_stop_str_in_output=True,
                skip_special_tokens=True,
            )
            for r in rows
        ]
        outputs = dict(zip(rows, self._generate([contexts[r] for r in rows], params, [adapters[r] for r in rows])))
        return [
            (outputs[r].text, list(outputs[r].token_ids)) if r in outputs else ("", []) for r in range(len(contexts))
        ]


def _scores(output) -> list[float]:
    """The sampled token's log-probability at each position (`logprobs=0` returns just that one)."""
    return [round(float(position[token].logprob), 6) for token, position in zip(output.token_ids, output.logprobs)]
