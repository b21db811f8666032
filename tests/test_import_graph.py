"""The project's modules import each other without cycles, and its packages depend one way.

Every ``import`` counts, wherever it is: at module level, inside a function (a lazy import
that only dodges a cycle hides the cycle, it does not remove it) or under ``TYPE_CHECKING``.
An edge runs from a module to each project module it names: ``import a.b`` and
``from a import b`` (``b`` a module) to ``a.b``, ``from a.b import name`` to ``a.b``.
Importing a submodule also runs its package's ``__init__`` first; that is not an edge, so a
package ``__init__`` may re-export its submodules (``kernels``, ``solvers``), and a submodule
that imports a name *from* its package's ``__init__`` closes a cycle.
"""
from __future__ import annotations

import ast
import itertools
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("graph_tuner", "kernels", "solvers")
# Which package may import which: graph_tuner -> solvers, kernels; those two know nothing
# of the graph tuner or of each other.
ALLOWED = {"graph_tuner": {"graph_tuner", "kernels", "solvers"}, "kernels": {"kernels"}, "solvers": {"solvers"}}


def modules(root: Path, packages: tuple[str, ...]) -> dict[str, Path]:
    """Dotted module name -> file, for every ``.py`` file under the packages."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imported(node: ast.AST, module: str, is_package: bool, known: dict[str, Path]) -> list[str]:
    """The project modules one import statement names."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    elif isinstance(node, ast.ImportFrom):
        if node.level:  # relative: from the module's package, up level - 1 more
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - node.level + 1]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        names = [f"{source}.{alias.name}" if f"{source}.{alias.name}" in known else source for alias in node.names]
    else:
        return []
    out = []
    for name in names:  # the longest project module the name starts with
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in known:
                out.append(".".join(parts[:n]))
                break
    return out


def import_graph(root: Path, packages: tuple[str, ...]) -> nx.DiGraph:
    known = modules(root, packages)
    graph = nx.DiGraph()
    graph.add_nodes_from(known)
    for module, path in known.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            for target in imported(node, module, path.name == "__init__.py", known):
                if target != module:
                    graph.add_edge(module, target, line=node.lineno)
    return graph


def describe(graph: nx.DiGraph, cycle: list[str]) -> str:
    hops = zip(cycle, cycle[1:] + cycle[:1])
    return " -> ".join(f"{a} (line {graph.edges[a, b]['line']})" for a, b in hops) + f" -> {cycle[0]}"


def test_the_project_imports_no_module_in_a_cycle():
    graph = import_graph(ROOT, PACKAGES)
    assert graph.number_of_edges() > 100  # the scan sees the project's imports
    cycles = [describe(graph, c) for c in itertools.islice(nx.simple_cycles(graph), 10)]
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_packages_depend_one_way():
    graph = import_graph(ROOT, PACKAGES)
    wrong = [f"{a} imports {b} (line {graph.edges[a, b]['line']})" for a, b in graph.edges
             if b.split(".")[0] not in ALLOWED[a.split(".")[0]]]
    assert not wrong, "\n".join(wrong)


# The stages a plan flows through before the executor (README, "Source layout"), and the
# log and tuner modules: none may reach into graph_tuner/executor/ (issue 21, item 1: the
# fusion rules they share with it live in graph_tuner/fusion.py).
ABOVE_THE_EXECUTOR = ("graph_tuner.model", "graph_tuner.onnx_import", "graph_tuner.zoo", "graph_tuner.loading",
                      "graph_tuner.fusion", "graph_tuner.layout_flow", "graph_tuner.candidates",
                      "graph_tuner.transform_costs", "graph_tuner.selection", "graph_tuner.plan",
                      "graph_tuner.records", "graph_tuner.record_checks", "graph_tuner.tuning")


def test_nothing_above_the_executor_imports_it():
    graph = import_graph(ROOT, PACKAGES)
    above = [m for m in graph if any(m == s or m.startswith(s + ".") for s in ABOVE_THE_EXECUTOR)]
    assert len(above) >= len(ABOVE_THE_EXECUTOR)  # every listed module exists
    wrong = [f"{a} imports {b} (line {graph.edges[a, b]['line']})" for a in above for b in graph.successors(a)
             if b == "graph_tuner.executor" or b.startswith("graph_tuner.executor.")]
    assert not wrong, "\n".join(wrong)


def test_the_scan_finds_a_cycle_through_a_lazy_or_relative_import(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.a import f\n")  # a re-export: no cycle by itself
    (pkg / "a.py").write_text("from pkg.sub import b\n\ndef f():\n    return b.g()\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("def g():\n    from ..a import f  # lazy, to dodge the cycle\n    return f\n")
    (pkg / "c.py").write_text("import pkg.sub.b\nfrom pkg import a\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert set(graph.edges) == {("pkg", "pkg.a"), ("pkg.a", "pkg.sub.b"), ("pkg.sub.b", "pkg.a"),
                                ("pkg.c", "pkg.sub.b"), ("pkg.c", "pkg.a")}
    assert [sorted(c) for c in nx.simple_cycles(graph)] == [["pkg.a", "pkg.sub.b"]]
    (pkg / "sub" / "b.py").write_text("def g():\n    return 1\n")
    assert list(nx.simple_cycles(import_graph(tmp_path, ("pkg",)))) == []
