"""The study analysis in one place: a grid of runs (controls x seeds) summarised with the statistics of
`populora.core.stats` (the one statistics module, shared with the run report).

    python -m populora.analysis study/learning/runs --plan study/learning/plan.yaml --out study/learning
    python -m populora.analysis --dvc --out results/study        # DVC experiments of your own

* `runs`         committed run folders (scripts/study.sh) -> run records;
* `experiments`  `dvc exp show` -> the same run records (`__main__.load_study` is the one entry for both);
* `plan`         study/<name>/plan.yaml: controls, seeds, tuning seeds, budget, pool, primary endpoint and test;
* `analysis`     `summarize`: per control, between controls across seeds, learning curves, the plan's findings;
* `readings`     per-run tables, training answers that copy, signal accounting, headline spreads;
* `tables`, `figure`  study.md and study.png;
* `calibration`  `python -m populora.analysis.calibration`: coverage of the intervals in simulated null studies.
"""
