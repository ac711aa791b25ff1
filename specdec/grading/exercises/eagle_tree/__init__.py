"""The EAGLE-2 growth exercise (notebooks/exercises/my_eagle_tree.py, grow_eagle_tree).
checks.py: two families, every check exact: the tree and the passes on toy drafters (cases.py:
the cases and the submission's call; rule.py: the contract and its slips; asking.py: the
`confidence` callable handed over, one pass per call) with the usual slips named
(mistakes.py), and the growth inside a real EAGLE drafter in the reference's tree loop
(round.py)."""
