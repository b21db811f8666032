"""The one error type the CLI turns into a clean one-line message and exit status 2."""


class GraphTunerError(Exception):
    """A problem with the user's input (file, model, option) that they can fix.

    The message is one line and says what is wrong, where (file, line, layer),
    and what to do. The CLI prints it without a traceback and exits with status 2.

    >>> raise GraphTunerError("resnet.log:3: not a JSON record; fix or drop the line (--skip-bad-lines)")
    Traceback (most recent call last):
    ...
    graph_tuner.errors.GraphTunerError: resnet.log:3: not a JSON record; fix or drop the line (--skip-bad-lines)
    """
