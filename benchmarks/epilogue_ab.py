"""Hand-run A/B: a model end to end with every activation fused into its conv epilogues (as
shipped) and with only relu / relu6 fused (the rule before issue 23: sigmoid, SiLU, hard
sigmoid / swish, leaky relu after a conv each a pass of their own).

    python benchmarks/epilogue_ab.py efficientnet-b0 [--block 16] [--rounds 10] [--calls 4]

Both builds run one plan (:func:`graph_tuner.executor.uniform_plan` at ``--block``: the same
conv configs, so only the epilogues differ) on the same seeded weights and input, their
outputs checked equal first. Rounds interleave the two (``graph_tuner.rounds.timed_rounds``);
the ratio pairs rounds (``paired_ratio``): above 1, the unfused build took longer.
"""
from __future__ import annotations

import argparse

import numpy as np

import graph_tuner.fusion as fusion
from graph_tuner.executor import compile_model, uniform_plan
from graph_tuner.loading import load_model
from graph_tuner.plan_run import seeded_input
from graph_tuner.rounds import median_ms, paired_ratio, timed_rounds
from kernels.jit import host_cpu
from kernels.threads import num_threads


def unfused_build(model, plan, params):
    """The program with only relu / relu6 in conv epilogues (fusion's rule before issue 23)."""
    old = fusion.EPILOGUE_ACTIVATIONS
    fusion.EPILOGUE_ACTIVATIONS = frozenset({"relu", "relu6"})
    try:
        return compile_model(model, plan, params)
    finally:
        fusion.EPILOGUE_ACTIVATIONS = old


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model")
    ap.add_argument("--block", type=int, default=host_cpu().lanes, help="uniform_plan's block (default: SIMD lanes)")
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--calls", type=int, default=4, help="calls per build per round")
    args = ap.parse_args()

    model = load_model(args.model)
    plan = uniform_plan(model, args.block)
    params, x = model.params(seed=0), seeded_input(model)
    fused = compile_model(model, plan, params)
    unfused = unfused_build(model, plan, params)
    ref = unfused.run(x)[0]
    np.testing.assert_allclose(fused.run(x)[0], ref, rtol=1e-4, atol=1e-4 * float(np.abs(ref).max()))
    steps = {k: sum(s.category != "transform" for s in p.steps) for k, p in (("fused", fused), ("unfused", unfused))}
    print(f"{args.model}, uniform plan at block {args.block}: {steps['fused']} steps fused, "
          f"{steps['unfused']} unfused")
    rounds = timed_rounds({"fused": fused.execute, "unfused": unfused.execute}, args.rounds * args.calls,
                          rounds=args.rounds)
    print(f"{args.rounds} rounds x {args.calls} calls, {num_threads()} threads")
    for k, r in rounds.items():
        print(f"  {k:<8} median {median_ms(r):8.3f} ms")
    ratio, lo, hi = paired_ratio(rounds["unfused"], rounds["fused"])
    print(f"  unfused / fused: {ratio:.3f}x (90% interval {lo:.3f}-{hi:.3f})")
    # Where the time goes: the convs' epilogues grow, the activation passes go.
    for k, prog in (("fused", fused), ("unfused", unfused)):
        by = prog.profile(repeat=args.rounds).by_category()
        print(f"  {k:<8} per step, summed: " + ", ".join(f"{c} {ms:.2f} ms" for c, ms in sorted(by.items())))


if __name__ == "__main__":
    main()
