"""The tree-mask exercise (notebooks/exercises/my_tree_mask.py, tree_attention). checks.py:
three families, every check exact (the mask, the positions, the compaction), over cases.py
(the trees, the answers the reference gives, the submission's call) and mistakes.py (the usual
slips, rebuilt, with the hint that names each)."""
