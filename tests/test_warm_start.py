"""The warm start (populora/warmstart/, stages/warm_start.py) on the tiny model: the target format is what the
parser and grader accept, a shorter budget is a prefix of a longer one, training fits its examples so that the
project's own sampler then answers them, the merged model loads and computes what the adapter did, and the
stage writes a loadable folder (or links the base when disabled)."""

import doctest
import json

import pytest
import torch
import yaml

from populora.config import VerifySection, parse_params
from populora.heldout.pool import verified_seeds
from populora.tasks.parsing import parse_answer
from populora.tasks.plans import FENCE
from populora.verifier import grade_rows, sandbox_for
from populora.verifier.families import verified_tasks
from populora.warmstart import train as train_module
from populora.warmstart.examples import answer_budget, build_examples, encode_example, gold_answer
from populora.warmstart.run import verified_inputs
from populora.warmstart.train import adapter_folder, add_lora, merge_into_base, train

CONFIG = VerifySection(workers=1)


@pytest.fixture(scope="module")
def sandbox():
    with sandbox_for(CONFIG) as box:
        yield box


@pytest.fixture(scope="module")
def tasks(sandbox):
    return verified_tasks("train", 24, seed=0, config=CONFIG, sandbox=sandbox)


@pytest.fixture(scope="module")
def params(tiny_params_dict):
    return parse_params(tiny_params_dict, "tiny")


def _chat(prompt: str) -> str:
    return f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"


def test_doctests():
    assert doctest.testmod(train_module).failed == 0


def test_verified_tasks_are_neither_copyable_nor_echo_solved(tasks):
    assert len(tasks) == 24 and {t["type"] for t in tasks} == {"code_o", "code_i"}
    assert all(t["split"] == "train" and t["outputs"] for t in tasks)


def test_the_target_is_an_answer_the_parser_and_grader_accept(tasks, params, sandbox):
    seeds = verified_seeds(params, sandbox)
    examples = build_examples(tasks, seeds, chat=_chat, worked_examples=1, seed=0)
    rows = []
    for task, example in zip(tasks, examples):
        piece = example["target"].split(FENCE)[0]  # what the sampler keeps: the text before its stop
        answer, reason = parse_answer(example["prefill"] + piece, task["type"], mode="scaffolded")
        assert reason is None and answer == gold_answer(task)
        assert example["prompt"].startswith("<|im_start|>user\n# Task:") and "# Worked example 1:" in example["prompt"]
        rows.append({"task_id": task["task_id"], "answer": answer})
    graded = grade_rows([{**t, "valid": True} for t in tasks], rows, CONFIG, sandbox=sandbox)
    assert all(row["correct"] for row in graded)


def test_a_shorter_budget_is_a_prefix_of_a_longer_one(tasks, params, sandbox):
    seeds = verified_seeds(params, sandbox)
    longer = build_examples(tasks, seeds, chat=_chat, worked_examples=1, seed=3)
    assert build_examples(tasks[:10], seeds, chat=_chat, worked_examples=1, seed=3) == longer[:10]
    assert verified_tasks("train", 8, seed=0, config=CONFIG, sandbox=sandbox) == tasks[:8]
    # a worked example never shows the task's own program
    for task, example in zip(tasks, longer):
        shown = example["prompt"].split("# Now your turn:")[0]
        assert f"```python\n{task['program']}\n```" not in shown


def test_the_warm_start_does_not_change_with_a_proposal_filter(tiny_params_dict, sandbox):
    """propose.reject_copyable filters what enters the buffer; the warm base must not follow it (a study overlay
    that turned it on once trained a warm base other than the one its pool was calibrated on)."""

    def with_filter(reject: bool):
        propose = {**tiny_params_dict.get("propose", {}), "reject_copyable": reject}
        return parse_params({**tiny_params_dict, "propose": propose}, f"reject_copyable={reject}")

    off, on = verified_inputs(with_filter(False), sandbox), verified_inputs(with_filter(True), sandbox)
    assert off == on
    # the filter does bite on the buffer's seeds, so the comparison above could have failed
    assert len(verified_seeds(with_filter(True), sandbox)) < len(on[1])


@pytest.fixture(scope="module")
def sharp_model_dir(tiny_model_dir, tmp_path_factory):
    """The tiny model with its (tied) embeddings scaled up: its random head gives logits of about +-0.6, so no
    LoRA of its layers can make an answer likely; scaled, one can (a fine-tune then has something to fit)."""
    from populora.lm.model import load_base

    tokenizer, model = load_base(tiny_model_dir, dtype="float32", device="cpu")
    with torch.no_grad():
        model.get_input_embeddings().weight.mul_(20.0)
    out = tmp_path_factory.mktemp("sharp") / "model"
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def test_training_fits_its_examples_and_the_sampler_then_answers_them(
    sharp_model_dir, tasks, params, sandbox, tmp_path
):
    """Overfit two tasks; the merged model, loaded as every stage loads a base, answers them greedily with the
    project's sampler, parser and grader: the trained format is the one the pipeline samples in."""
    from populora.heldout.pool import attach_examples
    from populora.heldout.scoring import score_members
    from populora.lm.model import load_base

    tiny_model_dir = sharp_model_dir
    chosen = [t for t in tasks if t["type"] == "code_o"][:1] + [t for t in tasks if t["type"] == "code_i"][:1]
    chosen = attach_examples(chosen, verified_seeds(params, sandbox), 1, seed=0)
    tokenizer, model = load_base(tiny_model_dir, dtype="float32", device="cpu")
    from populora.tasks.prompts import chat_wrapper

    examples = []
    for task in chosen:  # the prompts the held-out scoring shows: each task's own worked example
        examples += build_examples([task], task["examples"], chat=chat_wrapper(tokenizer), worked_examples=1, seed=0)
    rows = [encode_example(e, tokenizer) for e in examples] * 200
    peft_model = add_lora(
        model,
        rank=8,
        alpha=16,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        seed=0,
    )
    steps = train(
        peft_model, rows, batch_size=8, micro_batch=8, learning_rate=1e-2, warmup_steps=2, pad_id=tokenizer.pad_token_id
    )
    assert steps[-1]["loss"] < 0.2 * steps[0]["loss"] and steps[-1]["exact"] == 1.0
    peft_model.save_pretrained(str(tmp_path / "adapter"))
    merge_into_base(tiny_model_dir, adapter_folder(tmp_path / "adapter"), tmp_path / "warm")
    tokenizer, merged = load_base(tmp_path / "warm", dtype="float32", device="cpu")
    raw = parse_params(
        {
            **params.model_dump(mode="json"),
            "solve": {**params.solve.model_dump(mode="json"), "max_new_tokens": answer_budget(chosen, tokenizer)},
        },
        "t",
    )
    metrics, table = score_members(raw, merged, tokenizer, chosen, [None], {}, sandbox)
    assert table["base"] == {t["task_id"]: 1 for t in chosen}


def test_the_merged_model_computes_what_the_adapter_did(tiny_model_dir, tmp_path):
    from transformers import AutoModelForCausalLM

    from populora.lm.model import load_base

    _, model = load_base(tiny_model_dir, dtype="float32", device="cpu")
    peft_model = add_lora(model, rank=4, alpha=8, target_modules=["q_proj", "v_proj", "gate_proj"], seed=1)
    with torch.no_grad():
        for name, parameter in peft_model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0, 0.05)  # a trained-looking adapter (B is 0 at init)
    ids = torch.tensor([[5, 17, 42, 99, 3]])
    with torch.no_grad():
        expected = peft_model(input_ids=ids).logits
    peft_model.save_pretrained(str(tmp_path / "adapter"))
    merge_into_base(tiny_model_dir, adapter_folder(tmp_path / "adapter"), tmp_path / "warm")
    merged = AutoModelForCausalLM.from_pretrained(tmp_path / "warm")
    with torch.no_grad():
        got = merged(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-5)


def _run_stage(raw: dict, tmp_path, base_dir) -> tuple[int, dict]:
    from stages import warm_start

    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    code = warm_start.main(
        [
            "--params",
            str(path),
            "--base-model",
            str(base_dir),
            "--warm-base",
            str(tmp_path / "warm_base"),
            "--record",
            str(tmp_path / "warm_start.json"),
        ]
    )
    return code, json.loads((tmp_path / "warm_start.json").read_text())


def test_the_stage_makes_a_loadable_warm_base(tiny_model_dir, tiny_params_dict, tmp_path):
    from transformers import AutoModelForCausalLM

    code, record = _run_stage(tiny_params_dict, tmp_path, tiny_model_dir)
    assert code == 0 and record["enabled"] and record["examples"] == tiny_params_dict["warm_start"]["examples"]
    assert record["steps"] and record["tokens_per_s"] > 0 and record["wall_s"] > 0
    assert set(record["final"]) == {"loss", "token_accuracy", "exact"}
    AutoModelForCausalLM.from_pretrained(tmp_path / "warm_base")  # a full model folder
    assert (tmp_path / "warm_base" / "warm_start_adapter" / "adapter_config.json").is_file()
    assert (tmp_path / "warm_base" / "warm_start_tasks.jsonl").is_file()
    # the report's section: the loss curve drawn, the cost written out
    from populora.report.warm_start import warm_start_section

    lines = warm_start_section(record, tmp_path)
    assert (tmp_path / "warm_start.png").stat().st_size > 0 and "(warm_start.png)" in lines[-2]
    assert any("tokens/s" in line and "s training" in line for line in lines)
    assert warm_start_section({"enabled": False}, tmp_path)[2].startswith("Off")


def test_disabled_the_warm_base_is_the_base_hard_linked(tiny_model_dir, tiny_params_dict, tmp_path):
    raw = {**tiny_params_dict, "warm_start": {**tiny_params_dict["warm_start"], "enabled": False}}
    code, record = _run_stage(raw, tmp_path, tiny_model_dir)
    assert code == 0 and record == {"enabled": False}
    for path in tiny_model_dir.iterdir():
        if path.is_file():
            assert (tmp_path / "warm_base" / path.name).stat().st_ino == path.stat().st_ino


def test_an_answer_budget_too_small_for_the_golds_is_refused(tiny_model_dir, tiny_params_dict, tmp_path):
    raw = {**tiny_params_dict, "solve": {**tiny_params_dict["solve"], "max_new_tokens": 2}}
    with pytest.raises(ValueError, match="solve.max_new_tokens"):
        _run_stage(raw, tmp_path, tiny_model_dir)
    assert not (tmp_path / "warm_base").exists()


def test_summaries_and_the_budget_choice_are_by_transfer():
    from populora.warmstart.measure import paired_gain, summarize
    from populora.warmstart.sweep import best, sweep_table

    tasks = [
        {"task_id": f"{t}{i}", "type": t, "family": "branch" if i % 2 else "digits"}
        for t in ("code_o", "code_i")
        for i in range(10)
    ]
    scores = {
        "base": {t["task_id"]: {"greedy": 0, "correct": 1} for t in tasks},
        "lr0.001-n400": {t["task_id"]: {"greedy": 1, "correct": 3} for t in tasks},
        "lr0.001-n800": {t["task_id"]: {"greedy": int(t["task_id"].startswith("code_o")), "correct": 2} for t in tasks},
    }
    summary = summarize(scores, tasks, samples=4)
    assert summary["lr0.001-n400"]["code_o"] == {"n": 10, "greedy": 1.0, "pass_rate": 0.75}
    assert summary["base"]["code_i digits"]["n"] == 5
    table = sweep_table(scores, tasks, samples=4)
    assert table["lr0.001-n800"]["mean_greedy"] == 0.5 and table["lr0.001-n800"]["mean_pass_rate"] == 0.5
    assert best(table) == "lr0.001-n400"  # the base is never chosen
    gain = paired_gain(scores, tasks, "lr0.001-n400", "base", samples=4)
    assert gain["code_o"]["points"] == 50.0 and gain["code_o"]["excludes_zero"]
    assert paired_gain(scores, tasks, "lr0.001-n800", "base", samples=4, measure="greedy")["code_i"]["points"] == 0
