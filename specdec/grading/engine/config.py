"""The instructor's settings: which families count, their points and Gradescope visibility.

Read from a small TOML file (specdec/grading/grading.toml documents every key and holds the
defaults written here; a test keeps the two equal) or from the JSON the Gradescope zip
carries (the autograder's Python may predate `tomllib`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

from specdec.grading.engine.worker_setup import installed_distribution
from specdec.grading.exercises import EXERCISES

DEFAULT = Path(__file__).parents[1] / "grading.toml"  # specdec/grading/, where instructors find it
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
FAMILIES = {e.kind: e.families for e in EXERCISES}  # kind -> its families, in report order
RULE_FAMILIES = ("rule", "tree-rule")  # scored only when the contract's rule is required


@dataclass(frozen=True)
class FamilySetting:
    weight: float = 1.0  # points when every check of the family passed
    visibility: str = "visible"  # Gradescope's visibility of the family's test


DEFAULT_WEIGHTS = {
    "law": FamilySetting(6.0),
    "rule": FamilySetting(2.0),
    "randomness": FamilySetting(1.0),
    "in-loop": FamilySetting(1.0),
    "loop": FamilySetting(10.0),
    "cache": FamilySetting(10.0),
    "sampling": FamilySetting(10.0),
    "speedup": FamilySetting(10.0),
    "lookup": FamilySetting(10.0),
    "tree-law": FamilySetting(8.0),
    "tree-rule": FamilySetting(2.0),
    "tree-mask": FamilySetting(5.0),
    "tree-positions": FamilySetting(2.0),
    "tree-compaction": FamilySetting(3.0),
    "loop-callables": FamilySetting(10.0),
    "batch-positions": FamilySetting(3.0),
    "batch-mask": FamilySetting(5.0),
    "batch-writes": FamilySetting(2.0),
    "eagle-pairs": FamilySetting(7.0),
    "eagle-round": FamilySetting(3.0),
    "eagle-block": FamilySetting(7.0),
    "eagle-block-round": FamilySetting(3.0),
    "ttt-inputs": FamilySetting(3.0),
    "ttt-loss": FamilySetting(3.0),
    "ttt-gradients": FamilySetting(4.0),
    "eagle-tree": FamilySetting(7.0),
    "eagle-tree-round": FamilySetting(3.0),
}


@dataclass(frozen=True)
class GradingConfig:
    require_rule: bool = True  # must a verify (a tree's too) use min(1, p/q), the optimal
    # acceptance?
    timeout_s: float = 300.0  # the whole grading of one submission, on Gradescope
    submission_file: str = "my_verify.py"  # what the students hand in, on Gradescope
    function: str = "verify"
    kind: str = "auto"
    policy: str = "shrink"
    visibility: str = "visible"
    stdout_visibility: str = "hidden"
    # installed distributions a submitted file may import, beside its exercise's own (numpy,
    # scipy, torch): offered to its worker, pinned in the Gradescope zip's requirements
    libraries: tuple[str, ...] = ()
    families: dict[str, FamilySetting] = field(default_factory=lambda: dict(DEFAULT_WEIGHTS))

    def setting(self, family: str) -> FamilySetting:
        return self.families.get(family, FamilySetting())

    def counts(self, family: str) -> bool:
        """Does the family decide the grade (and carry points)?"""
        return not (family in RULE_FAMILIES and not self.require_rule)

    def points(self, family: str) -> float:
        return self.setting(family).weight if self.counts(family) else 0.0

    def counted(self) -> frozenset[str]:
        return frozenset(f for names in FAMILIES.values() for f in names if self.counts(f))

    def to_dict(self) -> dict:
        data = {k: v for k, v in vars(self).items() if k != "families"}
        data["families"] = {name: vars(s) for name, s in self.families.items()}
        return data


def load_config(path: str | Path | None = None) -> GradingConfig:
    """The settings in `path` (TOML or JSON; None: the defaults). Raises ValueError naming
    the key that is wrong."""
    if path is None:
        return GradingConfig()
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--config {path}: no such file")
    text = path.read_text()
    if path.suffix == ".json":
        data = json.loads(text)
    else:
        import tomllib

        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            raise ValueError(f"--config {path}: {error}") from error
    return config_from_dict(data, str(path))


def config_from_dict(data: dict, where: str = "config") -> GradingConfig:
    data = dict(data)
    families = dict(DEFAULT_WEIGHTS)  # a family the file leaves out keeps its default
    for name, setting in data.pop("families", {}).items():
        unknown = set(setting) - {"weight", "visibility"}
        if unknown:
            raise ValueError(f"{where}: families.{name} has unknown keys {sorted(unknown)}")
        families[name] = FamilySetting(**{"weight": 1.0, **setting})
    if "libraries" in data:
        data["libraries"] = libraries_of(data["libraries"], where)
    known = set(GradingConfig.__dataclass_fields__) - {"families"}
    unknown = set(data) - known
    if unknown:
        raise ValueError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(known)})")
    try:
        config = GradingConfig(**data, families=families)
    except TypeError as error:
        raise ValueError(f"{where}: {error}") from error
    for name, setting in [("", config), *((f"families.{n}.", s) for n, s in families.items())]:
        if setting.visibility not in VISIBILITIES:
            raise ValueError(
                f"{where}: {name}visibility must be one of {', '.join(VISIBILITIES)}, "
                f"got {setting.visibility!r}"
            )
    if config.stdout_visibility not in VISIBILITIES:
        raise ValueError(f"{where}: stdout_visibility must be one of {', '.join(VISIBILITIES)}")
    if any(s.weight < 0 for s in families.values()) or config.timeout_s <= 0:
        raise ValueError(f"{where}: weights must be >= 0 and timeout_s > 0")
    return config


def libraries_of(value, where: str = "config") -> tuple[str, ...]:
    """grading.toml's `libraries` -> the installed distributions it names (a distribution's
    name or the module it installs: "scikit-learn" or "sklearn"). Raises ValueError naming
    each one that is not installed where the grader runs."""
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f'{where}: libraries must be a list of names, e.g. ["matplotlib"]')
    found = {name: installed_distribution(name) for name in value}
    missing = [name for name, dist in found.items() if dist is None]
    if missing:
        raise ValueError(
            f"{where}: libraries {missing} are not installed where the grader runs "
            f"({sys.executable}): install them there (pip install {' '.join(missing)}), or "
            "check their spelling"
        )
    return tuple(dict.fromkeys(found.values()))
