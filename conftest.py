# Root conftest: keep doctest collection away from entry points and hand-run benchmarks.
collect_ignore = ["graph_tuner/__main__.py"]
collect_ignore_glob = ["benchmarks/*", ".venv/*", ".ci-venv/*"]
