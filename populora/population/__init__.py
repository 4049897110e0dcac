"""The population between generations: TrueSkill ratings and pairing (ratings), replacement, fitness
and lineage (evolution), and the LoRA weight-space operators (operators).
"""
