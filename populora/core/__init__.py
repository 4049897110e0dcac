"""Infrastructure every stage may use: atomic artifact I/O (io), the path names inside folder outputs (paths),
who a model is (refs), the typed rows between stages (rows), the checkpoint state (state), the seed of
every random draw (seeds), the benchmark data catalogue (benchmark_data) and the progress of long
loops (progress: a bar on a terminal, plain log lines elsewhere); and the stage host (stagehost: stages run
in forks of one process that imported torch, transformers and PEFT once).
"""
