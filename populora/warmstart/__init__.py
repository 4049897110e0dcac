"""The warm start: a supervised fine-tune of the base model on verified tasks of the train task families, in the
solver's exact format, merged into the frozen base of every later stage (stages.warm_start).

* verified tasks of a split come from `populora.verifier.families` (golds from the sandbox; copy/echo-solved out);
* `examples` a task as the solver sees it and the answer it should give (prompt, prefill, target ids);
* `train`    the LoRA fine-tune (loss on the answer tokens) and the merge into a plain HF folder;
* `run`      the stage's work from start to end, and its record;
* `measure`, `sweep`, `study`  what it buys: the budget sweep and raw against warm
  (`python -m populora.warmstart.study`).
"""
