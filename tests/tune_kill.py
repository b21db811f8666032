"""A small tuning run that kills itself on purpose, for tests/test_tune_resume.py.

``python tests/tune_kill.py LOG HOW N`` runs :func:`run` into LOG and SIGKILLs its own
process (no cleanup, no flush, as a user's ``kill -9`` or an OOM kill would):

* ``measure``: in the N-th conv measurement (search or re-timing), before it returns;
* ``transform``: in the N-th layout-transform timing;
* ``line``: while writing the N-th line of the log, after half of it is flushed.

Everything is fake and deterministic (no kernel is compiled or timed), so the log of an
unkilled :func:`run` is the reference a killed run plus a rerun must reproduce.
"""
from __future__ import annotations

import os
import signal
import sys

from kernels.tuner import INSTANTIATION_ERROR, MeasureError
from kernels.workload import Conv2DWorkload

WORKLOADS = [
    (Conv2DWorkload((1, 16, 6, 6), (16, 16, 3, 3), padding=(1, 1, 1, 1)), 2),
    (Conv2DWorkload((1, 16, 6, 6), (32, 16, 1, 1)), 1),
    # the first's sibling: its search starts from the first's timings (graph_tuner.tuning.warm_start)
    (Conv2DWorkload((1, 32, 6, 6), (16, 32, 3, 3), padding=(1, 1, 1, 1)), 1),
]
TRIALS = [24, 12, 10]  # per workload, as tune_model's trial_budget gives them
CONFIRM = 4  # finalists for a full budget (fewer for a reduced one), each re-timed CONFIRM_ROUNDS times


def conv_seconds(workload, config) -> float:
    """A made-up landscape with many ties (so the finalists' tie-breaks matter) and failures."""
    if config.ic_bn == 2:
        raise MeasureError(INSTANTIATION_ERROR, "refused")  # failed measurements are logged too
    if (config.oc_bn, config.ow_bn, config.unroll_kw) == (8, 6, False):
        # The sibling's fastest, which the first's search never tries: timed on the first after
        # every search (3 timings), where it is the fastest too, so a rerun that took it for a
        # search timing would choose other finalists.
        if workload.in_channels == 32 or config.ic_bn == 4:  # the first tries ic8's, not ic4's
            return 0.5e-4 if workload.in_channels == 32 else 0.7e-4
    return 1e-4 * (1 + abs(config.oc_bn - 8) / 8 + abs(config.ow_bn - 3) / 3 + (config.ic_bn == 1))


def transform_seconds(key) -> float:
    shape, src, dst = key
    return 1e-6 * (1 + src + 2 * dst)


def run(log, measure=conv_seconds, measure_transform=transform_seconds):
    """The tuning run every test repeats: the workloads, then their layout transforms. The
    search sees AVX2's 8 lanes on every CPU, so it goes the same way on all: the landscape is
    made for that width (on an AVX-512 CPU the search's prior had the first workload try the
    sibling's fastest itself, and there was nothing to exchange)."""
    import dataclasses
    from unittest import mock

    import kernels.jit as jit
    from graph_tuner.tuning import tune_workloads

    cpu = dataclasses.replace(jit.host_cpu(), lanes=8)
    with mock.patch.object(jit, "host_cpu", lambda: cpu):
        return tune_workloads(WORKLOADS, log, trials=TRIALS, confirm=CONFIRM, measure=measure,
                              measure_transform=measure_transform, progress=False)


def dying(fn, n: int):
    """``fn``, but the process is killed in its ``n``-th call."""
    calls = 0

    def call(*args):
        nonlocal calls
        calls += 1
        if calls == n:
            os.kill(os.getpid(), signal.SIGKILL)
        return fn(*args)

    return call


class _Tearing:
    """A log file that kills the process halfway through writing its ``n``-th line."""

    written = 0

    def __init__(self, f, n: int):
        self.f, self.n = f, n

    def append(self, line: str) -> None:
        _Tearing.written += 1
        if _Tearing.written == self.n:
            self.f.file.write(line[: len(line) // 2].encode())
            os.kill(os.getpid(), signal.SIGKILL)
        self.f.append(line)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.f.close()


def main(log: str, how: str, n: int) -> None:
    from graph_tuner import tuning

    if how == "measure":
        run(log, measure=dying(conv_seconds, n))
    elif how == "transform":
        run(log, measure_transform=dying(transform_seconds, n))
    elif how == "line":
        open_log = tuning._open_log
        tuning._open_log = lambda path: _Tearing(open_log(path), n)
        run(log)
    else:
        raise SystemExit(f"unknown kill point {how!r}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
