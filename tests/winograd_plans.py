"""A plan's layer made to run as Winograd: its candidate given a record of the layer's GEMM
workload (:func:`graph_tuner.winograd.gemm_of`), as a tuned log's GEMM record would be chosen."""
import dataclasses

from graph_tuner.records import make_conv2d_record, read_records
from graph_tuner.winograd import gemm_of
from kernels.config_space import tuning_space


def as_winograd(lc):
    """``lc`` (a :class:`graph_tuner.plan.LayerChoice`) with a GEMM record of its blocks, or
    ``lc`` itself where the Winograd kernel cannot run the layer."""
    gemm = gemm_of(lc.workload)
    if gemm is None:
        return lc
    space = tuning_space(gemm)
    config = dataclasses.replace(lc.candidate.config, ow_bn=1, unroll_kw=False)  # in any GEMM's space
    entity = space.config_entity(config)
    rec = read_records([make_conv2d_record(gemm, entity, space.index(entity), [1e-3], "llvm")]).records[0]
    return dataclasses.replace(lc, candidate=dataclasses.replace(lc.candidate, record=rec, config=config,
                                                               is_fallback=False))
