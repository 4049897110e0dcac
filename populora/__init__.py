"""PopuLoRA: population-based asymmetric self-play RLVR with LoRA adapters on one frozen base.

Library code lives here (pure, unit-tested pieces); `stages/` holds thin command-line shells
around it, and `workflow/dag.py` declares the stage DAG that drives Snakemake and DVC.
"""

__version__ = "0.1.0"
