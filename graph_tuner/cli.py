"""The ``graph-tuner`` command line.

Each subcommand lives in ``graph_tuner/commands/<name>.py`` and exposes
``register(subparsers)``, which adds its parser and sets ``func`` (called with the
parsed arguments, returning an exit status). Heavy imports (scipy's solvers, llvmlite)
happen inside ``func`` so that ``--help`` stays fast.

User errors (:class:`GraphTunerError`) print one line and exit with status 2. Anything
else is a bug of ours: one line too (``GRAPH_TUNER_DEBUG=1`` re-raises it), status 1.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
from typing import Sequence

from graph_tuner import __version__
from graph_tuner.environment import check_environment
from graph_tuner.errors import GraphTunerError

# In the order `--help` lists them: the pipeline, top to bottom.
COMMANDS = ("models", "inspect", "tune", "solve", "run", "bench")


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (pointing at --help) and exit status 2."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="graph-tuner",
        description="Choose, for every conv layer, the kernel schedule and data layout "
        "that minimise the network's total time (kernels + layout transforms).",
    )
    parser.add_argument("--version", action="version", version=f"graph-tuner {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"graph_tuner.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        check_environment()
        return int(args.func(args) or 0)
    except GraphTunerError as e:
        print(f"graph-tuner: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("graph-tuner: interrupted", file=sys.stderr)
        # An interrupt inside llvmlite leaves a half-made object whose __del__ then fails at
        # exit ("Exception ignored in: ObjectRef.__del__" and a traceback): noise after the one line.
        sys.unraisablehook = lambda unraisable: None
        return 130
    except BrokenPipeError:
        # Output piped into e.g. `head`, which exited: not an error of ours.
        sys.stderr.close()
        return 0
    except Exception as e:  # the backstop: every user error has its own check where it enters
        if os.environ.get("GRAPH_TUNER_DEBUG"):
            raise
        first = (str(e).splitlines() or [""])[0]
        print(f"graph-tuner: internal error: {type(e).__name__}: {first}; please report it with the command "
              "line (GRAPH_TUNER_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
