"""specdec-lab's lab: the tools around the core (`reference/`, and its `gpu/` twin).

Its rooms, from the bottom up (docs/architecture.md; a module imports its own room or one
below, never one above, and tests/unit/test_imports.py checks it):

    (this level)  the shared pieces: costs, machine, timing, text, report, bundled,
                  standins, course, explorer
    training/     the corpus and the training of the bundled pair and its self-drafting parts
    figures/      every figure of the notebooks and docs
    fast_cpu/     the opt-in CPU fast path of the model, and the plan that picks its tricks
    drafting.py   the drafters the command and the bench run, by name
    measure/      what is timed here: the bench, the GPU bench, the method table, roofline ...
    grading/      the exercises' grader (`specdec grade`, `specdec grade-class`)
    oracle/       the statistical oracle's machinery (docs/oracle.md)
    cli/          the `specdec` command: one module per command (demo, bench, course)

The modules at this level:

    costs.py      what a forward pass costs here, and Leviathan's prediction from it
    machine.py    which machine a number came from; the BLAS threads a run chooses
    timing.py     stage clocks the loops mark as they go
    text.py       the tokenizer a checkpoint pair is read and written with
    report.py     text renderings of a run (the demo's account)
    bundled.py    the trained pair that ships in models/
    standins.py   untrained stand-in models (a random target, a noisy draft)
    course.py     the notebooks and exercises unpacked for a student (`specdec course DIR`)
    explorer.py   one real round step by step: draft, verify, settle, commit (notebook 06)

The core never imports this package (tests/unit/test_layout.py says so).

The modules that moved into fast_cpu/ and measure/ keep their old names for one release:
importing `specdec.bench` (say) warns and hands back `specdec.measure.bench` itself.
"""

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old dotted name -> where the module lives now; dropped in the release after this one
MOVED = {
    "specdec.bench": "specdec.measure.bench",
    "specdec.bench_summary": "specdec.measure.summary",
    "specdec.choose_k": "specdec.measure.choose_k",
    "specdec.fast_cpu_compiled": "specdec.fast_cpu.compiled",
    "specdec.fast_cpu_draw": "specdec.fast_cpu.draw",
    "specdec.fast_cpu_plan": "specdec.fast_cpu.plan",
    "specdec.fast_cpu_report": "specdec.measure.fast_path_report",
    "specdec.fast_cpu_step": "specdec.fast_cpu.step",
    "specdec.gpu_bench": "specdec.measure.gpu_bench",
    "specdec.methods": "specdec.measure.methods",
    "specdec.roofline": "specdec.measure.roofline",
    "specdec.session_costs": "specdec.measure.session_costs",
    "specdec.typical": "specdec.measure.typical",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers the old names of MOVED, and only those: the import gets the new module (the
    same object, so its state is shared) and a DeprecationWarning naming the new path."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None  # every other name is found, or not, as usual
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} has moved to {new}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,  # importlib's own frames are skipped: this names the importing line
        )
        module = importlib.import_module(new)
        spec.loader_state = module.__spec__  # the import machinery sets __spec__ to this spec
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state  # ... so the module gets its own back

    def get_code(self, fullname):
        # `python -m specdec.roofline`: runs the moved module; a FutureWarning, since a person
        # typed the command and Python hides a DeprecationWarning that is not from __main__
        new = MOVED[fullname]
        message = f"run `python -m {new}`: {fullname} goes in the next release"
        warnings.warn(message, FutureWarning, stacklevel=1)
        return importlib.util.find_spec(new).loader.get_code(new)


if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
    sys.meta_path.append(MovedModuleFinder())
