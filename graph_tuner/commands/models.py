"""``graph-tuner models``: list the built-in zoo."""
from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("models", help="list the built-in model zoo",
                              description="List the zoo models: input shape, conv layers, distinct "
                                          "conv workloads and GFLOPs (batch 1).")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from graph_tuner.zoo import MODEL_NAMES, get_model

    print(f"{'model':<18} {'input':<18} {'convs':>5} {'workloads':>9} {'GFLOPs':>7}")
    for name in MODEL_NAMES:
        m = get_model(name)
        shape = "x".join(str(d) for d in m.op(m.inputs[0]).shape)
        print(f"{name:<18} {shape:<18} {len(m.convs()):>5} {len(m.distinct_workloads()):>9} {m.flops() / 1e9:>7.2f}")
    return 0
