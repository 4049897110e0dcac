"""The task world's ground floor, torch-free: what a task is and how it is shown and read back.

`tasks` (task rows, seeds, the buffer, program keys), `program_metrics` (complexity of a program), `parsing`
(a proposal's or an answer's text back into fields), `plans` and `prompts` (the teacher's and the solver's
prompts as plans of steps), `roles` (who proposes and solves what), and `families` (the task families every
measuring and training tool draws from: programs composed from typed primitives, split by program text into
train, validation and pool). `verifier/` checks tasks on this floor; `rl/` trains on them.
"""
