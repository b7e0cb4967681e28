"""Which module may import which: the package never depends on the data_prep commands (only the train entry point
calls data_prep/demos.py), and no arrow runs up from a lower layer to the workloads."""
from __future__ import annotations

import ast
import glob
import os

from tests.conftest import ROOT


def _type_checking_only(node) -> bool:
    """An `if TYPE_CHECKING:` block: its imports are for annotations and never run."""
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (getattr(test, "id", None) == "TYPE_CHECKING"
                                         or getattr(test, "attr", None) == "TYPE_CHECKING")


def _imported_modules(path: str) -> set[str]:
    """Every module the file imports when it runs, at any depth (function-level imports included), as dotted names."""
    with open(path) as f:
        tree = ast.parse(f.read(), path)
    names, pending = set(), [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif _type_checking_only(node):
            pending.extend(node.orelse)
            continue
        pending.extend(ast.iter_child_nodes(node))
    return names


def _package_files(folder: str = "mlperf_keras") -> list[str]:
    return sorted(glob.glob(os.path.join(ROOT, folder, "**", "*.py"), recursive=True))


def _importers(prefix: str, folder: str = "mlperf_keras") -> list[str]:
    """The files under folder (relative to the repository) that import prefix or a module below it."""
    return [os.path.relpath(path, ROOT) for path in _package_files(folder)
            if any(name == prefix or name.startswith(prefix + ".") for name in _imported_modules(path))]


def test_only_the_train_entry_point_imports_data_prep():
    assert _importers("data_prep") == ["mlperf_keras/train.py"]


def _module_graph() -> dict:
    """module -> the modules of mlperf_keras and data_prep it imports (packages' __init__ files left out)."""
    modules = {}
    for folder in ("mlperf_keras", "data_prep"):
        for path in _package_files(folder):
            name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
            if not name.endswith(".__init__"):
                modules[name] = path
    return {name: sorted(m for m in _imported_modules(path) if m in modules and m != name)
            for name, path in modules.items()}


def test_no_import_cycles():
    """Function-level imports count: a cycle through them still ties the two modules into one."""
    graph = _module_graph()
    cycles, done = [], set()

    def visit(module, path):
        if module in path:
            cycles.append(path[path.index(module):] + [module])
            return
        if module in done:
            return
        for imported in graph[module]:
            visit(imported, path + [module])
        done.add(module)

    for module in graph:
        visit(module, [])
    assert cycles == []


BUILDING_BLOCKS = ("inputs", "layers", "metrics", "optimizers", "decoding", "compliance")


def test_building_blocks_import_no_workload_and_no_reporter():
    """workloads/ and reporting/ sit above the blocks they assemble (metrics/bleu.py once imported Evaluator from
    workloads/base.py)."""
    upward = [f"{module} -> {imported}" for module, imports in _module_graph().items()
              if module.split(".")[1] in BUILDING_BLOCKS
              for imported in imports if imported.split(".")[1] in ("workloads", "reporting")]
    assert upward == []


def test_workloads_read_the_rules_from_compliance_not_from_the_reporter():
    """The ruleset tables and closed checks live in compliance/, which the reporter imports too (workloads/maskrcnn.py
    once imported reporting.rules)."""
    assert [f"{module} -> {imported}" for module, imports in _module_graph().items()
            if module.startswith("mlperf_keras.workloads.")
            for imported in imports if imported.startswith("mlperf_keras.reporting.")] == []


def test_package_files_over_400_lines_say_why_in_their_docstring():
    """A long module is a choice to state, not an accident: its docstring says "over 400 lines on purpose" and why."""
    unexplained = []
    for path in _package_files():
        with open(path) as f:
            source = f.read()
        if source.count("\n") > 400 and "over 400 lines on purpose" not in (ast.get_docstring(ast.parse(source)) or ""):
            unexplained.append(os.path.relpath(path, ROOT))
    assert unexplained == []
