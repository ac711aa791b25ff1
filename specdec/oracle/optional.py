"""The oracle's two costly imports, written once: each is made at the first setup (or broken
variant) that needs it, never when the oracle is imported.

* the twin (`gpu`): on a machine with CuPy, importing it asks for a CUDA device; only the
  twin's setups and variants need it;
* the compiled draw (`specdec.fast_cpu.draw`): numba takes about a second to import; only
  the setups of the fast path's drafter, and its broken variant, need it."""

from __future__ import annotations

from types import ModuleType


def twin() -> ModuleType:  # -> the gpu package
    import gpu  # the twin: CuPy and a CUDA device, only for the twin's setups and variants

    return gpu


def compiled_draw() -> ModuleType:  # -> specdec.fast_cpu.draw
    import specdec.fast_cpu.draw  # numba: 1.1 s to import, only for the compiled draw's setups

    return specdec.fast_cpu.draw
