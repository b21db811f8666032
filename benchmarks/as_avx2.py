"""Hand-run: another benchmark script as if this AVX-512 CPU had AVX2 only (LLVM ``znver3``).

    ONEDNN_MAX_CPU_ISA=AVX2 python benchmarks/as_avx2.py benchmarks/openvino_profile.py inception-v3 --layers 1x1

LLVM's host CPU is reported as ``znver3`` with the AVX-512 features off, so our kernels are
generated for 8 lanes and 16 registers and ``data/znver3/`` is the shipped log; oneDNN (inside
OpenVINO and onnxruntime) is capped by ``ONEDNN_MAX_CPU_ISA=AVX2``, which must be set before the
process starts. A look at AVX2 code without an AVX2 machine, not a stand-in for one: on the Zen 4
EPYC (sessions 44 and 47, benchmarks/README.md) the best AVX2 configs and OpenVINO's AVX2 share of
the FMA peak were not the Zen 3's.
"""
from __future__ import annotations

import os
import runpy
import sys
import types

import llvmlite.binding as llvm


def _usage(message: str) -> None:
    print(f"as_avx2.py: {message}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    if os.environ.get("ONEDNN_MAX_CPU_ISA") != "AVX2":
        _usage("set ONEDNN_MAX_CPU_ISA=AVX2 first (oneDNN reads it when it loads)")
    if len(sys.argv) < 2 or not os.path.isfile(sys.argv[1]):
        _usage("give a script to run (an existing file), then its arguments")
    host = llvm.get_host_cpu_features().flatten().split(",")
    avx2 = ",".join("-" + f[1:] if f[1:].startswith("avx512") or f[1:] == "evex512" else f for f in host)
    llvm.get_host_cpu_features = lambda: types.SimpleNamespace(flatten=lambda: avx2)  # what kernels.jit reads
    llvm.get_host_cpu_name = lambda: "znver3"
    import kernels.jit
    from kernels.cache_folder import default_cache_dir

    # Helper processes would compile for the real CPU (the patch is this process's), and their
    # objects would be stored under this one's key: compile here only, in a cache of its own.
    kernels.jit._helpers = False
    os.environ["GRAPH_TUNER_CACHE_DIR"] = str(default_cache_dir() / "as-avx2")
    script = sys.argv[1]
    sys.argv = sys.argv[1:]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))  # the script's own imports
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
