"""The warm start in the report: what it trained on, its loss curve and answer accuracy per step, and its cost.

`record` is `results/warm_start.json` (stages/warm_start.py, populora/warmstart/run.py).

    lines = warm_start_section(record, out_dir)      # Markdown lines; draws out_dir/warm_start.png
"""

from __future__ import annotations

from pathlib import Path

NOTE = (
    "A supervised LoRA fine-tune of the raw base on verified code_o/code_i tasks of the train task families "
    "(populora/tasks/families.py), in the solver's exact prompt and answer format, merged into the warm base: "
    "the frozen base of every later stage. A departure from zero data (README); its budget was chosen on "
    "held-out programs by study/warm-start/."
)


def plot_warm_start(steps: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from populora.core.io import write_figure

    seen = [sum(s["examples"] for s in steps[: k + 1]) for k in range(len(steps))]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.4))
    axes[0].plot(seen, [s["loss"] for s in steps], marker=".")
    axes[0].set(title="answer-token loss per step", xlabel="training examples seen", ylabel="cross-entropy (nats)")
    axes[1].plot(seen, [s["token_accuracy"] for s in steps], marker=".", label="answer tokens (argmax = gold)")
    axes[1].plot(seen, [s["exact"] for s in steps], marker=".", label="whole answers (every token right)")
    axes[1].set(title="train accuracy per step (teacher-forced)", xlabel="training examples seen", ylim=(0, 1))
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    write_figure(path, fig)
    plt.close(fig)


def warm_start_section(record: dict | None, out_dir: Path) -> list[str]:
    """Markdown lines of the report's warm-start section (and its figure in `out_dir`); none without a record."""
    if not record:
        return []
    if not record.get("enabled"):
        return [
            "## The warm start",
            "",
            "Off (`warm_start.enabled: false`): the base every stage uses is the raw base itself.",
            "",
        ]
    settings = record.get("settings", {})
    plot_warm_start(record["steps"], out_dir / "warm_start.png")
    tasks = ", ".join(f"{n} {t}" for t, n in record["tasks"].items())
    final = record["final"]
    return [
        "## The warm start",
        "",
        NOTE,
        "",
        f"{record['examples']} examples ({tasks}) from {len(record['families'])} families, "
        f"{len(record['steps'])} optimizer steps at learning rate {settings.get('learning_rate')}, LoRA rank "
        f"{settings.get('rank')} on {', '.join(settings.get('target_modules', []))}, in {record['dtype']}. "
        f"Over the last steps: loss {final['loss']:.3f}, answer-token accuracy {100 * final['token_accuracy']:.1f}%, "
        f"whole answers {100 * final['exact']:.1f}% (teacher-forced, on the examples being trained on).",
        "",
        f"Cost: {record['wall_s']:.0f} s in all ({record['verify_s']:.0f} s verifying the tasks, "
        f"{record['train_s']:.0f} s training, {record['merge_s']:.0f} s merging); {record['tokens']:,} tokens "
        f"({record['answer_tokens']:,} of them answers, the only ones in the loss) at "
        f"{record['tokens_per_s']:.0f} tokens/s.",
        "",
        "![The warm start's loss and train accuracy per step](warm_start.png)",
        "",
    ]
