"""The ``graph-tuner`` subcommands, one module each (see :mod:`graph_tuner.cli`)."""
from __future__ import annotations

import argparse
import math
import os
from typing import Mapping


# A count larger than this is a typo, and would overflow the int32/int64 sizes downstream.
MAX_COUNT = 2**31 - 1


def _count(text: str, low: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
    if not low <= value <= MAX_COUNT:
        raise argparse.ArgumentTypeError(f"expected {what} up to {MAX_COUNT}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """argparse type for counts: ``--trials 0`` is a one-line usage error, not a traceback.

    >>> positive_int("3")
    3
    """
    return _count(text, 1, "a positive integer")


def nonnegative_int(text: str) -> int:
    """argparse type for counts that may be 0 (off).

    >>> nonnegative_int("0")
    0
    """
    return _count(text, 0, "an integer from 0")


def nonnegative_seconds(text: str) -> float:
    """argparse type for solver time limits: a finite number of seconds, 0 or more.

    >>> nonnegative_seconds("0")
    0.0
    """
    value = _seconds(text)
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"expected a number of seconds >= 0, got {text!r}")
    return value


def _seconds(text: str) -> float:
    """``text`` as a float; NaN when it is no number (the callers' range checks refuse it)."""
    try:
        return float(text)
    except ValueError:
        return math.nan


def positive_seconds(text: str) -> float:
    """argparse type for time budgets: a finite number of seconds above 0.

    >>> positive_seconds("2.5")
    2.5
    >>> positive_seconds("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: expected a positive number of seconds, got '-1'
    """
    value = _seconds(text)
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}")
    return value


def model_inputs(model: str) -> dict[str, object]:
    """The files reading MODEL reads, for :func:`check_paths`: the model file (a zoo name is
    none) and, for an ONNX file, the files its weights are kept in.

    >>> model_inputs("resnet-18")
    {'MODEL': None}
    """
    if not os.path.isfile(model):
        return {"MODEL": None}
    from graph_tuner.onnx_import import external_data_files

    data = external_data_files(model) if model.endswith(".onnx") else []
    return {"MODEL": model, **{f"MODEL's weights file {p.name}": p for p in data}}


def check_paths(inputs: Mapping[str, object], outputs: Mapping[str, object]) -> None:
    """Refuse, before anything runs, an output that is one of the inputs, or the same file as
    another output, or a folder. Keys name the options (``"--records"``), values are paths
    (None: not given).

    >>> check_paths({"--records": "a.log"}, {"-o": "a.log"})
    Traceback (most recent call last):
    ...
    graph_tuner.errors.GraphTunerError: -o a.log is also --records: that would overwrite your input; choose another -o
    >>> check_paths({}, {"-o": "-"})
    Traceback (most recent call last):
    ...
    graph_tuner.errors.GraphTunerError: -o -: outputs are files here, not standard output; give a path, or /dev/stdout to see it
    """
    from graph_tuner.atomic import own_descriptor, special_file
    from graph_tuner.errors import GraphTunerError

    seen: list[tuple[str, str]] = [(opt, str(p)) for opt, p in inputs.items() if p is not None]
    for opt, path in ((o, str(p)) for o, p in outputs.items() if p is not None):
        if path == "-":  # the shell's "standard output": here it made a file named "-"
            raise GraphTunerError(f"{opt} -: outputs are files here, not standard output; give a path, "
                                  "or /dev/stdout to see it")
        if os.path.isdir(path):
            raise GraphTunerError(f"{opt} {path} is a folder; give a file path")
        if own_descriptor(path) is not None:  # /dev/stdout: this process's, written through (graph_tuner.atomic)
            pass
        elif special_file(path):  # /dev/null, a pipe: written through (graph_tuner.atomic), no folder needed
            if not os.access(path, os.W_OK):
                raise GraphTunerError(f"{opt} {path} is not writable; choose another {opt}")
        else:
            # The folder it goes in (a link's target's), or the first of its missing parents' that
            # exists (the writer creates the rest): learn now, not after minutes of solving or timing.
            folder = os.path.dirname(os.path.realpath(path))
            while not os.path.exists(folder):
                folder = os.path.dirname(folder)
            if not os.path.isdir(folder):
                raise GraphTunerError(f"{opt} {path}: {folder} is a file, not a folder; choose another {opt}")
            if not os.access(folder, os.W_OK | os.X_OK):
                raise GraphTunerError(f"{opt} {path}: the folder {folder} is not writable; choose another {opt}")
        for other, prior in seen:
            if _same_file(path, prior):
                what = "overwrite your input" if other in inputs else "write both outputs to one file"
                raise GraphTunerError(f"{opt} {path} is also {other}: that would {what}; choose another {opt}")
        seen.append((opt, path))


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)  # also through links
    except OSError:  # one does not exist (yet): compare the paths it would have
        return os.path.realpath(a) == os.path.realpath(b)
