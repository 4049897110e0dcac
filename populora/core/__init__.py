"""Infrastructure every stage may use: atomic artifact I/O (io), the path names inside folder outputs (paths),
who a model is (refs), the typed rows between stages (rows), the checkpoint state (state), the seed of
every random draw (seeds) and the benchmark data catalogue (benchmark_data).
"""
