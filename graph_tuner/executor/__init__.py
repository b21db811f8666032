"""Run a tuned network end to end: model + plan -> a compiled program of NCHWc kernels.

``compile_model(model, plan)`` (:mod:`.compile`) folds batch norms and biases into the
conv weights, fuses activations and residual adds into conv epilogues (:mod:`.fold`),
inserts the plan's layout transforms and runs the other ops in their plan's layout as
generated kernels (pooling, elementwise chains, resize, transposed convs, channel slices,
dense, softmax) or numpy calls (:mod:`.ops`: pad, concat, reshapes); :mod:`.reference` is an independent
plain-NCHW numpy executor to check it.
"""
from graph_tuner.executor.compile import compile_model, plan_from_configs, uniform_plan
from graph_tuner.executor.program import Profile, Program
from graph_tuner.executor.reference import run_reference

__all__ = ["compile_model", "plan_from_configs", "uniform_plan", "Program", "Profile", "run_reference"]
