"""Does a child train like its parent? One update step of parent and child on the same batch.

For each evolution operator: two parents are trained for a few REINFORCE steps (PEFT init, different
seeds, learning-study learning rate), a child is made from them, and then parent and child each take
one optimizer step on one fixed batch of sampled answers. The size of a step is
``sum over modules of ||B'A' - BA||_F`` (how far the step moves the adapter's ``dW``), reported
for: the parent with its carried AdamW moments (what the pipeline does for a survivor), the parent
with fresh moments, the child with fresh moments (the pipeline's choice), the child with its first
parent's moments carried over, and the child as the previous operators made it (``sqrt(S)`` on
both factors, no rebalance: the 8c44929^ code).

    .venv/bin/python perf/child_step.py --base-model results/base_model --json perf/measured/child_step.json
    .venv/bin/python perf/child_step.py --tiny      # the tiny random model of the tests (seconds)

The functions are shared with tests/test_child_step.py.
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from accelerate import Accelerator
from peft import get_peft_model_state_dict, set_peft_model_state_dict

from populora.config import UpdateSection
from populora.core.io import write_json
from populora.lm.adapters import create_adapters, read_state_dict
from populora.lm.model import attach_adapters, load_base, lora_config
from populora.lm.sampling import GenRow, run_plans
from populora.population import operators as ops
from populora.rl.update import AdapterUpdate, save_optimizer
from populora.tasks import prompts

ADAPTER = "x"  # the one trainable adapter slot every trial loads its weights into


def sample_batch(model_dir: Path, *, rows: int, max_new_tokens: int, seed: int = 0) -> list[dict]:
    """`rows` answers of the bare base model to proposer prompts (segments the update trains on)."""
    tokenizer, model = load_base(model_dir)

    def chat(p):
        return tokenizer.apply_chat_template(
            [{"role": "user", "content": p}],
            tokenize=False,
            add_generation_prompt=True,
        )

    plans = [
        prompts.scaffolded_plan(f"Write a Python function f number {i}.", prompts.proposer_steps("code_o", 10), chat)
        for i in range(rows)
    ]
    results = run_plans(
        model,
        tokenizer,
        [GenRow(p, None) for p in plans],
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=max_new_tokens,
        batch_size=rows,
        seed=seed,
    )
    return [{"segments": r.segments} for r in results]


def with_advantages(batch: list[dict], seed: int) -> list[dict]:
    g = torch.Generator().manual_seed(seed)
    signs = torch.randint(0, 2, (len(batch),), generator=g) * 2 - 1
    return [{**row, "advantage": float(s)} for row, s in zip(batch, signs)]


class Trainer:
    """One PEFT model with one trainable adapter; every trial loads its own weights and moments."""

    def __init__(self, model_dir: Path, init_adapter: Path, config: UpdateSection):
        self.tokenizer, base = load_base(model_dir)
        self.tokenizer.padding_side = "right"
        self.model = attach_adapters(base, {ADAPTER: init_adapter}, trainable=ADAPTER)
        self.config = config

    def state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.model, adapter_name=ADAPTER).items()}

    def steps(self, weights: dict, moments: Path | None, batches: list[list[dict]], save_moments: Path | None = None):
        """Load `weights` (and `moments`), take one optimizer step per batch; the weights after."""
        set_peft_model_state_dict(self.model, weights, adapter_name=ADAPTER)
        update = AdapterUpdate(
            Accelerator(cpu=True), self.model, self.tokenizer, ADAPTER, self.config, optimizer_file=moments
        )
        for batch in batches:
            update.train(batch)
        if save_moments is not None:
            save_optimizer(update.optimizer, update.params, update.names, save_moments)
        return self.state()


def step_size(before: dict, after: dict) -> float:
    """sum over modules of ||B'A' - BA||_F: how far one step moved the adapter's dW."""
    total = 0.0
    for m in ops.lora_modules(before):
        old = before[m.b_key].double() @ before[m.a_key].double()
        new = after[m.b_key].double() @ after[m.a_key].double()
        total += float((new - old).norm())
    return total


@contextlib.contextmanager
def previous_refactoring():
    """The operators as they were before 8c44929: sqrt(S) on both factors, no rebalance."""
    saved = ops.isometric_coefficients, ops.rebalance
    ops.isometric_coefficients = lambda S, scale: (S.clamp_min(0).sqrt(),) * 2
    ops.rebalance = lambda child, target: child
    try:
        yield
    finally:
        ops.isometric_coefficients, ops.rebalance = saved


def measure(
    model_dir: Path,
    work: Path,
    *,
    rank: int,
    targets: list[str],
    lr: float,
    parent_steps: int,
    rows: int,
    max_new_tokens: int,
    operators: list[str],
    log=print,
) -> dict:
    """Train two parents, then step every (parent, child) variant once on one fixed batch."""
    _, base = load_base(model_dir)
    create_adapters(
        base,
        ["p1", "p2"],
        work,
        lora_cfg=lora_config(rank, 2.0 * rank, 0.0, targets),
        seeds={"p1": 1, "p2": 2},
        init_std=0.0,
    )
    batch = sample_batch(model_dir, rows=rows, max_new_tokens=max_new_tokens)
    config = UpdateSection(steps=1, learning_rate=lr, micro_batch=rows, max_seq_len=1024)
    trainer = Trainer(model_dir, work / "p1", config)
    parents, moments = [], []
    for k, name in enumerate(("p1", "p2")):
        history = [with_advantages(batch, 100 * k + s) for s in range(parent_steps)]
        parents.append(
            trainer.steps(read_state_dict(work / name), None, history, save_moments=work / f"{name}.moments")
        )
        moments.append(work / f"{name}.moments")
    fixed = with_advantages(batch, 999)
    out = {
        "parent_carried": step_size(parents[0], trainer.steps(parents[0], moments[0], [fixed])),
        "parent_fresh": step_size(parents[0], trainer.steps(parents[0], None, [fixed])),
        "parent_ratio_median": float(
            torch.tensor(
                [float(parents[0][m.a_key].norm() / parents[0][m.b_key].norm()) for m in ops.lora_modules(parents[0])]
            ).median()
        ),
        "operators": {},
    }
    log(f"parent: carried {out['parent_carried']:.4g}, fresh {out['parent_fresh']:.4g}")
    for op in operators:
        chosen = parents if op in ops.CROSSOVERS else parents[:1]
        child = ops.make_child(chosen, op, seed=7, fitness=[1.0, 0.0][: len(chosen)])
        with previous_refactoring():
            old = ops.make_child(chosen, op, seed=7, fitness=[1.0, 0.0][: len(chosen)])
        row = {
            "child_fresh": step_size(child, trainer.steps(child, None, [fixed])),
            "child_carried": step_size(child, trainer.steps(child, moments[0], [fixed])),
            "previous_child_fresh": step_size(old, trainer.steps(old, None, [fixed])),
            "balance_vs_parent": _balance(child, chosen),
            "previous_balance_vs_parent": _balance(old, chosen),
        }
        for key in ("child_fresh", "child_carried", "previous_child_fresh"):
            row[f"{key}_over_parent_carried"] = row[key] / out["parent_carried"]
        out["operators"][op] = row
        log(
            f"{op:18s} child/parent (carried parent): fresh {row['child_fresh_over_parent_carried']:.2f}, "
            f"carried {row['child_carried_over_parent_carried']:.2f}, previous {row['previous_child_fresh_over_parent_carried']:.2f}; "
            f"balance {row['balance_vs_parent']:.2f} (previous {row['previous_balance_vs_parent']:.2f})"
        )
    return out


def _balance(child: dict, parents: list[dict]) -> float:
    """Median over modules of the child's ||A||/||B|| over its parents' geometric mean."""
    values = []
    for m in ops.lora_modules(child):
        ratios = [float(sd[m.a_key].norm() / sd[m.b_key].norm()) for sd in (child, *parents)]
        values.append(ratios[0] / float(torch.tensor(ratios[1:]).log().mean().exp()))
    return float(torch.tensor(values).median())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", default="results/base_model")
    parser.add_argument("--tiny", action="store_true", help="the tests' tiny random model instead")
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--lr", type=float, default=1e-3, help="the learning study's")
    parser.add_argument("--parent-steps", type=int, default=6, help="a learning-study run's steps per member")
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(args.base_model)
        if args.tiny:
            from tests.tiny_model import tiny_model_dir

            model_dir = tiny_model_dir(Path(tmp) / "tiny")
        start = time.perf_counter()
        result = measure(
            model_dir,
            Path(tmp),
            rank=args.rank,
            targets=["q_proj", "k_proj", "v_proj", "o_proj"],
            lr=args.lr,
            parent_steps=args.parent_steps,
            rows=args.rows,
            max_new_tokens=args.max_new_tokens,
            operators=sorted(ops.MUTATIONS) + sorted(ops.CROSSOVERS),
        )
    result.update(
        command="python perf/child_step.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        model="tiny" if args.tiny else str(args.base_model),
        rank=args.rank,
        lr=args.lr,
        parent_steps=args.parent_steps,
        rows=args.rows,
        seconds=round(time.perf_counter() - start, 1),
        machine=platform.processor() or platform.machine(),
    )
    if args.json:
        write_json(args.json, result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
