"""The pipeline's stages, one thin command line each (`python -m stages.<name>`; README "The pipeline").

Off a terminal (a stage log, SLURM's output file) the progress bars of the libraries the stages call
(transformers, lm-eval, datasets) would fill the logs with carriage returns: before any of them is
imported, this package turns tqdm off where a caller does not choose, and redraws at most once a
minute where one does (tqdm's TQDM_* environment defaults; a value the user set wins). The stages'
own progress is `populora.core.progress`: plain log lines there.

Where `POPULORA_STAGE_HOST` names a running stage host (populora/core/stagehost/), `python -m stages.<name>`
hands itself to that host here, before torch, transformers or PEFT is imported, and exits as the stage
run there exits; with no usable host it goes on as below. (Under Snakemake, `POPULORA_STAGE_USAGE_DIR` is set
too: an earlier hosted run's resource figures for this job are removed here, hosted or not.)
"""

import os as _os
import sys as _sys

if not (getattr(_sys.stderr, "isatty", None) and _sys.stderr.isatty()):
    _os.environ.setdefault("TQDM_DISABLE", "1")
    _os.environ.setdefault("TQDM_MININTERVAL", "60")

# `python -m stages.<name>`, with a host named (or the figures of one to clear)
if _sys.argv[:1] == ["-m"] and (_os.environ.get("POPULORA_STAGE_HOST") or _os.environ.get("POPULORA_STAGE_USAGE_DIR")):
    from populora.core.stagehost.standin import delegate as _delegate

    _delegate()  # returns only where the host cannot run the stage
