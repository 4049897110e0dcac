"""One self-play training step on the task floor (`populora.tasks`): rewards, TRR++ / per-task advantages,
rollouts, the sequences an update scores, the LoRA policy-gradient update and its job, and one generation's
metrics (generation_metrics)."""
