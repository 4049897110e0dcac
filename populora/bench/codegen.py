"""Code generation for HumanEval+ / MBPP+ exactly as `evalplus.codegen` prompts, batched and greedy.

evalplus 0.3.1's HF provider generates one prompt at a time; here the same prompts run in
batches through `model.generate` (left padding, greedy), with a tqdm bar. What is reused from
evalplus, so scores stay comparable with `evalplus.codegen --greedy`:

* the instruct prompt: `make_raw_chat_prompt` with evalplus's instruction and response prefixes
  (the strings live inside `evalplus.codegen.run_codegen`; tests/test_bench_evalplus.py checks
  they still match the installed source), so the chat template is applied and the assistant turn
  is prefilled with "Below is a Python script ...:\\n```python\\n";
* the stop strings: `evalplus.provider.utility.EOS` plus "\\n```\\n" for chat models (plus
  evalplus's direct-completion extras for a tokenizer without a chat template);
* the sanitizer: `evalplus.sanitize.sanitize(solution, entrypoint)`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from tqdm import tqdm

# Copied from evalplus.codegen.run_codegen (local variables there, so not importable).
INSTRUCTION_PREFIX = (
    "Please provide a self-contained Python script that solves the following problem in a markdown code block:"
)
RESPONSE_PREFIX = (
    "Below is a Python script with a self-contained function that solves the problem and passes corresponding tests:"
)


@dataclass
class Completion:
    task_id: str
    prompt: str  # the full model input (chat template applied)
    raw: str  # what evalplus calls the raw solution (before sanitizing)
    solution: str  # sanitized, what is executed
    new_tokens: int
    hit_token_limit: bool


def is_direct_completion(tokenizer) -> bool:
    return tokenizer.chat_template is None


def stop_strings(tokenizer, dataset: str) -> list[str]:
    from evalplus.provider.utility import EOS, extra_eos_for_direct_completion

    if is_direct_completion(tokenizer):
        return EOS + extra_eos_for_direct_completion(dataset)
    return EOS + ["\n```\n"]


def build_prompt(task_prompt: str, tokenizer) -> str:
    """evalplus's model input for one task (codegen strips the task prompt and adds a newline)."""
    from evalplus.provider.utility import make_raw_chat_prompt

    return make_raw_chat_prompt(task_prompt.strip() + "\n", INSTRUCTION_PREFIX, RESPONSE_PREFIX, tokenizer)


def cut_at_stops(text: str, stops: list[str]) -> str:
    """evalplus's post-processing: cut at the earliest stop string, tabs to four spaces."""
    index = min((text.index(s) for s in stops if s in text), default=len(text))
    return text[:index].replace("\t", "    ")


@torch.no_grad()
def greedy_generate(model, tokenizer, prompts: list[str], *, max_new_tokens: int, batch_size: int,
                    stops: list[str], desc: str = "generate",
                    adapter_names: list[str | None] | None = None) -> list[tuple[str, int, bool]]:
    """(text cut at the first stop, new tokens, hit the token limit) per prompt, in order.

    `adapter_names` (one per prompt) routes each row through its adapter on a stacked multi-LoRA
    model (`populora.lm.multilora`), so several models' prompts share the batches."""
    if hasattr(model, "generate_texts"):  # the vllm engine (populora.lm.vllm_engine): it batches itself
        outputs = model.generate_texts(prompts, max_new_tokens=max_new_tokens, stops=stops,
                                       adapters=adapter_names or [None] * len(prompts))
        return [(cut_at_stops(text, stops), len(ids),
                 len(ids) >= max_new_tokens and tokenizer.eos_token_id not in ids and not any(s in text for s in stops))
                for text, ids in outputs]
    device = next(model.parameters()).device
    order = sorted(range(len(prompts)), key=lambda i: len(prompts[i]))  # similar lengths share a batch
    results: list[tuple[str, int, bool] | None] = [None] * len(prompts)
    with tqdm(total=len(prompts), desc=desc, unit="prompt") as progress:
        for start in range(0, len(order), batch_size):
            batch = order[start:start + batch_size]
            # The chat template already holds every special token the model expects.
            encoded = tokenizer([prompts[i] for i in batch], return_tensors="pt", padding=True,
                                add_special_tokens=False).to(device)
            routing = {} if adapter_names is None else {"adapter_names": [adapter_names[i] for i in batch]}
            output = model.generate(
                **encoded, max_new_tokens=max_new_tokens, do_sample=False, temperature=None, top_p=None,
                top_k=None, stop_strings=stops, tokenizer=tokenizer, pad_token_id=tokenizer.pad_token_id, **routing,
            )
            for index, token_ids in zip(batch, output[:, encoded["input_ids"].shape[1]:]):
                ids = [t for t in token_ids.tolist() if t != tokenizer.pad_token_id]
                text = tokenizer.decode(ids, skip_special_tokens=True)
                stopped = tokenizer.eos_token_id in ids or any(s in text for s in stops)
                results[index] = (cut_at_stops(text, stops), len(ids), len(ids) >= max_new_tokens and not stopped)
            progress.update(len(batch))
    return results  # type: ignore[return-value]


def generate_member_solutions(model, tokenizer, problems: dict[str, dict], dataset: str,
                              adapter_names: list[str | None], *, max_new_tokens: int,
                              batch_size: int) -> dict[str | None, list[Completion]]:
    """One greedy, sanitized solution per problem (in the order of `problems`) for each adapter of
    a stacked multi-LoRA model, in one pass (every problem once per adapter, sharing batches);
    [None] is the model as it is."""
    from evalplus.sanitize import sanitize

    stops = stop_strings(tokenizer, dataset)
    task_ids = list(problems)
    prompts = [build_prompt(problems[t]["prompt"], tokenizer) for t in task_ids]
    routing = None if adapter_names == [None] else [name for name in adapter_names for _ in prompts]
    outputs = greedy_generate(model, tokenizer, prompts * len(adapter_names), max_new_tokens=max_new_tokens,
                              batch_size=batch_size, stops=stops, desc=f"codegen {dataset}", adapter_names=routing)
    per_adapter = {}
    for index, name in enumerate(adapter_names):
        completions = []
        part = outputs[index * len(prompts):(index + 1) * len(prompts)]
        for task_id, prompt, (text, n_tokens, hit_limit) in zip(task_ids, prompts, part):
            # evalplus.codegen: a chat model's output is the solution; a base model continues the prompt.
            raw = problems[task_id]["prompt"].strip() + "\n" + text if is_direct_completion(tokenizer) else text
            solution = sanitize(raw, entrypoint=problems[task_id]["entry_point"])
            completions.append(Completion(task_id, prompt, raw, solution, n_tokens, hit_limit))
        per_adapter[name] = completions
    return per_adapter
