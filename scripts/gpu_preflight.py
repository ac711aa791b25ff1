"""The device script's first part: is this machine able to run the rest? Seconds, not minutes.

    python3 scripts/gpu_preflight.py          # run by `bash scripts/gpu_check.sh preflight`

1. Versions: Python, NumPy, CuPy, the CUDA runtime and driver, the device.
2. Launches: an elementwise kernel, a reduction, the twin's fused GELU (a kernel compiled on
   the spot: a broken CUDA compiler shows here), a cuBLAS matmul, and the scan and sort the
   sampling uses, each checked against NumPy. Then the fused kernels (gpu/device/kernels.cu,
   compiled by NVRTC), each against its body on the device: a compile error or a wrong number
   does not stop the script -- one line, `KERNELS OFF: <why>`, and the rest of the call runs
   the unfused twin (SPECDEC_GPU_FUSED=0), which still measures something. Then each fused
   kernel is timed against its body at every shape the loops use, and the faster printed
   and kept (gpu/device/kernel_choice.py); and the draft's steps are captured as a CUDA graph
   and replayed (gpu/device/graphs.py), which must draft the tokens of the steps one by one
   (else `GRAPHS OFF: <why>`: pass SPECDEC_GPU_GRAPHS=0 to later calls).
3. Imports: the packages the later parts use, each imported (version printed); then every
   import of every module the later parts reach -- the test files they name, the oracle's
   files, the bench, this script's plug-in, and the project modules those import, followed
   through the repository -- is looked up without running it. A module-level import that is
   missing fails; one inside a function (run only on some paths) is a warning.
4. The data: the bundled pair, and the held-out prompts the bench cuts from the stdlib.

The first failure stops it with one line, `PREFLIGHT FAILED: <what>: <why>`, and exit code 1;
`ok` lines otherwise. With SPECDEC_GPU_BACKEND=numpy (the dry run in CI) CuPy may be absent:
the launches then run on NumPy, which checks this script and nothing about a device.
"""

from __future__ import annotations

import ast
import contextlib
import importlib
import importlib.util
import os
import platform
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# what the device's python3 has, and all it has: nothing can be installed there
DEVICE_PACKAGES = (
    "cupy",
    "numpy",
    "scipy",
    "pytest",
    "hypothesis",
    "safetensors",
    "torch",
    "transformers",
    "tokenizers",
)
# the files the later parts of scripts/gpu_check.sh run or load (keep in step with it)
ENTRY_GLOBS = (
    "tests/conftest.py",
    "tests/twin/*.py",
    "tests/distribution/*.py",
    "specdec/measure/gpu_bench.py",
    "scripts/specdec_oracle_scale.py",
)
LOCAL_ROOTS = {"gpu", "specdec", "reference", "tests", "scripts"}
LOCAL_FLAT = {"specdec_oracle_scale": "scripts/specdec_oracle_scale.py"}  # PYTHONPATH=scripts


class PreflightError(Exception):
    pass


def fail(what: str, why: object) -> None:
    raise PreflightError(f"{what}: {why}")


def ok(what: str, detail: str = "") -> None:
    print(f"ok    {what}{': ' + detail if detail else ''}", flush=True)


# ------------------------------------------------------------------ 1. versions


def on_device_wanted() -> bool:
    return os.environ.get("SPECDEC_GPU_BACKEND", "auto") != "numpy"


def versions() -> None:
    import numpy as np

    ok("python", f"{platform.python_version()} ({sys.executable})")
    ok("numpy", np.__version__)
    try:
        import cupy
    except Exception as error:  # not installed, or installed without its CUDA libraries
        if on_device_wanted():
            fail("import cupy", f"{type(error).__name__}: {error}")
        ok("cupy", f"absent ({type(error).__name__}); NumPy mode, a dry run: no device checked")
        return
    runtime = cupy.cuda.runtime
    try:
        props = runtime.getDeviceProperties(cupy.cuda.Device().id)
        detail = (
            f"{cupy.__version__}; CUDA runtime {runtime.runtimeGetVersion()}, driver "
            f"{runtime.driverGetVersion()}; {props['name'].decode()}, compute capability "
            f"{props['major']}.{props['minor']}, {props['totalGlobalMem'] / 2**30:.0f} GiB"
        )
    except Exception as error:
        if on_device_wanted():
            fail("cupy sees no usable CUDA device", f"{type(error).__name__}: {error}")
        ok("cupy", f"{cupy.__version__}, no usable device; NumPy mode, a dry run")
        return
    if int(cupy.__version__.split(".")[0]) < 14:
        fail("cupy version", f"{cupy.__version__}; the twin needs CuPy >= 14 (pyproject, gpu)")
    ok("cupy", detail)


# ------------------------------------------------------------------ 2. launches


def launch(name: str, run, expected, rtol: float) -> None:
    # run() on the device -> compared with the NumPy value `expected`
    import numpy as np

    from gpu.device.backend import to_host

    start = time.perf_counter()
    try:
        got = to_host(run())
    except Exception as error:
        fail(f"launch: {name}", f"{type(error).__name__}: {error}")
    seconds = time.perf_counter() - start
    if not np.allclose(got, expected, rtol=rtol, atol=1e-5):
        fail(f"launch: {name}", "wrong numbers (compared with NumPy)")
    ok(f"launch: {name}", f"{seconds * 1e3:.0f} ms (first call: compiling included)")


def launches() -> None:
    import numpy as np

    from gpu import model
    from gpu.device.backend import ON_DEVICE, backend_name, to_device, xp
    from gpu.sampling import STABLE

    if on_device_wanted() and not ON_DEVICE:
        fail("the twin's backend", f"{backend_name()} although SPECDEC_GPU_BACKEND wants CuPy")
    ok("the twin's backend", backend_name())
    host = np.linspace(-4, 4, 1 << 16, dtype=np.float32)
    a = np.random.default_rng(0).standard_normal((384, 1536)).astype(np.float32)
    x = to_device(host)
    launch("elementwise (x * 2 + 1)", lambda: x * np.float32(2) + np.float32(1), host * 2 + 1, 1e-6)
    launch("reduction (sum)", lambda: x.sum(dtype=np.float64), host.sum(dtype=np.float64), 1e-9)
    launch("the twin's fused GELU", lambda: model.gelu(x), model_gelu_on_host(host), 1e-5)
    launch("matmul (cuBLAS)", lambda: to_device(a[:8]) @ to_device(a.T), a[:8] @ a.T, 1e-4)
    y = x[:512]
    launch(
        "scan and stable sort (sampling)",
        lambda: xp.concatenate([xp.cumsum(y), xp.argsort(-y, **STABLE).astype(np.float32)]),
        np.concatenate([np.cumsum(host[:512]), np.argsort(-host[:512], kind="stable")]),
        1e-4,
    )


def fused_kernels() -> None:
    # every kernel of gpu/device/kernels.cu against its body, both on the device; wrong
    # numbers turn the kernels off for the rest of this call (gpu_check.sh reads the marker
    # file) instead of stopping the call: the twin then runs unfused, and says so
    import numpy as np

    from gpu.device import kernels
    from gpu.device.backend import to_host

    if not kernels.kernels_on():
        ok("fused kernels", f"{kernels.kernel_state()}: the bodies run, nothing to launch")
        return
    start = time.perf_counter()
    try:
        kernels.compiled_module()
    except Exception as error:
        why = f"{type(error).__name__}: {error}"
        kernels_off(f"NVRTC could not compile gpu/device/kernels.cu: {why}")
        return
    compiled = time.perf_counter() - start
    for name, kernel, body, exact in kernel_cases():
        try:
            got, want = to_host(kernel()), to_host(body())
        except Exception as error:
            kernels_off(f"{name}: {type(error).__name__}: {error}")
            return
        same = np.array_equal(got, want) if exact else np.allclose(got, want, atol=1e-4)
        if not same:
            kernels_off(f"{name}: wrong numbers (compared with its body on the device)")
            return
    ok("fused kernels", f"compiled in {compiled:.1f} s; each kernel agrees with its body")


def twin_loops(pair=None, new_tokens: int = 12):
    # -> a run of the twin's loops on a pair (the bundled one by default): an autoregressive
    # run and a speculative one at k = 5 (1-row steps, 2-row catch-ups, 6- and 7-row
    # verification passes, the draws and the decision), every draft step launched one by one
    import numpy as np

    import gpu
    from gpu.device.graphs import graphs_off
    from reference.sampling import GREEDY
    from specdec.bundled import load_bundled_pair

    target_ref, draft_ref = load_bundled_pair() if pair is None else pair
    target = gpu.GPT(target_ref.config, target_ref.params)
    draft = gpu.ModelDrafter(gpu.GPT(draft_ref.config, draft_ref.params))
    prompt = np.frombuffer(b"def area(self):\n    return ", np.uint8).astype(np.int64)

    def run():
        kw = dict(rng=np.random.default_rng(0), sampling=GREEDY)
        with graphs_off():
            gpu.generate(target, prompt, max_new_tokens=4, **kw)
            return gpu.speculative_generate(
                target, draft, prompt, k=5, max_new_tokens=new_tokens, **kw
            )

    return run


def kernel_choices(run=None, timer=None) -> None:
    # each fused kernel against its body (cuBLAS / xp calls) at every shape and row count
    # the loops use, on this device; the faster kept for this process and printed
    # (gpu/device/kernel_choice.py). run, timer: the tests' (a tiny pair, made-up timings)
    from gpu.device import kernels
    from gpu.device.kernel_choice import describe, device_seconds, measure_choices

    if not kernels.kernels_on():
        ok("kernel choices", f"kernels {kernels.kernel_state()}: nothing to choose")
        return
    start = time.perf_counter()
    try:
        measured = measure_choices(run or twin_loops(), timer or device_seconds)
    except Exception as error:
        fail("kernel choices", f"{type(error).__name__}: {error}")
    for m in measured:
        print(f"      {describe(m)}", flush=True)
    bodies = sum(m.choice == "body" for m in measured)
    ok("kernel choices", f"{len(measured)} (kernel, shapes) timed in "
       f"{time.perf_counter() - start:.1f} s; the body is faster at {bodies}")  # fmt: skip


def graph_replay(pair=None, new_tokens: int = 16) -> None:
    # the draft's steps captured as a CUDA graph and replayed (gpu/device/graphs.py): the
    # same tokens as the steps launched one by one, or graphs off (with why) for this call
    import numpy as np

    import gpu
    from gpu.device import graphs, kernels
    from reference.sampling import GREEDY
    from specdec.bundled import load_bundled_pair

    if not graphs.graphs_on():
        ok("graph capture", graphs.graph_state())
        return
    target_ref, draft_ref = load_bundled_pair() if pair is None else pair
    target = gpu.GPT(target_ref.config, target_ref.params)
    prompt = np.frombuffer(b"def area(self):\n    return ", np.uint8).astype(np.int64)

    def tokens(graphs_wanted: bool):
        draft = gpu.ModelDrafter(gpu.GPT(draft_ref.config, draft_ref.params))
        kw = dict(k=5, max_new_tokens=new_tokens, rng=np.random.default_rng(0), sampling=GREEDY)
        with contextlib.nullcontext() if graphs_wanted else graphs.graphs_off():
            return list(gpu.speculative_generate(target, draft, prompt, **kw).tokens)

    try:
        # like with like: a graph holds kernels only, so the steps launched one by one run
        # the kernels too (not the cuBLAS bodies measured faster for some shapes), and a
        # near-tie cannot flip a token between the two and turn graphs off for nothing
        with kernels.kernels_everywhere():
            plain, replayed = tokens(False), tokens(True)
    except Exception as error:
        graphs.turn_off(f"{type(error).__name__}: {error}")
    else:
        if plain != replayed:
            graphs.turn_off("a replay drafted other tokens than the steps one by one")
    if not graphs.graphs_on():
        marker = os.environ.get("GPU_CHECK_GRAPHS_OFF")  # gpu_check.sh: later steps, no graphs
        if marker:
            Path(marker).write_text(graphs.graph_state() + "\n")
        print(f"GRAPHS OFF: {graphs.graph_state()}; pass SPECDEC_GPU_GRAPHS=0 to later calls",
              flush=True)  # fmt: skip
        return
    ok("graph capture", "the draft's steps replayed as a graph draft the same tokens")


def kernels_off(why: str) -> None:
    from gpu.device import kernels

    kernels.turn_off(why)
    marker = os.environ.get("GPU_CHECK_FUSED_OFF")  # gpu_check.sh: later steps run unfused
    if marker:
        Path(marker).write_text(why + "\n")
    print(f"KERNELS OFF: {why}; the later steps of this call run with SPECDEC_GPU_FUSED=0 "
          "(pass it to later calls too)", flush=True)  # fmt: skip


def kernel_cases():
    # -> (name, kernel call, body call, exact?): small inputs, on the device
    import numpy as np

    import gpu
    from gpu import sampling, verification
    from gpu.device import fused
    from gpu.device.backend import to_device
    from gpu.kv_cache import KVCache
    from reference.config import GPTConfig
    from reference.model import causal_placement, init_params
    from reference.sampling import GREEDY, SamplingParams

    rng = np.random.default_rng(0)

    def dev(*shape, scale=1.0):
        return to_device((rng.standard_normal(shape) * scale).astype(np.float32))

    x, w, b, g, beta, res = (
        dev(6, 384),
        dev(384, 1152, scale=0.05),
        dev(1152),
        dev(384),
        dev(384),
        dev(6, 1152),
    )
    ln = (g, beta, 1e-5)
    yield ("fused_linear", lambda: fused.fused_linear(x, w, b, ln=ln, act="gelu", resid=res),
           lambda: fused.fused_linear.body(x, w, b, ln=ln, act="gelu", resid=res),
           False)  # fmt: skip
    yield ("layer_norm_rows", lambda: fused.layer_norm_rows(x, g, beta, 1e-5),
           lambda: fused.layer_norm(x, g, beta, 1e-5), False)  # fmt: skip
    wte, wpe, tokens = dev(257, 64), dev(512, 64), to_device(rng.integers(0, 257, 6))
    yield ("embed_rows", lambda: fused.embed(wte, wpe, tokens, slice(9, 15)),
           lambda: fused.embed.body(wte, wpe, tokens, slice(9, 15)), False)  # fmt: skip
    cfg = GPTConfig(n_vocab=257, n_ctx=64, n_embd=384, n_head=6, n_layer=2)
    model = gpu.GPT(cfg, init_params(cfg, np.random.default_rng(0)))  # its config and attend
    caches = [KVCache(2, 6, 64, 64) for _ in range(2)]
    for cache in caches:
        cache.length = 20
    qkv, at = dev(6, 3 * 384), causal_placement(20, 6)
    yield ("cached_attention", lambda: fused.cached_attention(model, qkv, 1, caches[0], at),
           lambda: fused.cached_attention.body(model, qkv, 1, caches[1], at), False)  # fmt: skip
    logits = dev(4, 257, scale=3.0)
    u = to_device(rng.random(4))
    for params in (GREEDY, SamplingParams(temperature=0.8)):
        picked = [to_device(np.zeros(4, np.int64)) for _ in range(2)]
        yield (f"pick_rows ({'greedy' if params.greedy else 'T = 0.8'})",
               lambda p=params, o=picked[0]: (sampling.pick(logits, p, u, tokens=o), o)[1],
               lambda p=params, o=picked[1]:
                   (sampling.pick.body(logits, p, u, tokens=o), o)[1],
               True)  # fmt: skip
    p = to_device(rng.dirichlet(np.ones(257), 6).astype(np.float32))
    q = to_device(rng.dirichlet(np.ones(257), 5).astype(np.float32))
    drafts, uniforms = to_device(rng.integers(0, 257, 5)), to_device(np.r_[0.0, rng.random(5)])
    yield ("decide_packed", lambda: verification.decide_packed(p, q, drafts, uniforms),
           lambda: verification.decide_packed.body(p, q, drafts, uniforms), True)  # fmt: skip


def model_gelu_on_host(x):
    from reference.model import gelu

    return gelu(x)


# ------------------------------------------------------------------ 3. imports


def packages() -> None:
    for name in DEVICE_PACKAGES:
        if name == "cupy" and not on_device_wanted():
            continue  # checked (or found absent) above
        try:
            module = importlib.import_module(name)
        except Exception as error:
            fail(f"import {name}", f"{type(error).__name__}: {error}")
        extra = ""
        if name == "torch":
            extra = f" (CUDA: {'yes' if module.cuda.is_available() else 'no'})"
        ok(f"import {name}", f"{getattr(module, '__version__', '?')}{extra}")


def module_file(name: str) -> Path | None:
    # a project module's source file, or None when `name` is not the project's
    if name in LOCAL_FLAT:
        return ROOT / LOCAL_FLAT[name]
    if name.split(".")[0] not in LOCAL_ROOTS:
        return None
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None  # a namespace folder, or a name inside a module: nothing more to read


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path):
    # -> [(imported module name, line, lazy)]: lazy = inside a function; imports in a `try`
    # (optional ones, such as CuPy's) or under `if TYPE_CHECKING` are left out
    found = []

    def visit(node, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Try) or (
                isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test)
            ):
                continue
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, lazy) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: from the file's package
                    package = module_name(path)
                    if path.name != "__init__.py":
                        package = package.rpartition(".")[0]
                    up = package.split(".")[: len(package.split(".")) - (child.level - 1)]
                    base = ".".join(up + ([base] if base else []))
                found.append((base, child.lineno, lazy))
                found.extend((f"{base}.{alias.name}", child.lineno, lazy) for alias in child.names)
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def reached_imports() -> None:
    # every import of every module the later parts reach, looked up without running them
    todo = [(path, False) for pattern in ENTRY_GLOBS for path in sorted(ROOT.glob(pattern))]
    seen: dict[Path, bool] = {}  # module file -> reached lazily only
    missing, lazy_missing = [], []
    while todo:
        path, lazy = todo.pop()
        if path in seen and (seen[path] is False or lazy):
            continue
        seen[path] = lazy
        for name, line, lazy_import in imports_of(path):
            where = f"{path.relative_to(ROOT)}:{line}"
            local = module_file(name)
            if local is not None:  # the module, and the packages above it, which run first
                parts = name.split(".")
                parents = [module_file(".".join(parts[:i])) for i in range(1, len(parts))]
                for found in [local, *filter(None, parents)]:
                    todo.append((found, lazy or lazy_import))
            elif name.split(".")[0] not in LOCAL_ROOTS | set(LOCAL_FLAT):
                why = import_problem(name)
                if why:  # one line per package and place: `a.b` and `a.c` are both `a`
                    item = f"{name.split('.')[0]} ({where}): {why}"
                    (lazy_missing if lazy or lazy_import else missing).append(item)
    for item in sorted(set(lazy_missing)):
        print(f"warn  imported inside a function, run on some paths only: {item}", flush=True)
    if missing:
        fail(
            "a module the device script reaches imports a package the device lacks (it has "
            f"only {', '.join(DEVICE_PACKAGES)} and the standard library)",
            sorted(set(missing))[0],
        )
    ok(
        "imports",
        f"{len(seen)} project modules reached; every module-level import is the standard "
        "library's or a device package's, and installed",
    )


def import_problem(name: str) -> str | None:
    # None when `name`'s top-level package is the standard library's, or one of the device's
    # packages and installed here; else what is wrong (a name inside a module, such as
    # `numpy.random.Generator`, is judged by its package)
    top = name.split(".")[0]
    if top in sys.builtin_module_names or top in sys.stdlib_module_names:
        return None
    if top not in DEVICE_PACKAGES:
        return "not among the device's packages"
    try:
        found = importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):
        found = False
    return None if found or (top == "cupy" and not on_device_wanted()) else "not installed"


# ------------------------------------------------------------------ 4. data


def data() -> None:
    from specdec.bundled import bundled_pair_available
    from specdec.measure.bench import held_out_code_prompts

    if not bundled_pair_available():
        fail("the bundled pair", "models/target and models/draft are missing")
    ok("the bundled pair", "models/target, models/draft")
    prompts = held_out_code_prompts(6)
    if len(prompts) < 6:
        fail("the bench's prompts", f"{len(prompts)} held-out stdlib files, the bench needs 6")
    ok("the bench's prompts", "6 held-out files of this Python's stdlib")


def main() -> int:
    sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]
    start = time.perf_counter()
    try:
        versions()
        launches()
        fused_kernels()
        kernel_choices()
        graph_replay()
        packages()
        reached_imports()
        data()
    except PreflightError as error:
        print(f"PREFLIGHT FAILED: {error}", flush=True)
        return 1
    except Exception as error:  # whatever else broke: still one line, still a stop
        print(f"PREFLIGHT FAILED: unexpected {type(error).__name__}: {error}", flush=True)
        return 1
    print(f"PREFLIGHT OK in {time.perf_counter() - start:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
