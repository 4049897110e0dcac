"""The population between generations: TrueSkill ratings and pairing (ratings), replacement, fitness
and lineage (evolution), the LoRA weight-space operators (operators), and how different the members
are: in weight space (diversity, torch) and in their held-out verdicts (agreement, torch-free).
"""
