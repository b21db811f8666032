"""The tuning logs shipped in ``data/``, one folder per CPU they were tuned on.

``data/<cpu>/<model>.log`` (or ``.log.gz``: ``solve`` reads either), where ``<cpu>`` is LLVM's name for the CPU (the records'
``-mcpu=``, e.g. ``rocketlake``, ``znver4``). A log's kernel and transform times are that
machine's: a plan solved from them is optimal there, so the main job prefers the log of
the CPU it runs on.

>>> sorted(shipped_logs("resnet-18"))
['emeraldrapids', 'rocketlake', 'znver3', 'znver4', 'znver5']
"""
from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parents[1] / "data"


def _logs(folder: Path | None = None) -> list[Path]:
    # Plain, or gzip-compressed where a log would grow the repository by megabytes.
    folder = DATA_DIR if folder is None else Path(folder)
    return sorted([*folder.glob("*/*.log"), *folder.glob("*/*.log.gz")])


def _model_of(path: Path) -> str:
    return path.name.removesuffix(".gz").removesuffix(".log")


def shipped_logs(model: str, folder: str | Path | None = None) -> dict[str, Path]:
    """``{cpu: path}`` of the shipped logs of ``model`` (or those in ``folder``, laid out as
    ``data/``; a CPU with both a plain and a compressed log: the plain one)."""
    logs: dict[str, Path] = {}
    for p in _logs(folder):
        if _model_of(p) == model and (p.parent.name not in logs or p.suffix == ".log"):
            logs[p.parent.name] = p
    return logs


def shipped_models() -> list[str]:
    """The models some shipped log covers.

    >>> {"mobilenet-v2", "resnet-18", "resnet-50"} <= set(shipped_models())
    True
    """
    return sorted({_model_of(p) for p in _logs()})


def shipped_log(model: str) -> Path | None:
    """The shipped log of ``model`` tuned on this CPU; failing that, another CPU's (whose
    times are that machine's: ``GraphTuner`` warns about it), one with this CPU's vector width
    where there is one: an AVX-512 CPU's register tiles (twice the lanes) spill on an AVX2 one."""
    from kernels.jit import cpu_lanes, host_cpu

    logs, host = shipped_logs(model), host_cpu()
    if host.name in logs:
        return logs[host.name]
    alike = [path for cpu, path in logs.items() if cpu_lanes(cpu) == host.lanes]
    return next(iter(alike or logs.values()), None)


def folder_log(folder, model: str) -> Path:
    """``solve --records DIR``: the log of ``model`` for this CPU in a folder laid out as
    ``data/`` (what ``tune -o DIR/ --cluster`` writes), ``DIR/<cpu>/<model>.log`` (or
    ``.log.gz``). No log for this CPU is a one-line error naming the CPUs the folder has:
    another CPU's times would make another CPU's plan, so that takes an explicit path."""
    from graph_tuner.errors import GraphTunerError
    from kernels.jit import host_cpu

    folder, cpu = Path(folder), host_cpu().name
    others = shipped_logs(model, folder)
    if cpu in others:
        return others[cpu]
    if others:
        example = next(iter(others.values()))
        has = f"it has {model}'s logs of {', '.join(others)} (--records {example} uses another CPU's times)"
    else:
        has = f"it has no {model}.log for any CPU"
    raise GraphTunerError(f"--records {folder}: no log of {model} for this CPU ({cpu}) in {folder}/{cpu}/; {has}")
