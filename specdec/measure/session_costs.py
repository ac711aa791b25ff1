"""One measurement of a pair's costs (c and v(T)) per session, shared by the notebooks.

    from specdec.measure.session_costs import session_costs
    costs = session_costs(fast(target), fast(draft))  # measured here, or read back
    print(costs.origin())          # "measured now" or "measured 3 min ago (14:02), reused"
    costs.profile.verify_cost(5)   # a specdec.costs.CostProfile, as measure_costs returns

Notebooks 01, 07 and 08 all use c and v(T). Measured three times, on a shared machine whose
load changes by the second, the same v(5) came out as three different numbers. So the first
notebook that asks measures, and the others read the same numbers back from a small file in
the temporary folder. A file is reused only when everything that decides the numbers is the
same: the machine line of `specdec.machine` (CPU, BLAS kernel, BLAS threads), the weights, the
model class (plain model or fast path), the context and the way of measuring; and only for
`MAX_AGE_S` seconds, after which the machine may be doing something else. `max_age_s=0`
measures afresh.

The way of measuring is `specdec.costs.measure_costs` (every T in turn, the fastest of `PASSES`
passes kept) over T = 1 .. `MAX_T` new positions after a cached context of code
(`session_context`); what this module adds is measuring it once and reading it back.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from reference.model import GPT
from reference.tokenizer import encode
from specdec.costs import DRAFT_RUN, CostProfile, measure_costs
from specdec.machine import describe_machine
from specdec.measure.bench import CODE_PROMPTS

MAX_T = 9  # verification of up to k = 8 drafts, the largest k the notebooks sweep
CONTEXT_TOKENS = 128  # the cached context every pass runs after
PASSES = 15  # timed passes per T (and of the draft step), the fastest kept
MAX_AGE_S = 3600.0
METHOD = f"fastest of {PASSES} interleaved passes, T = 1..{MAX_T}, draft x{DRAFT_RUN}"


@dataclass(frozen=True)
class SessionCosts:
    profile: CostProfile
    context: np.ndarray  # [n] the tokens cached before each timed pass
    machine: str  # describe_machine().line() when it was measured
    measured_at: float  # time.time() of the measurement
    reused: bool  # True: read back from an earlier measurement

    def origin(self, now: float | None = None) -> str:
        if not self.reused:
            return "measured now"
        minutes = max(0.0, ((time.time() if now is None else now) - self.measured_at) / 60)
        clock = time.strftime("%H:%M", time.localtime(self.measured_at))
        return f"measured {minutes:.0f} min ago ({clock}), reused"


def session_context(n_ctx: int) -> np.ndarray:
    # [n] the bundled code prompts end to end, cut to CONTEXT_TOKENS (at most a quarter
    # of the context window, so that every pass leaves room)
    tokens = np.concatenate([encode(text) for text in CODE_PROMPTS] * 3)
    return tokens[: min(CONTEXT_TOKENS, n_ctx // 4)]


def model_key(model: GPT) -> str:
    # the class and every weight's bytes in the checkpoint's layout (a fast model stores its
    # weights transposed; same bytes here). Not the fast path's plan (specdec/fast_cpu/plan.py):
    # each process times its tricks afresh, and two plans of the same machine differ only
    # where a trick and the plain computation timed about even, which moves the cost little.
    h = hashlib.blake2b(digest_size=16)
    h.update(type(model).__qualname__.encode())
    for name in sorted(model.params):
        h.update(name.encode())
        h.update(np.ascontiguousarray(model.params[name]).tobytes())
    return h.hexdigest()


def default_cache_dir() -> Path:
    return Path(tempfile.gettempdir()) / "specdec-session-costs"


def session_costs(
    target: GPT,
    draft: GPT,
    cache_dir: Path | None = None,
    max_age_s: float = MAX_AGE_S,
) -> SessionCosts:
    """The pair's CostProfile on this machine: read back if measured within `max_age_s` for
    the same machine line, models and method, else measured now (a few seconds) and saved."""
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    machine = describe_machine().line()
    context = session_context(target.config.n_ctx)
    key = hashlib.blake2b(
        "\n".join(
            [machine, METHOD, model_key(target), model_key(draft), context.tobytes().hex()]
        ).encode(),
        digest_size=16,
    ).hexdigest()
    path = folder / f"{key}.json"
    saved = read_saved(path)
    if saved is not None and 0 <= time.time() - saved.measured_at <= max_age_s:
        return SessionCosts(saved.profile, context, machine, saved.measured_at, reused=True)
    profile = measure_costs(target, draft, context, MAX_T, PASSES)
    result = SessionCosts(profile, context, machine, time.time(), reused=False)
    save(path, result)
    return result


def save(path: Path, costs: SessionCosts) -> None:
    # written to a temporary name and renamed: a notebook running at the same moment reads
    # either the old file or the new one, never half of one
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {
        "machine": costs.machine,
        "measured_at": costs.measured_at,
        "target_step": costs.profile.target_step,
        "draft_step": costs.profile.draft_step,
        "target_append": {str(T): s for T, s in costs.profile.target_append.items()},
    }
    fd, scratch = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)
    os.replace(scratch, path)


@dataclass(frozen=True)
class Saved:
    profile: CostProfile
    measured_at: float


def read_saved(path: Path) -> Saved | None:
    # None when there is no file or it cannot be read as a measurement: measure afresh
    try:
        record = json.loads(path.read_text())
        appends = {int(T): float(s) for T, s in record["target_append"].items()}
        profile = CostProfile(
            target_step=float(record["target_step"]),
            draft_step=float(record["draft_step"]),
            target_append=appends,
        )
        measured_at = float(record["measured_at"])
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    if sorted(appends) != list(range(1, MAX_T + 1)):
        return None
    values = [profile.target_step, profile.draft_step, *appends.values()]
    if not all(math.isfinite(s) and s > 0 for s in values):
        return None
    return Saved(profile, measured_at)
