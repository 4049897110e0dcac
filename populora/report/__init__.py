"""Reporting in one place.

* `panels`      the one list of training-dynamics panels, shared by the DVC plots (workflow/plots.py)
                and the PNG figures;
* `benchmarks`  the flat `results/metrics.json` (`benchmark_metrics`: roles, arm-independent keys,
                Wilson intervals, paired-bootstrap differences), the benchmark figure and tables;
* `dynamics`    the training-dynamics figures (n per point, Wilson bands on rates);
* `markdown`    `write_report`: `report.md` with all figures;
* `study`       `python -m populora.report.study --out DIR`: mean and spread across seeds of DVC
                experiments, per arm and ablation, from `dvc exp show --json`.
"""

# one arm's training dynamics, one row per generation: <dynamics>/<arm>/dynamics.json, written by
# the dynamics stage (its path set in workflow/dag.py), read by the report stage
DYNAMICS_TABLE = "dynamics.json"
