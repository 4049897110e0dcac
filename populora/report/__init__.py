"""Reporting in one place.

* `panels`      the one list of training-dynamics panels, shared by the DVC plots (workflow/plots.py)
                and the PNG figures;
* `metrics`     the flat `results/metrics.json` (`benchmark_metrics`: roles, arm-independent keys,
                Wilson intervals, paired-bootstrap differences): metric maths only;
* `figures`     the benchmark figure and the family tree (atomic PNG writes);
* `tables`      the report's benchmark tables and claims, read from the metrics;
* `dynamics`    the training-dynamics figures (n per point, Wilson bands on rates);
* `live`        the live history (the dynamics tables while the run goes on, progress.json) and
                `trackers` (TensorBoard, W&B offline) fed from it;
* `headline`    `results/headline.json`, the run's few dozen headline figures (the DVC metrics);
* `markdown`    `write_report`: `report.md` with all figures;
* `html`        `report.html`: report.md as one self-contained page (figures inlined);
* `timings`     the per-job timings of a Snakemake run (its `benchmark:` files), summed per stage.

The study analysis across runs and seeds lives in `populora.analysis` (`python -m populora.analysis`), the
statistics both use in `populora.core.stats`.
"""

# one arm's training dynamics, one row per generation: <dynamics>/<arm>/dynamics.json, written by
# the dynamics stage (its path set in workflow/dag.py), read by the report stage
DYNAMICS_TABLE = "dynamics.json"
DYNAMICS_SUMMARY = "summary.json"  # per arm, next to DYNAMICS_TABLE: the last generation's values and the run's totals
HELDOUT_VERDICTS = "heldout_verdicts.json"  # per arm, next to DYNAMICS_TABLE: the held-out pool's verdicts
