"""The hand-run scripts' common arguments: a model by name, and its plan.

``add_plan_args(parser)`` adds ``model`` and ``--records``; ``model_and_plan(parser, args)``
loads the model and returns it with the plan from ``--records`` (a graph-tuned log), else
the plan solved from the log shipped for this CPU. A name or log that does not resolve is
the parser's one-line error (exit 2), before any timing.
"""
from __future__ import annotations

import argparse

from graph_tuner.api import apply_records, solve_log
from graph_tuner.errors import GraphTunerError
from graph_tuner.loading import load_model
from graph_tuner.shipped import shipped_log


def add_plan_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("model")
    parser.add_argument("--records", help="a graph-tuned log (default: solve the log shipped for this CPU)")


def model_and_plan(parser: argparse.ArgumentParser, args: argparse.Namespace):
    """``(model, plan)`` as the arguments say, or the parser's error."""
    try:
        model = load_model(args.model)
        if args.records:
            return model, apply_records(model, args.records, None, batch=model.batch, progress=False)
        log = shipped_log(model.name)
        if log is None:
            parser.error(f"no shipped log for {model.name}; pass --records")
        return model, solve_log(model, log)
    except GraphTunerError as e:
        parser.error(str(e))
