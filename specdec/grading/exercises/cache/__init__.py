"""The cache exercise (notebooks/exercises/my_cache.py, SlotCache). checks.py: one family,
scripts of writes, commits and rollbacks held against the grader's own model of the cache."""
