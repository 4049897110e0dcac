"""One update job per adapter: the adapters, optimizer moments and statistics equal those of one job
training every adapter of the arm, byte for byte; the update draws no random number; several
processes per adapter (accelerate launch, 2 CPU processes) sum their gradients into the same step.
On the CPU. On a GPU the same holds only up to the kernels' nondeterminism (atomic adds in attention's
backward, reduction order across processes): equal within float tolerance, not byte for byte (docs/gpu.md)."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

from tests.conftest import REPO

SLOTS = ["teacher0", "teacher1", "student0", "student1"]


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, tiny_model_dir, tiny_params_dict) -> dict:
    return build_inputs(tmp_path_factory.mktemp("update_jobs"), tiny_model_dir, tiny_params_dict)


def build_inputs(root: Path, tiny_model_dir: Path, tiny_params_dict: dict) -> dict:
    """A base model, an arm's state (4 adapters, optimizer moments for two of them) and rollouts
    sampled from those adapters, as the update stage reads them."""
    from populora.core.rows import Rollout, write_rows
    from populora.core.state import ADAPTERS, OPTIMIZER
    from populora.lm.adapters import create_adapters
    from populora.lm.model import attach_adapters, load_base, lora_config
    from populora.lm.multilora import attach_multilora
    from populora.lm.sampling import GenRow, run_plans
    from populora.rl.update import make_optimizer, save_optimizer, trainable_state
    from populora.tasks import prompts

    state = root / "state"
    (state / ADAPTERS).mkdir(parents=True)
    _, model = load_base(tiny_model_dir)
    create_adapters(
        model,
        SLOTS,
        state / ADAPTERS,
        lora_cfg=lora_config(4, 8.0, 0.0, ["q_proj", "v_proj"]),
        seeds={s: i for i, s in enumerate(SLOTS)},
        init_std=0.5,
    )
    # moments from an earlier generation for two adapters (the others start fresh, as children do)
    _, base = load_base(tiny_model_dir)
    peft = attach_adapters(base, {s: state / ADAPTERS / s for s in SLOTS})
    generator = torch.Generator().manual_seed(0)
    for slot in ("teacher1", "student0"):
        params = trainable_state(peft, slot)
        optimizer, names = make_optimizer(params, lr=1e-3, weight_decay=0.0, state_file=None)
        for name in names:
            optimizer.state[params[name]] = {
                "step": torch.tensor(3.0),
                "exp_avg": torch.randn(params[name].shape, generator=generator) * 1e-3,
                "exp_avg_sq": torch.rand(params[name].shape, generator=generator) * 1e-6,
            }
        save_optimizer(optimizer, params, names, state / OPTIMIZER / f"{slot}.safetensors")

    tokenizer, plain = load_base(tiny_model_dir)
    stacked = attach_multilora(plain, {s: state / ADAPTERS / s for s in SLOTS})

    def chat(p):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": p}],
            tokenize=False,
            add_generation_prompt=True,
        )

    plans = {
        "propose": prompts.scaffolded_plan("Write f.", prompts.proposer_steps("code_o", 10), chat),
        "solve": prompts.scaffolded_plan("What is f(1)?", prompts.proposer_steps("code_o", 4), chat),
    }
    rows = [
        GenRow(plans["propose" if slot.startswith("teacher") else "solve"], slot) for slot in SLOTS for _ in range(4)
    ]
    results = run_plans(stacked, tokenizer, rows, temperature=0.8, top_p=0.95, max_new_tokens=16, batch_size=8, seed=3)
    advantages = [1.0, -0.5, 0.25, -1.0]
    write_rows(
        root / "rollouts.jsonl",
        [  # as stages/reward.py writes them (populora.core.rows.Rollout)
            {
                "adapter": row.adapter,
                "role": "propose" if row.adapter.startswith("teacher") else "solve",
                "type": "code_o",
                "task_id": f"t{i}",
                "tokens": result.tokens_generated,
                "reward": advantages[i % 4],
                "segments": result.segments,
                "advantage": advantages[i % 4],
            }
            for i, (row, result) in enumerate(zip(rows, results))
        ],
        Rollout,
    )

    params = json.loads(json.dumps(tiny_params_dict))
    params["model"]["base_model"] = str(tiny_model_dir)
    params["update"] = {
        **params["update"],
        "steps": 2,
        "learning_rate": 0.01,
        "micro_batch": 2,
        "max_tokens_per_micro_batch": 96,
    }
    return {
        "root": root,
        "state": state,
        "rollouts": root / "rollouts.jsonl",
        "params": params,
        "base_model": tiny_model_dir,
    }


def _params_file(inputs: dict, name: str, **update) -> Path:
    params = json.loads(json.dumps(inputs["params"]))
    params["dag"]["update_jobs"] = update.pop("jobs", params["dag"].get("update_jobs", 4))
    params["update"].update(update)
    path = inputs["root"] / f"{name}.yaml"
    path.write_text(yaml.safe_dump(params))
    return path


def _env() -> dict:
    return {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
    }


def _update_job(inputs: dict, params: Path, part: int, out: Path, arm: str = "population") -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "stages.update",
            "--params",
            str(params),
            "--arm",
            arm,
            "--gen",
            "1",
            "--part",
            str(part),
            "--base-model",
            str(inputs["base_model"]),
            "--state",
            str(inputs["state"]),
            "--rollouts",
            str(inputs["rollouts"]),
            "--trained",
            str(out / str(part)),
            "--log",
            str(out.parent / f"{out.name}-{part}.log"),
        ],
        cwd=REPO,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _run_jobs(inputs: dict, params: Path, name: str, jobs: int, arm: str = "population") -> Path:
    """Every update job of one generation, each its own process (side by side, as on N GPUs), then
    update_gather: the trained/ folder evolve and checkpoint read."""
    if (inputs["root"] / name / "trained").is_dir():  # already run by an earlier test of this module
        return inputs["root"] / name / "trained"
    parts = inputs["root"] / name / "update"
    procs = [_update_job(inputs, params, part, parts, arm) for part in range(jobs)]
    for proc in procs:
        output = proc.communicate(timeout=600)[0]
        assert proc.returncode == 0, output[-3000:]
    from stages import update_gather

    trained = inputs["root"] / name / "trained"
    assert (
        update_gather.main(
            ["--params", str(params), "--arm", arm, "--gen", "1", "--parts", str(parts), "--trained", str(trained)]
        )
        == 0
    )
    return trained


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_one_job_per_adapter_writes_the_bytes_of_one_job_for_all(inputs):
    single = _run_jobs(inputs, _params_file(inputs, "one", jobs=1), "one", 1)
    split = _run_jobs(inputs, _params_file(inputs, "four", jobs=4), "four", 4)
    pairs = _run_jobs(inputs, _params_file(inputs, "two", jobs=2), "two", 2)  # two adapters per job
    expected = _digest(single)
    assert sorted(expected) == sorted(
        [f"adapters/{s}/{f}" for s in SLOTS for f in ("adapter_config.json", "adapter_model.safetensors")]
        + [f"optimizer/{s}.safetensors" for s in SLOTS]
        + ["update_stats.json"]
    )
    assert _digest(split) == expected
    assert _digest(pairs) == expected
    stats = json.loads((single / "update_stats.json").read_text())
    assert all(stats[s]["optimizer_steps"] == 2 for s in SLOTS)
    # the adapters did train (and differently): equality above is not that of untouched inputs
    from populora.lm.adapters import read_state_dict

    for slot in SLOTS:
        before, after = (
            read_state_dict(inputs["state"] / "adapters" / slot),
            read_state_dict(single / "adapters" / slot),
        )
        assert any(not torch.equal(before[k], after[k]) for k in before), slot


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_the_update_draws_no_random_number(inputs):
    """With LoRA dropout 0 nothing in the update samples, so the torch RNG state (seeded once per
    arm and generation before the split, per adapter since) cannot change what an adapter learns."""
    from accelerate import Accelerator

    from populora.config import UpdateSection
    from populora.core.io import read_jsonl
    from populora.lm.model import attach_adapters, load_base
    from populora.rl.update import reinforce_steps

    tokenizer, model = load_base(inputs["base_model"])
    tokenizer.padding_side = "right"
    model = attach_adapters(model, {s: inputs["state"] / "adapters" / s for s in SLOTS}, trainable=SLOTS[0])
    rollouts = [r for r in read_jsonl(inputs["rollouts"]) if r["adapter"] == "teacher0"]
    config = UpdateSection(**{**inputs["params"]["update"], "gradient_checkpointing": True})
    torch.manual_seed(1234)
    before = torch.get_rng_state()
    stats = reinforce_steps(
        Accelerator(cpu=True), model, tokenizer, "teacher0", rollouts, config, optimizer_file=None, optimizer_out=None
    )
    assert stats["optimizer_steps"] == 2 and stats["micro_batches"] >= 2
    assert torch.equal(torch.get_rng_state(), before)


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_a_job_without_an_adapter_writes_an_empty_part(inputs, tmp_path):
    params = _params_file(inputs, "empty", jobs=4)
    proc = _update_job(inputs, params, 2, tmp_path / "update", arm="baseline")
    output = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, output[-2000:]
    assert json.loads((tmp_path / "update" / "2" / "update_stats.json").read_text()) == {}
    assert "has no adapter for it" in output


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_gather_names_the_job_to_rerun(inputs, tmp_path):
    from stages import update_gather

    params = _params_file(inputs, "gather", jobs=4)
    parts = tmp_path / "update"
    (parts / "0").mkdir(parents=True)  # job 0 never ran: teacher0 is missing
    code = update_gather.main(
        [
            "--params",
            str(params),
            "--arm",
            "population",
            "--gen",
            "1",
            "--parts",
            str(parts),
            "--trained",
            str(tmp_path / "trained"),
            "--log",
            str(tmp_path / "gather.log"),
        ]
    )
    assert code == 1
    assert "rerun update job 0 of population generation 1" in (tmp_path / "gather.log").read_text()
    assert not (tmp_path / "trained").exists()


@pytest.mark.slow
def test_two_processes_per_adapter_take_the_same_step(inputs):
    """update.processes: 2: the stage relaunches itself through `accelerate launch` (2 CPU processes,
    gloo); each scores every other micro-batch and the gradients are summed before the step."""
    from populora.lm.adapters import read_state_dict

    one = _run_jobs(inputs, _params_file(inputs, "four", jobs=4), "four", 4)
    parts = inputs["root"] / "dp2" / "update"
    proc = _update_job(inputs, _params_file(inputs, "dp2", jobs=4, processes=2), 0, parts)  # teacher0
    output = proc.communicate(timeout=900)[0]
    assert proc.returncode == 0, output[-4000:]
    assert "launching 2 processes" in output and "(2 processes" in output, output[-3000:]
    single_stats = json.loads((one / "update_stats.json").read_text())["teacher0"]
    stats = json.loads((parts / "0" / "update_stats.json").read_text())["teacher0"]
    assert stats["micro_batches"] >= 2 and stats["optimizer_steps"] == single_stats["optimizer_steps"] == 2
    assert stats["losses"] == pytest.approx(single_stats["losses"], rel=1e-5, abs=1e-7)
    assert stats["sampler_logprob_max_abs_diff"] == pytest.approx(
        single_stats["sampler_logprob_max_abs_diff"], abs=1e-6
    )
    expected, got = (
        read_state_dict(one / "adapters" / "teacher0"),
        read_state_dict(parts / "0" / "adapters" / "teacher0"),
    )
    for key in expected:
        torch.testing.assert_close(got[key], expected[key], rtol=1e-5, atol=1e-6)
    before = read_state_dict(inputs["state"] / "adapters" / "teacher0")
    assert any(not torch.equal(before[k], got[k]) for k in before)  # it trained
    assert (parts / "0" / "optimizer" / "teacher0.safetensors").is_file()


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_bf16_mixed_precision_trains_float32_adapters(inputs):
    """update.mixed_precision: bf16 (the GPU overlay) runs the forward under Accelerate's autocast; the
    adapter and its moments stay float32 (on CPU: CPU autocast, the same code path)."""
    from safetensors import safe_open

    parts = inputs["root"] / "bf16" / "update"
    proc = _update_job(
        inputs, _params_file(inputs, "bf16", jobs=4, mixed_precision="bf16", gradient_checkpointing=True), 0, parts
    )
    output = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, output[-3000:]
    assert "mixed precision bf16" in output
    stats = json.loads((parts / "0" / "update_stats.json").read_text())["teacher0"]
    assert stats["optimizer_steps"] == 2 and stats["sampler_logprob_max_abs_diff"] < 2e-2  # bf16 scores vs fp32 sampler
    for path in (
        parts / "0" / "adapters" / "teacher0" / "adapter_model.safetensors",
        parts / "0" / "optimizer" / "teacher0.safetensors",
    ):
        with safe_open(str(path), "pt") as handle:
            assert {str(handle.get_tensor(k).dtype) for k in handle.keys()} == {"torch.float32"}, path


@pytest.mark.slow  # subprocess-heavy (DVC / Snakemake / sandboxes / training jobs): CI's full lane, not the fast one
def test_the_stage_takes_split_steps_from_params(inputs):
    """`update.step_rollouts: split` through the stage: each adapter's two steps over its two halves (every rollout
    trained on once), so the same steps and trained tokens as two epochs over all of them, and other adapters."""
    epochs = _run_jobs(inputs, _params_file(inputs, "one", jobs=1), "one", 1)
    split = _run_jobs(inputs, _params_file(inputs, "split", jobs=1, step_rollouts="split"), "split", 1)
    by_epochs, by_split = (json.loads((t / "update_stats.json").read_text()) for t in (epochs, split))
    from populora.lm.adapters import read_state_dict

    for slot in SLOTS:
        assert by_split[slot]["optimizer_steps"] == by_epochs[slot]["optimizer_steps"] == 2
        assert by_split[slot]["trained_tokens"] == by_epochs[slot]["trained_tokens"]
        assert [row["on_policy"] for row in by_split[slot]["steps"]] == [True, False]
        a, b = read_state_dict(epochs / "adapters" / slot), read_state_dict(split / "adapters" / slot)
        assert any(not torch.equal(a[k], b[k]) for k in a), slot
