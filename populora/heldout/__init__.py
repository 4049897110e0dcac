"""The held-out pool and its scoring: the ruler every learning claim is measured with.

* `pool`    what the pool is (ids, types, worked examples), how it is made (proposed by the base model, or
            reused from a committed file) and kept out of training (`mark_heldout`);
* `scoring` members answer it (greedy verdicts, or the pass rate over k answers at temperature 1);
* `ruler`   pool v2: tasks a constant answer cannot pass, calibrated on the base model
            (`python -m populora.heldout.ruler`).

Above `verifier/` and `selfplay/` (it uses both); neither imports it (tests/test_layers.py).
"""
