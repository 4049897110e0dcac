"""The held-out pool and its scoring: the ruler every learning claim is measured with.

* `pool`    what the pool is (ids, types, worked examples), how it is made (proposed by the base model, or
            reused from a committed file) and kept out of training (`mark_heldout`);
* `scoring` members answer it (greedy verdicts, or the pass rate over k answers at temperature 1);
* `ruler`   pool v3: tasks of the task families' pool split (programs the warm start never saw), calibrated
            on the warm base, no constant, copy or echo answer above 5% of a type (`python -m populora.heldout.ruler`).

Above `verifier/` and `rl/` (it uses both); neither imports it (tests/test_layers.py).
"""
