"""The study's controls and accounting: the null (advantages shuffled within TRR++ groups), evolution
off, the role-matched baseline update, the distance an adapter moved, and the run's totals."""

from __future__ import annotations

import random
from collections import Counter

import pytest
import torch
from accelerate import Accelerator

from populora.config import EvolveSection, UpdateSection
from populora.lm.adapters import delta_norm
from populora.report.summary import accounting, arm_summary
from populora.rl.advantages import group_key, shuffle_within_groups
from stages.evolve import evolves


def _rollouts(n_per_group: int = 5, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    rows = []
    for adapter in ("teacher0", "student0", "solo"):
        for role in ("propose", "solve"):
            for task_type in ("code_o", "code_i", "code_f"):
                for k in range(n_per_group):
                    rows.append(
                        {
                            "adapter": adapter,
                            "role": role,
                            "type": task_type,
                            "task_id": f"{adapter}-{task_type}-{k}",
                            "reward": rng.choice([1.0, -0.5, -1.0]),
                            "segments": [{"ids": [k]}],
                            "advantage": None if k == 0 else round(rng.uniform(-2, 2), 3),
                        }
                    )
    return rows


def test_null_shuffles_only_within_groups_and_keeps_every_other_field():
    rows = _rollouts()
    shuffled = shuffle_within_groups(rows, seed=3)
    assert len(shuffled) == len(rows)
    for before, after in zip(rows, shuffled):  # same order, same fields, same values but the advantage
        assert {k: v for k, v in before.items() if k != "advantage"} == {
            k: v for k, v in after.items() if k != "advantage"
        }
        if before["advantage"] is None:
            assert after["advantage"] is None

    def by_group(items):
        groups: dict = {}
        for r in items:
            groups.setdefault((r["adapter"], group_key(r["role"], r["type"])), []).append(r["advantage"])
        return groups

    original, permuted = by_group(rows), by_group(shuffled)
    assert original.keys() == permuted.keys()
    for key in original:  # each group keeps its multiset of advantages
        assert Counter(original[key]) == Counter(permuted[key]), key
    moved = sum(a["advantage"] != b["advantage"] for a, b in zip(rows, shuffled))
    assert moved > len(rows) // 3, "a shuffle that moves almost nothing is no null"
    assert rows[1]["advantage"] == _rollouts()[1]["advantage"], "the input rows are not modified"
    assert shuffle_within_groups(rows, seed=3) == shuffled, "seeded"
    assert shuffle_within_groups(rows, seed=4) != shuffled


@pytest.mark.parametrize(
    "replace,interval,arm,expected",
    [
        (0, 1, "population", [False] * 6),  # evolution off: never, whatever the schedule
        (0, 2, "population", [False] * 6),
        (1, 2, "population", [False, True, False, True, False, True]),
        (1, 1, "baseline", [False] * 6),  # the baseline never evolves
    ],
)
def test_evolution_schedule_and_evolution_off(replace, interval, arm, expected):
    section = EvolveSection(replace=replace, interval=interval)
    assert [evolves(arm, gen, section) for gen in range(6)] == expected


@pytest.mark.slow
def test_controls_run_end_to_end(tmp_path_factory, tiny_params_dict):
    """Through Snakemake on tiny params: 2T-2S with evolution off and the null, the role-matched
    baseline, and code_f tasks of 6 inputs, one generation. Evolution (replace 0) was not scheduled and replaced
    nobody; the null's update says it shuffled; the accounting keys are in the generation's metrics and make the
    run's totals; the per-role baseline took `steps` per role; the empty pool's record."""
    import json

    import yaml

    from tests.conftest import copy_snakemake_entry, without_warm_start_or_pool
    from tests.test_pipeline_smoke import _snakemake

    root = tmp_path_factory.mktemp("controls")
    copy_snakemake_entry(root)
    params = without_warm_start_or_pool(tiny_params_dict)
    # one generation (evolution would be due after every one: interval 1) and one update job per arm: fewer
    # model loads; the totals' sums over several generations are tested on synthetic rows below
    params["dag"] = {**params["dag"], "generations": 1, "update_jobs": 1}
    params["evolve"] = {**params["evolve"], "interval": 1, "replace": 0}
    params["update"] = {**params["update"], "steps": 2, "shuffle_advantages": True, "role_steps": "per_role"}
    # and a non-default code_f shape (issue 19): 6 inputs, 3 shown + 3 hidden, from prompts to grading
    params["propose"] = {**params["propose"], "code_f_inputs": 6}
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    targets = [f"results/dynamics/{arm}/summary.json" for arm in ("population", "baseline")]
    result = _snakemake(root, *targets)
    assert result.returncode == 0, result.stderr[-4000:]
    read = lambda path: json.loads((root / path).read_text())  # noqa: E731
    evolution = read("results/population/gen000/evolved/evolution.json")
    assert not evolution["scheduled"] and evolution["events"] == [], "evolve.replace: 0 never schedules or replaces"
    stats = read("results/population/gen000/trained/update_stats.json")
    assert all(row["advantages_shuffled"] for row in stats.values())
    # heldout.per_type 0: an empty pool, scored by nobody, its record the same keys as a generation not scored
    assert read("results/population/gen000/heldout.json") == {
        "metrics": {},
        "verdicts": {},
        "born": {},
        "roles": {"students": ["student0", "student1"]},
        "pass_rates": {},
    }
    state = read("results/population/gen000/checkpoint/state.json")
    assert all(event["operator"] == "init" for event in state["lineage"])
    for arm, slots in (("population", ["teacher0", "teacher1", "student0", "student1"]), ("baseline", ["solo"])):
        rows = [read(f"results/{arm}/gen000/metrics.json")]
        summary = read(f"results/dynamics/{arm}/summary.json")
        for slot in slots:
            for what in ("optimizer_steps", "trained_tokens", "rollouts_with_signal"):
                assert summary[f"total.{what}.{slot}"] == sum(row[f"{what}.{slot}"] for row in rows)
            assert summary[f"final.delta_norm.{slot}"] == rows[-1][f"delta_norm.{slot}"] >= 0
    for arm in ("population", "baseline"):
        buffer = [json.loads(line) for line in (root / f"results/{arm}/init/buffer.jsonl").read_text().splitlines()]
        assert all(len(t["inputs"]) == 6 for t in buffer if t["type"] == "code_f") and buffer
        tasks = [json.loads(line) for line in (root / f"results/{arm}/gen000/tasks.jsonl").read_text().splitlines()]
        # a parsed code_f proposal has exactly 6 inputs (one scaffold step per input), which the verifier
        # accepts as the right count; one that did not parse has none and is invalid for its parse reason
        parsed = [t for t in tasks if t["type"] == "code_f" and not t.get("parse_reason")]
        assert all(len(t["inputs"]) == 6 and t["reason"] != "wrong_input_count" for t in parsed)
        answers = [json.loads(line) for line in (root / f"results/{arm}/gen000/answers.jsonl").read_text().splitlines()]
        prompt = next(a["segments"][0]["text"] for a in answers if a["type"] == "code_f")
        assert "input_2" in prompt and "input_3" not in prompt, "3 of 6 pairs shown"
    baseline = read("results/baseline/gen000/trained/update_stats.json")["solo"]
    rollouts = [json.loads(line) for line in (root / "results/baseline/gen000/rollouts.jsonl").read_text().splitlines()]
    roles_with_signal = {r["role"] for r in rollouts if r.get("advantage")}
    assert baseline["optimizer_steps"] == 2 * len(roles_with_signal)


def test_delta_norm_is_the_frobenius_norm_of_b_a_and_ignores_how_it_is_factored():
    torch.manual_seed(0)
    state = {}
    expected = 0.0
    for module in ("q_proj", "v_proj"):
        a, b = torch.randn(4, 16), torch.randn(12, 4)
        state[f"base.layers.0.{module}.lora_A.weight"] = a
        state[f"base.layers.0.{module}.lora_B.weight"] = b
        expected += torch.linalg.matrix_norm(b.double() @ a.double()).item()
    assert delta_norm(state) == pytest.approx(expected, rel=1e-7)
    # the same B A split differently (B S, S^-1 A): same distance, different max |B|
    scale = torch.diag(torch.tensor([4.0, 0.5, 2.0, 0.25]))
    refactored = {k: (v @ scale if "lora_B" in k else torch.linalg.inv(scale) @ v) for k, v in state.items()}
    assert delta_norm(refactored) == pytest.approx(expected, rel=1e-7)
    assert max(v.abs().max() for k, v in refactored.items() if "lora_B" in k) != max(
        v.abs().max() for k, v in state.items() if "lora_B" in k
    )
    zero_b = {k: (torch.zeros_like(v) if "lora_B" in k else v) for k, v in state.items()}
    assert delta_norm(zero_b) == 0.0


def test_accounting_keys_exist_and_add_up():
    rows = [
        {
            "generation": g,
            "optimizer_steps.teacher0": 2,
            "optimizer_steps.student0": g % 2 * 2,
            "trained_tokens.teacher0": 100 + g,
            "trained_tokens.student0": 50,
            "rollouts_with_signal.teacher0": 3,
            "rollouts_with_signal.student0": g,
            "delta_norm.teacher0": 0.1 * (g + 1),
            "delta_norm.student0": 0.05,
        }
        for g in range(4)
    ]
    roles = {"teachers": ["teacher0"], "students": ["student0"]}
    out = accounting(rows, roles)
    assert out["total.optimizer_steps.teacher0"] == 8
    assert out["total.optimizer_steps.student0"] == 4
    assert out["total.trained_tokens.teacher0"] == 100 + 101 + 102 + 103
    assert out["total.rollouts_with_signal.student0"] == 0 + 1 + 2 + 3
    assert out["final.delta_norm.teacher0"] == pytest.approx(0.4)
    assert out["per_adapter.teachers.optimizer_steps"] == 8
    assert out["per_adapter.students.delta_norm"] == pytest.approx(0.05)
    summary = arm_summary(rows, roles)
    assert summary["total.optimizer_steps.teacher0"] == 8 and summary["generations"] == 4
    # the baseline's one slot is both roles: its per-adapter figures are its own in both
    solo = accounting(
        [
            {
                "optimizer_steps.solo": 4,
                "trained_tokens.solo": 10,
                "rollouts_with_signal.solo": 5,
                "delta_norm.solo": 1.5,
            }
        ],
        {"teachers": ["solo"], "students": ["solo"]},
    )
    assert solo["per_adapter.teachers.optimizer_steps"] == solo["per_adapter.students.optimizer_steps"] == 4


@pytest.mark.slow  # stage subprocesses on the tiny model: the full suite runs it
def test_per_role_update_takes_steps_per_role(tiny_model_dir, tmp_path):
    """role_steps: per_role gives an adapter in both roles `steps` optimizer steps per role; joint
    gives `steps` in all (the single agent's mixed update)."""
    from populora.lm.model import attach_adapters, load_base
    from populora.rl.update import reinforce_steps
    from tests.test_generation_update import _adapters, _sampled_rollouts

    adapters = _adapters(tiny_model_dir, tmp_path)
    rows, results = _sampled_rollouts(tiny_model_dir, adapters)
    rollouts = [
        {"segments": r.segments, "advantage": adv, "role": role}
        for row, r, adv, role in zip(rows, results, [1.0, -1.0, 0.5, -0.5, 1.0, -1.0] * 2, ["propose", "solve"] * 6)
        if row.adapter == "a"
    ]
    assert {r["role"] for r in rollouts} == {"propose", "solve"}
    taken = {}
    for mode in ("joint", "per_role"):
        tokenizer, model = load_base(tiny_model_dir)
        tokenizer.padding_side = "right"
        model = attach_adapters(model, adapters, trainable="a")
        stats = reinforce_steps(
            Accelerator(cpu=True),
            model,
            tokenizer,
            "a",
            rollouts,
            UpdateSection(steps=2, learning_rate=1e-2, micro_batch=2, max_seq_len=4096, role_steps=mode),
            optimizer_file=None,
            optimizer_out=tmp_path / f"opt-{mode}.safetensors",
        )
        taken[mode] = stats
    assert taken["joint"]["optimizer_steps"] == 2
    assert taken["per_role"]["optimizer_steps"] == 4
    assert taken["joint"]["trained_tokens"] == taken["per_role"]["trained_tokens"]
    only_solve = [r for r in rollouts if r["role"] == "solve"]
    tokenizer, model = load_base(tiny_model_dir)
    tokenizer.padding_side = "right"
    model = attach_adapters(model, adapters, trainable="a")
    stats = reinforce_steps(
        Accelerator(cpu=True),
        model,
        tokenizer,
        "a",
        only_solve,
        UpdateSection(steps=2, micro_batch=2, role_steps="per_role"),
        optimizer_file=None,
        optimizer_out=tmp_path / "o.safetensors",
    )
    assert stats["optimizer_steps"] == 2, "a student (one role) takes `steps` either way"


def test_uniform_fill_in_draws_from_the_whole_buffer():
    from populora.tasks.roles import assign_tasks, fill_in_order

    buffer = [
        {"task_id": f"t{g}", "type": "code_o", "gen": g, "program": f"def f(x):\n    return x + {g}"}
        for g in range(-1, 9)
    ]
    pairing = {"teachers": ["teacher0"], "students": ["student0"], "counts": {"teacher0": {"student0": 1}}}
    newest = assign_tasks(pairing, [], buffer)["student0"]["code_o"]
    assert [t["task_id"] for t in newest] == ["t8"] and newest[0]["origin"] == "buffer"
    picked = Counter(
        assign_tasks(pairing, [], buffer, fill_in="uniform", rng=random.Random(seed))["student0"]["code_o"][0][
            "task_id"
        ]
        for seed in range(200)
    )
    assert set(picked) == {t["task_id"] for t in buffer}, "every buffer task can be a fill-in"
    assert max(picked.values()) < 50
    order = fill_in_order(buffer, "code_o", "uniform", random.Random(1))
    assert sorted(t["task_id"] for t in order) == sorted(t["task_id"] for t in buffer)
    with pytest.raises(ValueError):
        fill_in_order(buffer, "code_o", "uniform", None)


def test_task_types_limit_what_is_proposed_and_solved():
    from populora.tasks.roles import assign_tasks, proposer_jobs
    from populora.tasks.tasks import seed_proposals

    buffer = [{**row, "outputs": ["0"] * len(row["inputs"]), "valid": True} for row in seed_proposals("builtin")]
    jobs = proposer_jobs(
        ["teacher0"],
        buffer,
        per_type=2,
        references=1,
        n_inputs=10,
        mode="scaffolded",
        chat=lambda p: p,
        rng=random.Random(0),
        arm="population",
        gen=0,
        types=("code_o", "code_i"),
    )
    assert Counter(meta["type"] for meta, _ in jobs) == {"code_o": 2, "code_i": 2}
    pairing = {"teachers": ["teacher0"], "students": ["student0"], "counts": {"teacher0": {"student0": 1}}}
    assignment = assign_tasks(pairing, [], buffer, types=("code_o",))
    assert list(assignment["student0"]) == ["code_o"]
    everything = proposer_jobs(
        ["teacher0"],
        buffer,
        per_type=1,
        references=1,
        n_inputs=10,
        mode="scaffolded",
        chat=lambda p: p,
        rng=random.Random(0),
        arm="population",
        gen=0,
    )
    assert [meta["type"] for meta, _ in everything] == ["code_o", "code_i", "code_f"]
