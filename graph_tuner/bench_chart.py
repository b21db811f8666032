"""The PNG chart of a ``graph-tuner bench`` results file (matplotlib, an optional extra)."""
from __future__ import annotations

import io
import os

from graph_tuner.atomic import atomic_write_all
from graph_tuner.bench_history import OUR_PLANS
from graph_tuner.runtimes import OTHER_RUNTIMES


def write_chart(results: dict, path: str | os.PathLike) -> None:
    """Grouped bars: median latency per model and runtime, p90 as the error bar (written whole,
    as every output is: :mod:`graph_tuner.atomic`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    models = list(results["models"])
    kinds = [k for k in (*OUR_PLANS, *OTHER_RUNTIMES)
             if any(results["models"][m]["runtimes"].get(k) for m in models)]
    fig, ax = plt.subplots(figsize=(max(5, 2.2 * len(models) + 2), 4))
    width = 0.8 / max(1, len(kinds))
    for i, k in enumerate(kinds):
        med = [(results["models"][m]["runtimes"].get(k) or {}).get("median_ms", 0.0) for m in models]
        p90 = [(results["models"][m]["runtimes"].get(k) or {}).get("p90_ms", 0.0) for m in models]
        xs = [j + i * width for j in range(len(models))]
        ax.bar(xs, med, width, label=k.replace("_", " "),
               yerr=[[0] * len(med), [max(0.0, b - a) for a, b in zip(med, p90)]], capsize=2)
    ax.set_xticks([j + width * (len(kinds) - 1) / 2 for j in range(len(models))], models)
    ax.set_ylabel("latency, ms (median; bar to p90)")
    ax.set_title(f"end to end, batch 1, {results['machine']['threads']} threads, {results['machine']['cpu']}")
    ax.legend(fontsize=8)
    fig.tight_layout()
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=110)
    plt.close(fig)
    atomic_write_all({path: png.getvalue()})
