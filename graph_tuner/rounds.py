"""Timing rivals side by side on a shared machine: interleaved rounds and paired ratios.

A shared host's speed drifts by tens of percent within a minute, so rivals are timed in
short interleaved rounds (:func:`timed_rounds`) and compared round by round
(:func:`paired_ratio`), which the drift, moving both alike within a round, cannot fake.
"""
from __future__ import annotations

import time
from typing import Callable

import numpy as np


# Pause between two runtimes' turns. A runtime's idle workers keep spinning after its last
# call (onnxruntime's, unless told to stop: see onnxruntime_runner), and the runtime timed next shared the
# cores with them: ResNet-18 graph-tuned ran 28.7 ms right after onnxruntime, 19.9 ms
# 20 ms later, 14.7 ms 100 ms later (benchmarks/README.md). Rounds used to start with
# graph-tuned, right after the previous round's last runtime, so this biased every ratio.
SETTLE_S = 0.25


def timed_rounds(runners: dict[str, Callable[[], object]], repeat: int, rounds: int | None = None,
                  settle_s: float = SETTLE_S) -> dict[str, list[list[float]]]:
    """Per-call seconds of every runner, ``repeat`` calls each, in interleaved rounds of ~4 calls
    (a shared machine's speed drifts by tens of percent within a minute: short interleaved
    rounds make every runtime see the same drift); one list per round. The order rotates
    from round to round, so no runtime always runs first or right after another. Each turn starts
    ``settle_s`` after the previous one ended, so no runtime is timed while another's
    workers still spin (:data:`SETTLE_S`)."""
    from kernels.timing import measure

    samples: dict[str, list[list[float]]] = {k: [] for k in runners}
    rounds = rounds or max(3, repeat // 4)
    per_round = max(1, -(-repeat // rounds))
    names = list(runners)
    for r in range(rounds):
        for k in names[r % len(names):] + names[:r % len(names)]:  # each runtime takes each place in turn
            time.sleep(settle_s)
            samples[k].append(list(measure(runners[k], number=1, repeat=per_round, warmup=1).results))
    return samples


def median_ms(rounds: list[list[float]]) -> float:
    """The median of every timing of every round (seconds in), in milliseconds.

    >>> median_ms([[0.001, 0.003], [0.002]])
    2.0
    """
    return float(np.median([t for r in rounds for t in r])) * 1e3


def paired_ratio(rounds_a: list[list[float]], rounds_b: list[list[float]], seed: int = 0
                 ) -> tuple[float, float, float]:
    """How many times ``b``'s time ``a``'s is: the median over rounds of the ratio of the
    rounds' medians, with a 90% bootstrap interval over rounds. Pairing by round cancels
    the host's drift, which moves both alike within a round.

    >>> paired_ratio([[2.0], [4.0], [2.2]], [[1.0], [2.0], [1.0]])[0]
    2.0
    """
    r = np.array([np.median(a) / np.median(b) for a, b in zip(rounds_a, rounds_b)])
    boot = np.median(r[np.random.default_rng(seed).integers(0, len(r), (2000, len(r)))], axis=1)
    return float(np.median(r)), float(np.percentile(boot, 5)), float(np.percentile(boot, 95))
