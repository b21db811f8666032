"""Where compiling conv kernels goes: LLVM's time per pass over kernels a log measured, and
what an LLVM option does to code generation.

    python benchmarks/compile_passes.py data/znver4/densenet-121.log.gz --kernels 16
    python benchmarks/compile_passes.py data/znver4/densenet-121.log.gz --option=-disable-lsr=true

The kernels are the log's dense conv records (no epilogue), shuffled with ``--seed``. Without
``--option`` it prints each pass's time summed over its instances (LLVM's ``-time-passes``
report, which names every instance apart). With ``--option`` (boolean ``cl::opt`` settings
away from their defaults, as ``llc`` takes them; ``=`` after ``--option``, since they start
with ``-``) it times code generation of the same optimised modules with the defaults and with
the options, alternating kernel by kernel, and counts the objects that come out byte for
byte the same: an option that changes no object cannot change a run.
"""
from __future__ import annotations

import argparse
import random
import re
import time
from collections import Counter
from pathlib import Path

import llvmlite.binding as llvm

from graph_tuner.records import read_records
from kernels import jit
from kernels.config_space import entity_config
from kernels.conv2d import kernel_ir

REPORT_LINE = re.compile(r"\s+(?:[\d.]+ \(.*?\)\s+){2}([\d.]+) \(.*?\)\s+[\d.]+ \(.*?\)\s+(.*?)(?: #\d+)?$")


def kernel_texts(log: Path, count: int, seed: int) -> list[str]:
    records = [r for r in read_records(log).records if not r.workload.is_depthwise]
    random.Random(seed).shuffle(records)
    texts: list[str] = []
    for r in records:
        try:
            texts.append(kernel_ir(r.workload, entity_config(r.entity)))
        except ValueError:  # a config our kernels do not build
            continue
        if len(texts) == count:
            break
    return texts


def pass_times(texts: list[str]) -> Counter:
    """Seconds (user + system) per pass name over compiling every text."""
    llvm.set_time_passes(True)
    for text in texts:
        module = jit._parsed(text)
        jit._optimise(module)
        jit._target_machine().emit_object(module)
    report = llvm.report_and_reset_timings()
    llvm.set_time_passes(False)
    seconds: Counter = Counter()
    for line in report.splitlines():
        m = REPORT_LINE.match(line)
        if m and m.group(2) != "Total":
            seconds[m.group(2)] += float(m.group(1))
    return seconds


def codegen_ab(texts: list[str], options: list[str]) -> tuple[float, float, int]:
    """(default seconds, seconds with ``options``, identical objects), code generation only."""
    spent, same = [0.0, 0.0], 0
    for text in texts:
        objects = []
        for k, opts in enumerate(([], options)):
            for o in opts:
                llvm.set_option("", o)
            module = jit._parsed(text)
            jit._optimise(module)
            t0 = time.perf_counter()
            objects.append(jit._target_machine().emit_object(module))
            spent[k] += time.perf_counter() - t0
            for o in opts:  # back to the default
                llvm.set_option("", _default(o))
        same += objects[0] == objects[1]
    return spent[0], spent[1], same


def _default(option: str) -> str:
    """The other value of a boolean option, taken for its default (llvmlite reads no option
    back, so a numeric one could not be undone)."""
    name, _, value = option.partition("=")
    if value not in ("true", "false"):
        raise ValueError(f"--option {option}: give a boolean option (-name=true or -name=false)")
    return f"{name}={'false' if value == 'true' else 'true'}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("log", type=Path)
    ap.add_argument("--kernels", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--option", action="append", default=[], help="an LLVM option to compare (repeatable)")
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args()
    for o in args.option:
        try:
            _default(o)
        except ValueError as e:
            ap.error(str(e))
    jit._initialise()
    texts = kernel_texts(args.log, args.kernels, args.seed)
    pass_times(texts[:2])  # warm-up: LLVM's first module pays for its one-time set-up
    if args.option:
        base, other, same = codegen_ab(texts, args.option)
        print(f"{len(texts)} kernels, code generation: {base:.3f} s with the defaults, {other:.3f} s with "
              f"{' '.join(args.option)} ({other / base:.2f}x); identical objects {same}/{len(texts)}")
        return
    seconds = pass_times(texts)
    total = sum(seconds.values())
    print(f"{len(texts)} kernels: {total:.3f} s in LLVM's passes")
    for name, s in seconds.most_common(args.top):
        print(f"  {s:7.3f} s {100 * s / total:5.1f}%  {name}")


if __name__ == "__main__":
    main()
