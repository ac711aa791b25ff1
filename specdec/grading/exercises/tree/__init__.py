"""The tree exercise (notebooks/exercises/my_tree.py, verify_tree). checks.py: the two
families (tree-law, tree-rule) and the hints, over cases.py (the sampled trees and their laws)
and walk.py (the contract's rule with switches for the usual mistakes; the submission's call)."""
