"""The ``graph-tuner`` subcommands, one module each (see :mod:`graph_tuner.cli`)."""
from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """argparse type for counts: ``--trials 0`` is a one-line usage error, not a traceback.

    >>> positive_int("3")
    3
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value
