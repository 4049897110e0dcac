"""One self-play step: prompts and parsing, who proposes and solves what (roles, tasks), rewards,
rollouts and TRR++ advantages, the policy-gradient update, and one generation's metrics
(generation_metrics, program_metrics).
"""
