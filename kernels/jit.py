"""LLVM JIT for the host CPU: initialise llvmlite once, optimise and compile IR text.

Every kernel module is compiled for the exact host CPU (name + feature string), at
``-O3`` through LLVM's new pass manager. Compiled modules live as long as the process
(their execution engines are kept here: function pointers die with their engine), and
are cached by IR text so equal kernels are compiled once. :func:`compile_ahead` compiles
several at once, on helper processes too (:mod:`kernels.compile_helpers`).

>>> host_cpu().lanes in (4, 8, 16)
True
>>> ir = 'define i32 @add1(i32 %x) {\\n  %y = add i32 %x, 1\\n  ret i32 %y\\n}\\n'
>>> import ctypes
>>> ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.c_int32)(compile_ir(ir)["add1"])(41)
42
"""
from __future__ import annotations

import atexit
import ctypes
import functools
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Sequence

import llvmlite.binding as llvm
import numpy as np

from kernels import object_cache, threads
from kernels.pool_ir import RUNTIME_IR

_lock = threading.Lock()
_engines: dict[str, "CompiledModule"] = {}


@dataclass(frozen=True)
class HostCPU:
    """The CPU kernels are generated for: LLVM's name, feature string and f32 vector lanes."""

    name: str
    features: str
    lanes: int  # float32 lanes of the widest usable vector register
    l2_bytes: int = 1 << 20  # per-core L2 size (sysfs; 1 MiB where unknown)
    l1d_bytes: int = 32 << 10  # per-core L1 data cache size (sysfs; 32 KiB where unknown)
    l3_bytes: int = 32 << 20  # last-level cache size (sysfs, at most L3_CAP_BYTES; 32 MiB where unknown)

    def has(self, feature: str) -> bool:
        return f"+{feature}" in self.features.split(",")


_kernel_caches: list = []  # what clear_kernel_caches() clears


def kernel_cache(maxsize: int | None = None):
    """``functools.lru_cache`` for generated kernels and their IR text, registered so that
    :func:`clear_kernel_caches` forgets them all (the text depends on module settings that
    tests and A/B builds change: ``kernels.conv2d.L1_WEIGHT_SHARE``, say)."""
    def wrap(fn):
        cached = functools.lru_cache(maxsize=maxsize)(fn)
        _kernel_caches.append(cached)
        return cached
    return wrap


def clear_kernel_caches() -> None:
    """Forget every kernel and IR text :func:`kernel_cache` holds (after a setting changed)."""
    for cached in _kernel_caches:
        cached.cache_clear()


@functools.lru_cache(maxsize=None)
def _initialise() -> None:
    # llvm.initialize() raises in llvmlite >= 0.45; the native target is all we need.
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()


@functools.lru_cache(maxsize=None)
def host_cpu() -> HostCPU:
    """Query the host CPU from LLVM (not hard-coded): AVX-512 gives 16 lanes, AVX 8, else 4."""
    _initialise()
    features = llvm.get_host_cpu_features().flatten()
    on = set(f[1:] for f in features.split(",") if f.startswith("+"))
    lanes = 16 if "avx512f" in on else 8 if "avx" in on else 4
    return HostCPU(llvm.get_host_cpu_name(), features, lanes, _cache_bytes(2, 1 << 20),
                   _cache_bytes(1, 32 << 10), min(_cache_bytes(3, 32 << 20), L3_CAP_BYTES))


@functools.lru_cache(maxsize=None)
def cpu_lanes(cpu: str) -> int:
    """f32 lanes of the widest vectors LLVM gives the CPU it calls ``cpu`` (16 with AVX-512, 8
    with AVX, else 4; :func:`host_cpu` counts the host's by its features). LLVM is asked: a
    16-lane add compiled for that CPU shows which registers it has. A name LLVM does not know
    gets the 64-bit baseline (4): without ``+64bit`` LLVM would abort the process.

    >>> cpu_lanes("znver3"), cpu_lanes("znver4"), cpu_lanes("x86-64"), cpu_lanes("no-such-cpu")
    (8, 16, 4, 4)
    """
    _initialise()
    module = llvm.parse_assembly("define <16 x float> @f(<16 x float> %a, <16 x float> %b) {\n"
                                 "  %c = fadd <16 x float> %a, %b\n  ret <16 x float> %c\n}\n")
    asm = llvm.Target.from_default_triple().create_target_machine(cpu=cpu, features="+64bit").emit_assembly(module)
    return 16 if "zmm" in asm else 8 if "ymm" in asm else 4


# The last-level cache one process can hold, at most. A VM's sysfs gives the host socket's
# whole L3 (480 MiB on the session-23 Xeon), while a tenant's reads fell to memory speed past
# 32-64 MiB; rotating weights through 1.5x 480 MiB to keep them cold
# (kernels.timing.cold_arrays) made 720 MiB of copies per process and cost tuning seconds.
L3_CAP_BYTES = 128 << 20


def _cache_bytes(level: int, default: int) -> int:
    """Per-core data (or unified) cache size of ``level`` from Linux sysfs (``default`` elsewhere).

    >>> _cache_bytes(9, 123)
    123
    """
    import glob

    for path in glob.glob("/sys/devices/system/cpu/cpu0/cache/index*/"):
        try:
            with open(path + "level") as f:
                if f.read().strip() != str(level):
                    continue
            with open(path + "type") as f:
                if f.read().strip() == "Instruction":
                    continue
            with open(path + "size") as f:
                size = f.read().strip().upper()
        except OSError:
            continue
        scale = {"K": 1 << 10, "M": 1 << 20}.get(size[-1:], 1)
        try:
            return int(size.rstrip("KM")) * scale
        except ValueError:
            return default
    return default


# The target machine's options (besides the CPU): part of the object cache's key too.
TARGET_MACHINE = {"opt": 3, "jit": True}


def _new_target_machine() -> llvm.TargetMachine:
    cpu = host_cpu()
    target = llvm.Target.from_default_triple()
    return target.create_target_machine(cpu=cpu.name, features=cpu.features, **TARGET_MACHINE)


# For passes, triple and data layout. An execution engine takes ownership of the machine it
# is given and frees it with itself, so each engine gets its own (_new_target_machine).
_target_machine = functools.lru_cache(maxsize=None)(_new_target_machine)


_pool_lock = threading.Lock()
_pool_runtime = None  # the pool's execution engine, kept alive


def _load_pool_runtime() -> None:
    """Compile the thread pool's runtime (:mod:`kernels.threads`), make ``gt_parallel``
    resolvable by the JIT linker and start the workers (idempotent; :func:`compile_ir`
    calls it before linking a kernel)."""
    global _pool_runtime
    if _pool_runtime is not None:
        return
    with _pool_lock:
        if _pool_runtime is not None:
            return
        _initialise()
        module = llvm.parse_assembly(RUNTIME_IR)
        module.triple = _target_machine().triple
        module.verify()
        engine = llvm.create_mcjit_compiler(module, _new_target_machine())
        engine.finalize_object()
        llvm.add_symbol("gt_parallel", engine.get_function_address("gt_parallel"))
        worker = engine.get_function_address("gt_worker")
        shutdown = ctypes.CFUNCTYPE(None)(engine.get_function_address("gt_shutdown"))
        libc = ctypes.CDLL(None, use_errno=True)
        for _ in range(max(threads.num_threads(), threads.usable_cores()) - 1):
            tid = ctypes.c_ulong()
            if libc.pthread_create(ctypes.byref(tid), None, ctypes.c_void_p(worker), None) != 0:
                break  # fewer workers: jobs still complete (the caller takes every item left)
        atexit.register(shutdown)
        _pool_runtime = (engine, shutdown)


def set_pool_banded(on: bool) -> None:
    """Let the pool's threads claim items by per-thread bands (the default) or, off, from one
    shared cursor (the pool before bands), for side-by-side benchmarks
    (``benchmarks/pool_ab.py``); takes effect from the next job."""
    _banded_flag().value = 1 if on else 0


@functools.lru_cache(maxsize=None)
def _banded_flag() -> ctypes.c_int32:
    """The pool's ``gt_banded`` flag, looked up once (benchmarks set it at every timed call)."""
    _load_pool_runtime()
    return ctypes.c_int32.from_address(_pool_runtime[0].get_global_value_address("gt_banded"))


class CompiledModule:
    """A JIT-compiled module; ``module[name]`` is a function's raw address (an int)."""

    def __init__(self, engine: llvm.ExecutionEngine):
        self._engine = engine  # keep alive: the addresses below point into it
        self._addresses: dict[str, int] = {}

    def __getitem__(self, name: str) -> int:
        if name not in self._addresses:
            address = self._engine.get_function_address(name)
            if not address:
                raise KeyError(f"no function {name!r} in compiled module")
            self._addresses[name] = address
        return self._addresses[name]


# The optimisation pipeline every module gets. Generated kernels are already unrolled where
# it pays; LLVM's own unroller made register tiles spill (measured), and generated loops also
# carry llvm.loop.unroll.disable. Part of the object cache's key (pipeline_description).
PIPELINE = {"speed_level": 3, "loop_unrolling": False, "loop_vectorization": True, "slp_vectorization": True}


def _optimise(module: llvm.ModuleRef) -> None:
    tm = _target_machine()
    pto = llvm.create_pipeline_tuning_options(speed_level=PIPELINE["speed_level"])
    pto.loop_unrolling = PIPELINE["loop_unrolling"]
    pto.loop_vectorization = PIPELINE["loop_vectorization"]
    pto.slp_vectorization = PIPELINE["slp_vectorization"]
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module, pb)


def pipeline_description() -> str:
    """Everything but the IR text that a module's object code depends on: the object cache's
    key (:func:`kernels.object_cache.key`). Made from the very values compiling uses, each
    time (a test that swaps the CPU gets its own key)."""
    import llvmlite

    cpu = host_cpu()
    return (f"llvmlite {llvmlite.__version__}, LLVM {llvm.llvm_version_info}, {_target_machine().triple}, "
            f"{_target_machine().target_data}, cpu {cpu.name} {cpu.features}, target machine "
            f"{sorted(TARGET_MACHINE.items())}, passes {sorted(PIPELINE.items())}")


# The first line of a kernel built to be timed by the search (:func:`search_build`). LLVM's loop
# strength reduction is 17-23% of a conv kernel's compile; without it the search's kernels
# compiled in 0.65-0.83x the time and ran 0.998-1.001x (geomean) as fast, and the configs it
# picked ran 1.010-1.021x the LSR build's picks, under a noise baseline of 1.020-1.12
# (benchmarks/lsr_ranks.py, session 49); 8 DenseNet-121 searches took 0.84x the wall time.
# A plan's kernels keep it. Being part of the text, the mark keys every cache apart (in this
# process, on disk) and reaches the compile helpers with the text.
SEARCH_BUILD = "; graph-tuner: a search's build, without loop strength reduction\n"


def search_build(ir_text: str) -> str:
    """``ir_text`` marked to compile as the search's kernels do (:data:`SEARCH_BUILD`).

    >>> search_build("declare void @f()").splitlines() == [SEARCH_BUILD.strip(), "declare void @f()"]
    True
    """
    return ir_text if ir_text.startswith(SEARCH_BUILD) else SEARCH_BUILD + ir_text


@contextmanager
def _codegen_options(ir_text: str):
    """LLVM's process-wide options as ``ir_text`` is compiled with (``_lock`` held, or a helper's
    one thread)."""
    search = ir_text.startswith(SEARCH_BUILD)
    if search:
        llvm.set_option("", "-disable-lsr=true")
    try:
        yield
    finally:
        if search:
            llvm.set_option("", "-disable-lsr=false")


def _parsed(ir_text: str) -> llvm.ModuleRef:
    module = llvm.parse_assembly(ir_text)
    module.triple = _target_machine().triple
    module.data_layout = str(_target_machine().target_data)
    module.verify()
    return module


def compile_ir(ir_text: str, cache: bool = True) -> CompiledModule:
    """Parse, verify, optimise (-O3, host CPU) and JIT-compile LLVM IR text; cached by text
    unless ``cache`` is false (code naming one program's buffers is never asked for twice).
    Text a helper process has already compiled (:func:`compile_ahead`), or an earlier process
    (:mod:`kernels.object_cache`, on disk), is only linked."""
    with _lock:
        if cache and ir_text in _engines:
            return _engines[ir_text]
        _initialise()
        _load_pool_runtime()  # gt_parallel must resolve when linking
        code = _objects.pop(ir_text, None)
        if code is None and cache:
            code = object_cache.load(ir_text, pipeline_description())
        if code is not None:
            engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _new_target_machine())
            engine.add_object_file(llvm.ObjectFileRef.from_data(code))
            engine.finalize_object()
            compiled = CompiledModule(engine)
        else:
            with _codegen_options(ir_text):  # MCJIT generates code in _jit's finalize_object
                compiled = _jit(_parsed(ir_text), ir_text if cache else None)
        if cache:
            _engines[ir_text] = compiled
        return compiled


def linked_text(ir_texts: Sequence[str]) -> str:
    """The IR text of several IR texts (distinct function names) linked into one module: each
    parsed apart (each numbers its own metadata), then linked. One module for many small
    functions: LLVM's cost per module is about half of a small kernel's compile, so 32 layout
    transforms took 10 ms each as one module, 21 apart (session 20). Compile it as any text
    (:func:`compile_ir`, :func:`compile_ahead`)."""
    if not ir_texts:
        raise ValueError("linked_text needs at least one IR text")
    with _lock:
        _initialise()
        module = _parsed(ir_texts[0])
        for text in ir_texts[1:]:
            module.link_in(_parsed(text))
        return str(module)


def compile_shared(ir_text: str, names: Sequence[str]) -> CompiledModule:
    """Compile a module whose functions other modules declare and call by name (as kernels
    call ``gt_parallel``) and bind ``names`` for the JIT linker; cached by text as
    :func:`compile_ir`. A name is bound process-wide, so it must stand for one code: make it
    from a digest of the text. Compile this before any module that calls it is linked: a
    name the linker cannot resolve is a fatal LLVM error, not an exception."""
    compiled = compile_ir(ir_text)
    for name in names:
        llvm.add_symbol(name, compiled[name])
    return compiled


def _jit(module: llvm.ModuleRef, keep: str | None = None) -> CompiledModule:
    """Optimise and JIT-compile a parsed module (``_lock`` held); with ``keep`` (its IR text),
    store the object code MCJIT makes on disk too (:mod:`kernels.object_cache`: MCJIT hands it
    over as it compiles, so what runs here is compiled as it was before there was a cache)."""
    _optimise(module)
    engine = llvm.create_mcjit_compiler(module, _new_target_machine())
    if keep is not None:
        pipeline = pipeline_description()
        engine.set_object_cache(notify_func=lambda _module, code: object_cache.store(keep, bytes(code), pipeline))
    engine.finalize_object()
    return CompiledModule(engine)


# Compiling in helper processes (:mod:`kernels.compile_helpers`): they hand back object code
# that this process links, made by the same target machine (CPU name and features).
_objects: dict[str, bytes] = {}  # object code compiled ahead, by IR text, until linked
_helpers = None  # the helper pool: None (not started yet), False (none), or a HelperPool


def _forget_helpers() -> None:
    """In a forked child: the parent's helpers and their pipes are not ours to use."""
    global _helpers
    _helpers = None
    _objects.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_helpers)


def object_code(ir_text: str) -> bytes:
    """Object code of IR text for the host CPU, optimised as :func:`compile_ir` does (what a
    helper process runs)."""
    _initialise()
    module = _parsed(ir_text)
    _optimise(module)
    with _codegen_options(ir_text):
        return _target_machine().emit_object(module)


HELPER_TIMEOUT = 120.0  # seconds: a helper slower than this on one kernel is taken for stuck


def _helper_pool():
    global _helpers
    if _helpers is None:
        from kernels.compile_helpers import HelperPool

        count = min(threads.usable_cores() - 1, 1)  # its one caller wants one text ahead
        _helpers = False
        if count > 0:
            try:
                _helpers = HelperPool(count)
            except OSError:  # cannot start processes here: compile in this one
                return False
            atexit.register(_helpers.close)
    return _helpers


def helper_cpu_seconds() -> float:
    """CPU seconds this process's compile helpers have used (0 if none)."""
    return _helpers.cpu_seconds() if _helpers else 0.0


def compile_ahead(needed: list[str], guesses: list[str] = ()) -> None:
    """Compile IR texts into :func:`compile_ir`'s cache, in this process and in a helper
    process (where there is another usable core) side by side. Every text in ``needed``
    is compiled; ``guesses`` (texts likely wanted next, best first) fill helpers that would
    otherwise wait while this process compiles, and are linked only if later asked for.
    Returns when all of it is done, so nothing compiles while a caller times a kernel.
    A helper that fails costs nothing but its share: :func:`compile_ir` compiles it here.
    """
    pipeline = pipeline_description()  # once a call: every text's object cache key names it
    todo = [t for t in dict.fromkeys(needed) if t not in _engines and t not in _objects and not _on_disk(t, pipeline)]
    if not todo:
        return
    pool = _helper_pool()
    width = 1 + (pool.size if pool and not pool.broken else 0)
    mine, theirs = todo[::width], [t for k, t in enumerate(todo) if k % width]
    spare = width - 1 - len(theirs)
    keep = set(needed) | set(guesses)
    for t in [t for t in _objects if t not in keep]:  # an earlier call's guesses, not wanted
        del _objects[t]
    ahead = [t for t in dict.fromkeys(guesses) if t not in _engines and t not in _objects and t not in todo
             and not _on_disk(t, pipeline)]
    futures = {t: pool.submit(t) for t in theirs + ahead[:max(spare, 0)]} if width > 1 else {}
    try:
        for t in mine:
            compile_ir(t)
    finally:  # even when this process's share fails: no helper may still compile afterwards
        for t, future in futures.items():
            try:
                _objects[t] = future.result(timeout=HELPER_TIMEOUT)
            except Exception:  # a dead or stuck helper, or bad IR: compile_ir compiles (or raises) it here
                continue
            object_cache.store(t, _objects[t], pipeline)
    for t in theirs:
        compile_ir(t)


def _on_disk(ir_text: str, pipeline: str) -> bool:
    """Whether an earlier process left ``ir_text``'s object code (:mod:`kernels.object_cache`):
    then it waits in ``_objects`` to be linked, and nothing compiles it."""
    code = object_cache.load(ir_text, pipeline)
    if code is not None:
        _objects[ir_text] = code
    return code is not None


def assembly(ir_text: str) -> str:
    """The optimised x86 assembly of IR text (for inspecting register tiles and spills)."""
    _initialise()
    module = _parsed(ir_text)
    _optimise(module)
    return _target_machine().emit_assembly(module)


class IRFunction:
    """Emit the text of one LLVM IR function: fresh SSA names, labels, loops, stack slots.

    Loops are counted ``i64`` loops carrying ``llvm.loop.unroll.disable`` (generated
    code is unrolled where intended; LLVM's unroller spilled register tiles).
    Values kept across loop iterations (accumulators) live in ``alloca`` slots that
    SROA promotes to registers.

    >>> f = IRFunction("define i64 @sum_to(i64 %n)")
    >>> s = f.slot("i64", "0")
    >>> with f.loop("%n") as i:
    ...     f.store("i64", f.op(f"add i64 {f.load('i64', s)}, {i}"), s)
    >>> f.emit(f"ret i64 {f.load('i64', s)}")
    >>> import ctypes
    >>> ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(compile_ir(f.text())["sum_to"])(5)
    10
    """

    def __init__(self, signature: str, md_base: int = 0):
        self.signature = signature
        self._md = md_base  # metadata ids: give each function of a module its own range
        self.body: list[str] = []
        self.entry: list[str] = []  # allocas, hoisted so SROA can promote them
        self.metadata: list[str] = []
        self.block = "entry"
        self._n = 0

    def fresh(self, stem: str = "t") -> str:
        self._n += 1
        return f"{stem}{self._n}"

    def emit(self, line: str) -> None:
        self.body.append("  " + line)

    def op(self, text: str, stem: str = "t") -> str:
        """Emit ``%tN = text`` and return ``%tN``."""
        name = "%" + self.fresh(stem)
        self.emit(f"{name} = {text}")
        return name

    def label(self, name: str) -> None:
        self.body.append(f"{name}:")
        self.block = name

    def slot(self, ty: str, init: str | None = None) -> str:
        name = "%" + self.fresh("slot")
        self.entry.append(f"  {name} = alloca {ty}, align 64")
        if init is not None:
            self.entry.append(f"  store {ty} {init}, ptr {name}")
        return name

    def load(self, ty: str, ptr: str, align: int = 4) -> str:
        return self.op(f"load {ty}, ptr {ptr}, align {align}")

    def store(self, ty: str, value: str, ptr: str, align: int = 4) -> None:
        self.emit(f"store {ty} {value}, ptr {ptr}, align {align}")

    def gep(self, base: str, index: str, ty: str = "float") -> str:
        return self.op(f"getelementptr inbounds {ty}, ptr {base}, i64 {index}")

    def add(self, a: str, b) -> str:
        return a if b == 0 else self.op(f"add nsw i64 {a}, {b}")

    def mul(self, a: str, b) -> str:
        return a if b == 1 else self.op(f"mul nsw i64 {a}, {b}")

    def affine(self, *terms: tuple[str, int], const: int = 0) -> str:
        """``sum(value * coeff) + const`` as i64 (coefficients folded at generation time)."""
        acc = None
        for value, coeff in terms:
            if coeff == 0:
                continue
            part = self.mul(value, coeff)
            acc = part if acc is None else self.op(f"add nsw i64 {acc}, {part}")
        if acc is None:
            return str(const)
        return self.add(acc, const)

    @contextmanager
    def loop(self, count, start: int = 0):
        """``for i in range(start, count)`` (count: int or i64 value); yields ``i``."""
        pre, head, body, latch, done = self.block, self.fresh("head"), self.fresh("body"), self.fresh("latch"), self.fresh("done")
        self.emit(f"br label %{head}")
        self.label(head)
        i, nxt = "%" + self.fresh("i"), "%" + self.fresh("inext")
        self.emit(f"{i} = phi i64 [{start}, %{pre}], [{nxt}, %{latch}]")
        cond = self.op(f"icmp slt i64 {i}, {count}")
        self.emit(f"br i1 {cond}, label %{body}, label %{done}")
        self.label(body)
        yield i
        self.emit(f"br label %{latch}")
        self.label(latch)
        self.emit(f"{nxt} = add nsw i64 {i}, 1")
        self._md += 2
        md = self._md
        self.emit(f"br label %{head}, !llvm.loop !{md}")
        self.metadata.append(f"!{md} = distinct !{{!{md}, !{md + 1}}}\n!{md + 1} = !{{!\"llvm.loop.unroll.disable\"}}")
        self.label(done)

    def branch(self, cond: str, then: Callable[[], None], otherwise: Callable[[], None]) -> None:
        """``if cond: then() else: otherwise()``; values either side makes are not used after
        (what must outlive the branch goes through a slot).

        >>> f = IRFunction("define i64 @absolute(i64 %x)")
        >>> s = f.slot("i64")
        >>> f.branch(f.op("icmp slt i64 %x, 0"), lambda: f.store("i64", f.op("sub i64 0, %x"), s),
        ...          lambda: f.store("i64", "%x", s))
        >>> f.emit(f"ret i64 {f.load('i64', s)}")
        >>> import ctypes
        >>> fn = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_int64)(compile_ir(f.text())["absolute"])
        >>> fn(-7), fn(5)
        (7, 5)
        """
        yes, no, join = self.fresh("then"), self.fresh("else"), self.fresh("join")
        self.emit(f"br i1 {cond}, label %{yes}, label %{no}")
        for label, emit in ((yes, then), (no, otherwise)):
            self.label(label)
            emit()
            self.emit(f"br label %{join}")
        self.label(join)

    def text(self) -> str:
        return "\n".join([self.signature + " {", "entry:", *self.entry, *self.body, "}", *self.metadata, ""])


class Kernel:
    """A compiled kernel ``void f(ptr args, i32 nthreads)`` over named float32 arrays.

    ``args`` is an array of raw buffer addresses in the order of ``arg_shapes``
    (optional arguments may be absent: address 0), followed by the kernel's own
    scratch buffers, then its ``scalars`` (integers its code reads at run time).
    ``k(*arrays)`` checks shapes and runs; ``k.bind(*arrays)``
    checks once and returns a zero-argument callable with the addresses cached
    (reading ``ndarray.ctypes.data`` costs ~2 us) for timing loops and executors.
    A kernel with scratch buffers is not re-entrant: run one call at a time.
    """

    def __init__(self, module: CompiledModule, name: str, arg_shapes: dict[str, tuple[int, ...] | None],
                 scratch: list | None = None, scalars: Sequence[int] = ()):
        self.name = name
        self.arg_shapes = dict(arg_shapes)  # None: argument not used by this kernel
        self._module = module
        self._fn = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int32)(module[name])
        self._scratch = list(scratch or [])
        self._scalars = [int(v) for v in scalars]

    def _addresses(self, arrays: dict) -> list[int]:
        addresses = []
        for arg, shape in self.arg_shapes.items():
            a = arrays.get(arg)
            if shape is None:
                if a is not None:
                    raise ValueError(f"{self.name}: argument {arg!r} given but the kernel was built without it")
                addresses.append(0)
                continue
            if a is None:
                raise ValueError(f"{self.name}: argument {arg!r} missing (shape {shape})")
            if not isinstance(a, np.ndarray) or a.dtype != np.float32 or not a.flags.c_contiguous:
                raise ValueError(f"{self.name}: {arg!r} must be a C-contiguous float32 ndarray")
            if tuple(a.shape) != tuple(shape):
                raise ValueError(f"{self.name}: {arg!r} has shape {a.shape}, expected {tuple(shape)}")
            addresses.append(a.ctypes.data)
        return addresses + [s.ctypes.data for s in self._scratch] + self._scalars

    def bind(self, *args, nthreads: int | None = None, **kwargs) -> BoundKernel:
        """A zero-argument callable running the kernel on these arrays (kept alive by it)."""
        arrays = dict(zip(self.arg_shapes, args), **kwargs)
        addresses = self._addresses(arrays)
        packed = (ctypes.c_void_p * len(addresses))(*addresses)
        return BoundKernel(self._fn, self._module[self.name], ctypes.addressof(packed),
                           nthreads or threads.num_threads(), (self, arrays, packed))

    def __call__(self, *args, **kwargs) -> None:
        self.bind(*args, **kwargs)()


class BoundKernel:
    """A kernel call with its arguments fixed: ``k()`` runs it. The raw parts
    (``entry`` address, ``args`` address, ``nthreads``) let generated code call it
    directly (:func:`kernels.sequence.compile_sequence`); ``keep`` holds the kernel,
    arrays and packed addresses alive as long as the call can be made."""

    __slots__ = ("_fn", "entry", "args", "nthreads", "keep")

    def __init__(self, fn, entry: int, args: int, nthreads: int, keep: tuple):
        self._fn, self.entry, self.args, self.nthreads, self.keep = fn, entry, args, nthreads, keep

    def __call__(self) -> None:
        self._fn(self.args, self.nthreads)
