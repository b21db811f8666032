"""Which conv layers may run as Winograd F(4x4, 3x3) (:mod:`kernels.winograd`), and how that
choice travels: as records.

A Winograd kernel's schedule is its GEMM's (a grouped 1x1 conv over the image of tiles,
:func:`kernels.winograd.gemm_workload`), so its records are records of that GEMM workload,
timed as the whole Winograd conv (both transforms and the layer's epilogue included) by
the tuner. A layer's candidates are then its direct records and its GEMM's, side by side:
both read and write the layer's tensors in ``(ic_bn, oc_bn)`` blocks, so the solver picks
per layer, with the layout transforms in view, and a plan's record for the layer says
which kernel runs it. A log without GEMM records (any log from before) plans direct convs.
A GEMM record names the conv it was timed as (:data:`graph_tuner.records.WINOGRAD_FIELD`,
written since session 54): another conv with the same GEMM workload (a log merged with
another model's) does not take it. Records from before name none and are taken as the
one conv of the model whose GEMM they are.
(A model with a real 36-group 1x1 conv of a GEMM's very shape would read those records as its
own; no model we know has one.)

>>> from graph_tuner.loading import load_model
>>> m = load_model("resnet-18")
>>> len(tuning_workloads(m)), sum(n for _, n in tuning_workloads(m))
(3, 10)
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Mapping

from kernels.winograd import gemm_workload, supported
from kernels.workload import Conv2DWorkload

# Fewer channels than this leave the GEMM too little to block (and the transforms, a
# memory pass over input and output, a larger share).
MIN_CHANNELS = 32
# Smaller outputs than this and the GEMM waits on its weights (36 transformed matrices, 4x
# the direct conv's, each serving a few tiles). On the Zen 4 EPYC, median of re-timings:
# ResNet's 512-channel 7x7 conv 1.00 ms as Winograd against 0.91 direct; Inception's
# 448->384 on 8x8 0.55 against 0.76 (its 4 tiles fit the 8x8 output exactly; 7x7 wastes 23%).
MIN_PIXELS = 64


def eligible(workload: Conv2DWorkload) -> bool:
    """Whether tuning a model tunes the Winograd GEMM of a layer of this workload."""
    return (supported(workload) and min(workload.in_channels, workload.out_channels) >= MIN_CHANNELS
            and workload.out_height * workload.out_width >= MIN_PIXELS)


def gemm_of(workload: Conv2DWorkload) -> Conv2DWorkload | None:
    """The GEMM workload of a layer the Winograd kernel can run (a plan's GEMM record for it
    runs, whatever rule chose it), or None."""
    return gemm_workload(workload) if supported(workload) else None


def candidate_gemm(workload: Conv2DWorkload) -> Conv2DWorkload | None:
    """The GEMM workload whose records are this layer's Winograd candidates: an
    :func:`eligible` layer's, or None. Records of others' GEMMs (ResNet-18's shipped log kept
    7x7 ones from before ``MIN_PIXELS``) are left out: ResNet-18's plan with them as candidates
    took three 7x7 layers as Winograd, logged at 0.83-0.90 ms and running 1.24 in the network,
    and ran 1.070x (1.053-1.082) the time of its plan without them (benchmarks/README.md)."""
    return gemm_workload(workload) if eligible(workload) else None


def runs_winograd(layer: Conv2DWorkload, record: Conv2DWorkload | None) -> bool:
    """Whether a record (of workload ``record``; None: none, a fallback) chosen for a layer of
    workload ``layer`` is a Winograd one: its GEMM's, the output dtype ignored as
    :func:`graph_tuner.candidates.match_key` does."""
    gemm = gemm_of(layer) if record is not None else None
    return gemm is not None and dataclasses.replace(record, out_dtype="") == dataclasses.replace(gemm, out_dtype="")


def timed_as_another(convs: Mapping[Conv2DWorkload, Conv2DWorkload] | None
                     ) -> Callable[[Conv2DWorkload, Conv2DWorkload | None], bool]:
    """``other(workload, named)``: whether a record of ``workload`` naming the conv ``named``
    (:attr:`graph_tuner.records.Record.winograd_of`) is a Winograd GEMM's timed as another conv
    than ``convs`` (GEMM workload -> this model's conv) says, output dtypes aside. A record of
    no GEMM in ``convs``, or naming none (from before the field), is not.

    >>> from kernels.workload import Conv2DWorkload
    >>> padded = Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    >>> other = timed_as_another({gemm_workload(padded): padded})
    >>> [other(gemm_workload(padded), c) for c in (padded, Conv2DWorkload((1, 64, 30, 30), (64, 64, 3, 3)), None)]
    [False, True, False]
    """
    key = (lambda w: dataclasses.replace(w, out_dtype=""))
    mine = {key(g): key(c) for g, c in (convs or {}).items()}

    def other(workload: Conv2DWorkload, named: Conv2DWorkload | None) -> bool:
        return named is not None and mine.get(key(workload), key(named)) != key(named)

    return other


def shared_gemms(workloads) -> set[Conv2DWorkload]:
    """The GEMM workloads (:func:`candidate_gemm`) that two different convs of ``workloads``
    share: 64 channels at 15x15 and 16x16 both make 4x4 tiles, and so do an unpadded 18x18 and a
    padded 16x16. The tuner times a GEMM workload as one conv, and records from before
    :data:`graph_tuner.records.WINOGRAD_FIELD` do not say which, so such a GEMM is neither
    tuned (:func:`tuning_workloads`) nor a candidate of either layer
    (:func:`graph_tuner.candidates.layer_candidates`).

    >>> from kernels.workload import Conv2DWorkload
    >>> padded = Conv2DWorkload((1, 64, 28, 28), (64, 64, 3, 3), padding=(1, 1, 1, 1))
    >>> shared_gemms([padded, Conv2DWorkload((1, 64, 30, 30), (64, 64, 3, 3))]) == {gemm_workload(padded)}
    True
    >>> shared_gemms([padded, padded])
    set()
    """
    convs: dict[Conv2DWorkload, set] = {}
    for w in workloads:
        gemm = candidate_gemm(w)
        if gemm is not None:
            convs.setdefault(gemm, set()).add(w)
    return {g for g, ws in convs.items() if len(ws) > 1}


def _tuned(model) -> dict[Conv2DWorkload, tuple[Conv2DWorkload, int]]:
    """GEMM workload -> (the conv it is timed as, its layer count), for the model's eligible
    layers, but the :func:`shared_gemms`."""
    distinct = model.distinct_workloads()
    shared = shared_gemms(w for w, _ in distinct)
    found: dict[Conv2DWorkload, tuple[Conv2DWorkload, int]] = {}
    for w, n in distinct:
        gemm = candidate_gemm(w)
        if gemm is not None and gemm not in shared:
            found[gemm] = (w, found.get(gemm, (w, 0))[1] + n)
    return found


def tuning_workloads(model) -> list[tuple[Conv2DWorkload, int]]:
    """The GEMM workloads to tune for a model's eligible layers, with their layer counts."""
    return [(gemm, n) for gemm, (_, n) in _tuned(model).items()]


def convs_of(model) -> dict[Conv2DWorkload, Conv2DWorkload]:
    """GEMM workload -> the layer workload it is the Winograd form of (what the tuner times)."""
    return {gemm: w for gemm, (w, _) in _tuned(model).items()}
