"""The bundled weights, shipped in the wheel as the package data of `specdec.models`.

target/ and draft/ are the trained pair, self_draft/ the exit heads and extra heads trained on
the frozen target; `specdec.bundled` finds them through importlib.resources, and
`python -m specdec.training.train_pair` reproduces them (docs/training.md).
"""
