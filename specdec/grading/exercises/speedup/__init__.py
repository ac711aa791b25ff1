"""The speedup exercise (notebooks/exercises/my_speedup.py, plan_k). checks.py: one
family, each answer held against specdec.costs' formulas."""
