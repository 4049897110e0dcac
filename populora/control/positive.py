"""The positive control: can this update make the model better at anything? Solver-only RL of one
adapter on a task family where learning is possible, against the same updates without signal.

    python -m populora.control.positive --params params.yaml --overlay params/positive-control.yaml \
        --base-model results/base_model --out study/positive-control

Everything is the project's own: the solver prompt and plan (`populora.tasks.roles.solver_jobs`),
the sampler (`populora.lm.sampling.run_plans`, sampling from the PEFT model being trained), the
answer parser, the sandboxed verifier and grader, the rewards and advantages
(`populora.rl.rollouts.build_rollouts`, `reward.advantage_baseline`) and the update
(`populora.rl.update.AdapterUpdate`, the `update` section). Only the tasks differ: a family of
`populora.tasks.families` (programs that vary), a held-out pool whose programs never appear in training.

Arms, from the same initial adapter and seeds: `real` (the advantages as computed), `shuffled` (the
same updates with advantages shuffled within their group: the null, equal steps without signal), and
the base model. Each training step samples `control.samples` answers at `control.temperature` for
`control.tasks_per_step` fresh tasks, grades them and updates; every `control.eval_every` steps the
held-out pool is answered greedily. Written to --out: `result.json` (per step: training reward,
solve rate and the update's diagnostics; per evaluation: held-out accuracy; per arm: the final
per-task verdicts; the comparisons with exact McNemar p; pass or fail), `control.md` and
`curves.png`. An arm that finished is kept in `arms/<arm>.json` and not run again.
"""

from __future__ import annotations

import argparse
import logging
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path

from populora.config import ParamsError, load_overlaid
from populora.core.io import read_json, write_json, write_text
from populora.core.seeds import derive_seed as seed_of
from populora.tasks.families import FAMILIES, family_tasks

log = logging.getLogger("positive_control")
ADAPTER = "control"


def load_params(params: str | Path, overlays: list[str | Path] | str | Path | None):
    return load_overlaid(params, [overlays] if isinstance(overlays, (str, Path)) else overlays or [])


class Solver:
    """The project's solver pipeline around one PEFT model: prompts, sampling, parsing, grading."""

    def __init__(self, model, tokenizer, buffer: list[dict], params, sandbox):
        from populora.tasks.prompts import chat_wrapper

        self.model, self.tokenizer, self.buffer, self.params, self.sandbox = model, tokenizer, buffer, params, sandbox
        self.chat = chat_wrapper(tokenizer)

    def answer(self, tasks: list[dict], *, samples: int, temperature: float, seed: int, desc: str) -> list[dict]:
        """Graded answer rows (`populora.core.rows.GradedAnswer` fields), `samples` per task."""
        from populora.lm.sampling import GenRow, run_plans
        from populora.tasks.parsing import parse_answer
        from populora.tasks.roles import solver_jobs
        from populora.verifier import grade_rows

        cfg = self.params.solve
        jobs = solver_jobs(
            {ADAPTER: {"code_o": tasks}},
            self.buffer,
            samples=samples,
            worked_examples=cfg.worked_examples,
            mode=cfg.mode,
            chat=self.chat,
            rng=random.Random(seed),
        )
        results = run_plans(
            self.model,
            self.tokenizer,
            [GenRow(plan, None) for _, plan in jobs],
            temperature=temperature,
            top_p=cfg.top_p,
            max_new_tokens=cfg.max_new_tokens,
            batch_size=cfg.batch_size,
            seed=seed,
            desc=desc,
        )
        rows = []
        for (meta, _), result in zip(jobs, results):
            answer, reason = parse_answer(result.completion, "code_o", mode=cfg.mode, truncated=result.truncated)
            rows.append(
                {
                    **meta,
                    "answer": answer,
                    "parse_reason": reason,
                    "segments": result.segments,
                    "tokens": result.tokens_generated,
                }
            )
        return grade_rows(tasks, rows, self.params.verify, sandbox=self.sandbox)

    def heldout_verdicts(self, tasks: list[dict], seed: int) -> list[bool]:
        """Greedy answers to the held-out pool, one per task (the same prompts at every evaluation)."""
        graded = self.answer(tasks, samples=1, temperature=0.0, seed=seed, desc="held-out")
        return [bool(row["correct"]) for row in graded]


def run_arm(
    arm: str, params, base_model: Path, init_adapter: Path, tasks: dict, buffer: list[dict], sandbox, accelerator
) -> dict:
    """Train one arm from the initial adapter; its per-step rows and held-out evaluations."""
    control = params.control
    model, tokenizer, update = _trainable_model(params, base_model, init_adapter, accelerator)
    solver = Solver(model, tokenizer, buffer, params, sandbox)
    eval_seed = seed_of(control.seed, "heldout")
    steps, evaluations = [], {}
    started = time.monotonic()
    for step in range(control.steps):
        batch = tasks["train"][step * control.tasks_per_step : (step + 1) * control.tasks_per_step]
        row = _train_step(arm, step, batch, params, solver, update)
        steps.append(row)
        _log_step(arm, row)
        if (step + 1) % control.eval_every == 0 or step + 1 == control.steps:
            verdicts = solver.heldout_verdicts(tasks["heldout"], eval_seed)
            evaluations[step + 1] = verdicts
            log.info("%s after step %d: held-out accuracy %.3f", arm, step + 1, sum(verdicts) / len(verdicts))
    return {
        "arm": arm,
        "steps": steps,
        "wall_s": round(time.monotonic() - started, 1),
        "heldout": {
            str(k): {"accuracy": sum(v) / len(v), "verdicts": [int(x) for x in v]} for k, v in evaluations.items()
        },
    }


def _trainable_model(params, base_model: Path, init_adapter: Path, accelerator):
    """(model, tokenizer, update): the base with the initial adapter, trainable, and its seeded update."""
    import torch

    from populora.lm.model import attach_adapters, load_base
    from populora.rl.update import AdapterUpdate

    tokenizer, base = load_base(base_model, dtype=params.model.dtype, device=str(accelerator.device))
    tokenizer.padding_side = "left"  # the sampler pads left; the update builds its own right-padded batches
    model = attach_adapters(base, {ADAPTER: str(init_adapter)}, trainable=ADAPTER)
    model.eval()
    torch.manual_seed(seed_of(params.control.seed, "update"))
    return model, tokenizer, AdapterUpdate(accelerator, model, tokenizer, ADAPTER, params.update)


def _train_step(arm: str, step: int, batch: list[dict], params, solver: Solver, update) -> dict:
    """One training step on `batch`: answers sampled and graded, rollouts (shuffled in the null arm), the update."""
    from populora.rl.advantages import shuffle_within_groups
    from populora.rl.rollouts import build_rollouts

    control = params.control
    t0 = time.monotonic()
    graded = solver.answer(
        batch,
        samples=control.samples,
        temperature=control.temperature,
        seed=seed_of(control.seed, "train", step),
        desc=f"{arm} step {step}",
    )
    rollouts = build_rollouts(
        [], graded, params.reward.teacher_mode, params.reward.advantage_baseline, params.reward.scale_rewards
    )
    if arm == "shuffled":
        rollouts = shuffle_within_groups(rollouts, seed_of(control.seed, "null", step))
    t1 = time.monotonic()
    stats = update.train(rollouts)
    return {
        "step": step,
        "solve_rate": sum(r["correct"] for r in graded) / len(graded),
        "reward_mean": sum(r["reward"] for r in rollouts) / len(rollouts),
        "malformed": sum(r.get("parse_reason") is not None for r in graded),
        "sample_s": round(t1 - t0, 1),
        "update_s": round(time.monotonic() - t1, 1),
        **{
            k: stats[k]
            for k in (
                "rollouts_with_signal",
                "trained_tokens",
                "tasks_without_spread",
                "tasks_sampled_more_than_once",
            )
        },
        "optimizer_steps": stats["steps"],
    }


def _log_step(arm: str, row: dict) -> None:
    """Log a training step's row, with its last optimizer step's loss and log-probability changes."""
    last = row["optimizer_steps"][-1] if row["optimizer_steps"] else {}
    log.info(
        "%s step %d: solve rate %.3f, %d rollouts with signal, loss %s, logprob change A>0 %s A<0 %s "
        "(%.0f s sampling+grading, %.0f s update)",
        arm,
        row["step"],
        row["solve_rate"],
        row["rollouts_with_signal"],
        _fmt(last.get("loss")),
        _fmt(last.get("logprob_change_positive")),
        _fmt(last.get("logprob_change_negative")),
        row["sample_s"],
        row["update_s"],
    )


def _fmt(value) -> str:
    return "-" if value is None else f"{value:+.4f}"


def base_verdicts(params, base_model: Path, tasks: dict, buffer: list[dict], sandbox, device: str) -> list[bool]:
    from populora.lm.model import load_base

    tokenizer, model = load_base(base_model, dtype=params.model.dtype, device=device)
    return Solver(model, tokenizer, buffer, params, sandbox).heldout_verdicts(
        tasks["heldout"], seed_of(params.control.seed, "heldout")
    )


def compare(params, base: list[bool], arms: dict[str, dict]) -> dict:
    """Final held-out accuracy per arm, differences in points with exact McNemar p, and the verdict."""
    from populora.core.stats import mcnemar_exact, paired_bootstrap

    final = {
        name: [bool(x) for x in arm["heldout"][str(params.control.steps)]["verdicts"]] for name, arm in arms.items()
    }
    final["base"] = base
    pairs = [
        (a, b) for a, b in (("real", "base"), ("real", "shuffled"), ("shuffled", "base")) if a in final and b in final
    ]
    comparisons = {}
    for a, b in pairs:
        mean, low, high = paired_bootstrap([int(x) - int(y) for x, y in zip(final[a], final[b])])
        comparisons[f"{a} - {b}"] = {
            "points": round(100 * mean, 1),
            "interval": [round(100 * low, 1), round(100 * high, 1)],
            **mcnemar_exact(final[a], final[b]),
        }
    control = params.control
    needed = [c for c in ("real - base", "real - shuffled") if c in comparisons]
    passed = len(needed) == 2 and all(
        comparisons[c]["points"] >= control.min_gain and comparisons[c]["p"] < control.max_p for c in needed
    )
    return {
        "accuracy": {name: round(100 * sum(v) / len(v), 1) for name, v in final.items()},
        "comparisons": comparisons,
        "passed": passed,
        "bar": f"real - base and real - shuffled >= {control.min_gain:g} points, each exact McNemar p < {control.max_p:g}",
    }


def _family_about(name: str) -> str:
    """What a family is, for the page's title; a result of an earlier generator (study/positive-control/ ran
    `maximum` before issue 55 replaced the families) still renders."""
    return FAMILIES[name].about if name in FAMILIES else "a family of an earlier task generator"


def markdown(result: dict) -> str:
    """control.md: what ran and the verdict, the final held-out accuracies and their paired comparisons, the
    held-out accuracy by step, and each step's training answers and update diagnostics."""
    c = result["control"]
    lines = [
        f"# Positive control: `{c['family']}` ({_family_about(c['family'])})",
        "",
        _md_setup(result),
        "",
        _md_wall(result),
        "",
        f"**{'PASS' if result['summary']['passed'] else 'FAIL'}** ({result['summary']['bar']}).",
        *_md_accuracy(result["summary"]),
        *_md_comparisons(result["summary"]["comparisons"]),
        *_md_curve(result),
        *_md_step_diagnostics(result["arms"]),
        "",
        f"Command: `{result['command']}`",
        "",
    ]
    return "\n".join(lines)


def _md_setup(result: dict) -> str:
    """What each arm ran: steps, tasks, answers, the held-out pool and the update's settings."""
    c, update = result["control"], result["update"]
    loss_type = update.get("loss_type") or update.get("loss_reduction")  # before issue 49: loss_reduction
    return (
        f"{c['steps']} steps x {c['tasks_per_step']} tasks x {c['samples']} answers at temperature "
        f"{c['temperature']}; held-out pool {c['heldout']} tasks, greedy. Update: lr {update['learning_rate']:g}, "
        f"{update['steps']} optimizer step(s) per batch, loss per {loss_type}, "
        f"advantage baseline {result['advantage_baseline']}, scaled by {result.get('scale_rewards', 'none')}."
    )


def _md_wall(result: dict) -> str:
    """Where the time went: the base model's held-out answers, each arm, this invocation, and on what machine."""
    return (
        "Wall: base model on the held-out pool "
        + (f"{result['base_wall_s'] / 60:.1f} min" if result.get("base_wall_s") is not None else "(not recorded)")
        + "; "
        + ", ".join(f"{name} {arm['wall_s'] / 60:.1f} min" for name, arm in result["arms"].items())
        + f" (each in its own process when run with --jobs); this invocation {result['wall_s'] / 60:.1f} min, on "
        f"{result['machine']['cpus']} CPU(s) ({result['machine']['cpu']})."
    )


def _md_accuracy(summary: dict) -> list[str]:
    lines = ["", "| arm | held-out accuracy (%) |", "| --- | ---: |"]
    return lines + [f"| {name} | {acc} |" for name, acc in summary["accuracy"].items()]


def _md_comparisons(comparisons: dict) -> list[str]:
    lines = [
        "",
        "| difference | points | 95% paired bootstrap | only first / only second | exact McNemar p |",
        "| --- | ---: | --- | --- | ---: |",
    ]
    for name, comp in comparisons.items():
        lines.append(
            f"| {name} | {comp['points']:+.1f} | [{comp['interval'][0]:+.1f}, {comp['interval'][1]:+.1f}] | "
            f"{comp['first_only']} / {comp['second_only']} | {comp['p']:.3g} |"
        )
    return lines


def _md_curve(result: dict) -> list[str]:
    """Held-out accuracy by step, one column per arm; step 0 is the base model's accuracy in every column."""
    arms = result["arms"]
    lines = [
        "",
        "Held-out accuracy (%) by step:",
        "",
        "| step | " + " | ".join(arms) + " |",
        "| ---: | " + " | ".join("---:" for _ in arms) + " |",
    ]
    lines.append("| 0 | " + " | ".join(f"{result['summary']['accuracy']['base']}" for _ in arms) + " |")
    for step in _steps(next(iter(arms.values()))):
        lines.append(
            f"| {step} | " + " | ".join(f"{100 * arm['heldout'][step]['accuracy']:.1f}" for arm in arms.values()) + " |"
        )
    return lines


def _md_step_diagnostics(arms: dict) -> list[str]:
    lines = [
        "",
        "Per step (training answers; the update's diagnostics of the step's last optimizer step):",
        "",
        "| arm | step | solve rate | with signal | loss | grad norm | entropy | logprob change A>0 | A<0 |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for name, arm in arms.items():
        for row in arm["steps"]:
            d = row["optimizer_steps"][-1] if row["optimizer_steps"] else {}
            lines.append(
                f"| {name} | {row['step']} | {row['solve_rate']:.3f} | {row['rollouts_with_signal']} | "
                f"{_fmt(d.get('loss'))} | {d.get('grad_norm', 0):.3f} | {d.get('entropy') or 0:.3f} | "
                f"{_fmt(d.get('logprob_change_positive'))} | {_fmt(d.get('logprob_change_negative'))} |"
            )
    return lines


def _steps(arm: dict) -> list[str]:
    """The steps an arm was evaluated at, in order (JSON keys are strings: "16" sorts before "8")."""
    return sorted(arm["heldout"], key=int)


def plot(result: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from populora.core.io import write_figure

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    base = result["summary"]["accuracy"]["base"]
    for name, arm in result["arms"].items():
        steps = _steps(arm)
        axes[0].plot(
            [0] + [int(s) for s in steps],
            [base] + [100 * arm["heldout"][s]["accuracy"] for s in steps],
            marker="o",
            label=name,
        )
        axes[1].plot([r["step"] for r in arm["steps"]], [r["solve_rate"] for r in arm["steps"]], label=name)
        for sign, style in (("positive", "-"), ("negative", "--")):
            values = [
                (r["step"], r["optimizer_steps"][0].get(f"logprob_change_{sign}"))
                for r in arm["steps"]
                if r["optimizer_steps"]
            ]
            values = [(s, v) for s, v in values if v is not None]
            axes[2].plot(
                [s for s, _ in values],
                [v for _, v in values],
                style,
                label=f"{name}, A{'>' if sign == 'positive' else '<'}0",
            )
    axes[0].axhline(base, color="grey", linestyle=":", label="base")
    axes[0].set(title="held-out accuracy (greedy, %)", xlabel="step")
    axes[1].set(title="training solve rate (sampled)", xlabel="step")
    axes[2].axhline(0, color="grey", linewidth=0.5)
    axes[2].set(title="log-prob change per token after the step", xlabel="step")
    for ax in axes:
        ax.legend(fontsize=7)
    fig.tight_layout()
    write_figure(path, fig)
    plt.close(fig)


def run_in_processes(arms: list[str], args: argparse.Namespace) -> None:
    """Train `arms` in up to `jobs` processes at once (this command with --arm), cores / jobs threads each;
    an arm whose process fails is left to the serial loop, which reports its error."""
    import os
    import subprocess

    jobs = args.jobs
    threads = max(1, (os.cpu_count() or 1) // jobs)
    base = [
        sys.executable,
        "-m",
        "populora.control.positive",
        "--params",
        args.params,
        "--base-model",
        args.base_model,
        "--out",
        args.out,
        *(["--overlay", *args.overlay] if args.overlay else []),
    ]
    pending = list(arms)
    running: list[tuple[str, subprocess.Popen]] = []
    while pending or running:
        while pending and len(running) < jobs:
            arm = pending.pop(0)
            log.info("training %s in its own process (%d thread%s)", arm, threads, "" if threads == 1 else "s")
            running.append((arm, subprocess.Popen([*base, "--arm", arm, "--threads", str(threads)])))
        arm, process = running.pop(0)
        if process.wait() != 0:
            log.error("the %s process exited with %d", arm, process.returncode)


def machine() -> dict:
    import os

    model = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else ""
    )
    return {"cpu": model, "cpus": os.cpu_count(), "python": platform.python_version()}


def check_answer_budget(params, base_model: Path, tasks: list[dict]) -> None:
    """Refuse, before any training, an answer budget (`solve.max_new_tokens`) shorter than the family's longest
    gold answer with its closing fence: a right answer cut off is graded wrong."""
    from transformers import AutoTokenizer

    from populora.warmstart.examples import answer_budget

    needed = answer_budget(tasks, AutoTokenizer.from_pretrained(base_model))
    if needed > params.solve.max_new_tokens:
        raise ValueError(
            f"solve.max_new_tokens = {params.solve.max_new_tokens} cannot hold the longest gold answer of "
            f"family {params.control.family!r} ({needed} tokens with its closing fence). Fix: raise "
            f"solve.max_new_tokens to {needed} or more in the control's overlay."
        )


def prepare(params, out: Path, base_model: Path, sandbox) -> tuple[dict, list[dict], Path]:
    """The verified family tasks, the worked-example buffer (the pipeline's seed tasks) and the initial adapter."""
    import torch

    from populora.lm.adapters import create_adapters
    from populora.lm.model import load_base, lora_config
    from populora.tasks.tasks import is_copyable, seed_proposals
    from populora.verifier import verify_rows

    control = params.control
    tasks = family_tasks(
        control.family, heldout=control.heldout, train=control.steps * control.tasks_per_step, seed=control.seed
    )
    verified = {pool: verify_rows(rows, params.verify, sandbox=sandbox) for pool, rows in tasks.items()}
    bad = [row["task_id"] for rows in verified.values() for row in rows if not row["valid"]]
    if bad:
        raise RuntimeError(f"family {control.family!r}: the verifier rejected {bad[:5]}")
    seeds = [
        row
        for row in verify_rows(seed_proposals(params.buffer.seeds), params.verify, sandbox=sandbox)
        if row["valid"] and row["type"] == "code_o"
    ]
    if params.propose.reject_copyable:
        seeds = [row for row in seeds if not is_copyable(row)]
    check_answer_budget(params, base_model, [row for rows in verified.values() for row in rows])
    init = out / "init"
    if not (init / ADAPTER / "adapter_config.json").is_file():
        _, model = load_base(base_model, dtype=params.model.dtype, device="cpu")
        cfg = params.lora
        init.mkdir(parents=True, exist_ok=True)
        torch.manual_seed(0)
        create_adapters(
            model,
            [ADAPTER],
            init,
            lora_cfg=lora_config(cfg.rank, cfg.alpha, cfg.dropout, list(cfg.target_modules)),
            seeds={ADAPTER: seed_of(control.seed, "init")},
            init_std=cfg.init_std,
        )
    return verified, seeds, init / ADAPTER


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s", stream=sys.stderr)
    params = _checked_params(args)
    if params is None:
        return 2
    import torch
    from accelerate import Accelerator

    from populora.lm.model import materialize_base_model
    from populora.verifier.pool import open_sandbox

    if args.threads:
        torch.set_num_threads(args.threads)
    out, base_model = Path(args.out), Path(args.base_model)
    if not (base_model / "config.json").is_file():
        log.info("materializing %s into %s", params.model.base_model, base_model)
        materialize_base_model(params.model.base_model, base_model)
    started = time.monotonic()
    accelerator = Accelerator(cpu=params.model.device == "cpu", mixed_precision=params.update.mixed_precision or "no")
    sandbox = open_sandbox(params.verify, log)
    base_file = out / "arms" / "base.json"
    try:
        tasks, buffer, init = prepare(params, out, base_model, sandbox)
        log.info(
            "family %s: %d training and %d held-out tasks; %d worked examples",
            params.control.family,
            len(tasks["train"]),
            len(tasks["heldout"]),
            len(buffer),
        )
        base = _kept_base_verdicts(base_file, params, base_model, tasks, buffer, sandbox, accelerator)

        def train(arm: str) -> dict:
            return run_arm(arm, params, base_model, init, tasks, buffer, sandbox, accelerator)

        if args.arm:
            write_json(out / "arms" / f"{args.arm}.json", train(args.arm))
            return 0
        arms = _trained_arms(params.control.arms, out / "arms", args, train)
    finally:
        sandbox.close()
    result = _result(params, argv, started, base_file, base, arms)
    write_json(out / "result.json", result)
    write_text(out / "control.md", markdown(result))
    plot(result, out / "curves.png")
    log.info("%s: %s", "PASS" if result["summary"]["passed"] else "FAIL", result["summary"]["comparisons"])
    return 0


def _parse(argv: list[str] | None) -> argparse.Namespace:
    """The command line's arguments."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument(
        "--overlay",
        nargs="*",
        default=[],
        help="params overlays applied in order, e.g. "
        "params/positive-control.yaml (and params/positive-control-bf16.yaml)",
    )
    parser.add_argument("--base-model", required=True, help="HF folder of the base model (made if missing)")
    parser.add_argument("--out", required=True, help="output folder, e.g. study/positive-control")
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        help="arms trained at once, each in its own process with "
        "cores / jobs threads (2 on 2 cores: one thread each scales better than two threads per arm)",
    )
    parser.add_argument("--arm", help="train only this arm (what --jobs starts in each process)")
    parser.add_argument("--threads", type=int, help="torch threads of this process (default: torch's)")
    return parser.parse_args(argv)


def _checked_params(args: argparse.Namespace):
    """The params of --params and --overlay; None, the error logged, when they fail to load or name no family."""
    try:
        params = load_params(args.params, args.overlay)
    except ParamsError as error:
        log.error("%s", error)
        return None
    if params.control.family not in FAMILIES:
        log.error(
            "control.family: unknown task family %r. Fix: use one of %s (populora/tasks/families.py).",
            params.control.family,
            ", ".join(sorted(FAMILIES)),
        )
        return None
    return params


def _kept_base_verdicts(
    base_file: Path, params, base_model: Path, tasks: dict, buffer: list[dict], sandbox, accelerator
) -> list[bool]:
    """The base model's held-out verdicts: kept in `base_file`, else measured and kept there."""
    if base_file.is_file():
        base = [bool(x) for x in read_json(base_file)["verdicts"]]
    else:
        t0 = time.monotonic()
        base = base_verdicts(params, base_model, tasks, buffer, sandbox, str(accelerator.device))
        write_json(base_file, {"verdicts": [int(x) for x in base], "wall_s": round(time.monotonic() - t0, 1)})
    log.info("base held-out accuracy %.3f", sum(base) / len(base))
    return base


def _trained_arms(
    names: list[str], folder: Path, args: argparse.Namespace, train: Callable[[str], dict]
) -> dict[str, dict]:
    """Every arm's record: kept in `folder`, else trained (in processes of their own with --jobs) and kept there."""
    todo = [arm for arm in names if not (folder / f"{arm}.json").is_file()]
    if args.jobs > 1 and len(todo) > 1:
        run_in_processes(todo, args)
    arms = {}
    for arm in names:
        arm_file = folder / f"{arm}.json"
        if arm_file.is_file():
            arms[arm] = read_json(arm_file)
            log.info("%s: kept from %s", arm, arm_file)
            continue
        arms[arm] = train(arm)
        write_json(arm_file, arms[arm])
    return arms


def _result(
    params, argv: list[str] | None, started: float, base_file: Path, base: list[bool], arms: dict[str, dict]
) -> dict:
    """result.json's record: the settings, the machine, the wall times, every arm and their comparison."""
    result = {
        "control": params.control.model_dump(),
        "update": params.update.model_dump(),
        "advantage_baseline": params.reward.advantage_baseline,
        "scale_rewards": params.reward.scale_rewards,
        "solve": {k: getattr(params.solve, k) for k in ("mode", "worked_examples", "max_new_tokens", "top_p")},
        "lora": params.lora.model_dump(),
        "machine": machine(),
        "wall_s": round(time.monotonic() - started, 1),
        "command": "python -m populora.control.positive " + " ".join(argv if argv is not None else sys.argv[1:]),
        "base_wall_s": read_json(base_file).get("wall_s"),
        "arms": arms,
        "summary": compare(params, base, arms),
    }
    result["summary"]["base_verdicts"] = [int(x) for x in base]
    return result


if __name__ == "__main__":
    raise SystemExit(main())
