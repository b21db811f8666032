"""``graph-tuner inspect MODEL``: the conv layers of a model in conv order, and its
distinct workloads with their counts (``--json`` for one machine-readable object)."""
from __future__ import annotations

import argparse

from graph_tuner.commands import positive_int


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("inspect", help="show a model's conv layers and distinct workloads",
                              description="Print each conv layer in conv order (TVM's visit order) with its "
                                          "AutoTVM workload, then the distinct workloads with their counts.")
    p.add_argument("model", metavar="MODEL", help="a zoo name (see `graph-tuner models`) or an .onnx file")
    p.add_argument("--batch", type=positive_int, default=None,
                   help="batch size (default 1; an ONNX file's own batch if fixed)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of tables")
    p.set_defaults(func=run)


def workload_dict(w) -> dict:
    return {"data_shape": list(w.data_shape), "kernel_shape": list(w.kernel_shape), "strides": list(w.strides),
            "padding": list(w.padding), "dilation": list(w.dilation), "groups": w.groups}


def run(args: argparse.Namespace) -> int:
    import json

    from graph_tuner.loading import load_model

    m = load_model(args.model, batch=args.batch)
    layers = [(op.name, m.workload(op)) for op in m.convs()]
    if args.json:
        print(json.dumps({"model": m.name,
                          "layers": [{"name": name, **workload_dict(w)} for name, w in layers],
                          "workloads": [{**workload_dict(w), "count": n} for w, n in m.distinct_workloads()]}))
        return 0

    def row(w) -> str:
        dims = lambda t: "x".join(map(str, t))  # noqa: E731
        return (f"{dims(w.data_shape):<16} {dims(w.kernel_shape):<16} {dims(w.strides):<7} "
                f"{','.join(map(str, w.padding)):<9} {dims(w.dilation):<5} {w.groups:>6}")

    head = f"{'data':<16} {'kernel':<16} {'strides':<7} {'padding':<9} {'dil':<5} {'groups':>6}"
    print(f"{m.name}: {len(layers)} conv layers, {len(m.distinct_workloads())} distinct workloads, "
          f"{m.flops() / 1e9:.2f} GFLOPs")
    print(f"\n{'#':>4} {'layer':<36} {head}")
    for i, (name, w) in enumerate(layers):
        print(f"{i:>4} {name:<36} {row(w)}")
    print(f"\n{'#':>4} {'count':>5} {head}")
    for i, (w, n) in enumerate(m.distinct_workloads()):
        print(f"{i:>4} {n:>5} {row(w)}")
    return 0
