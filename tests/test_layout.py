"""The shape of the code, checked from its own imports and folders.

The folders are the packages: every folder of Python under quarl_edge/ is a package (has an
__init__.py), no folder outside quarl_edge/ is one, and pyproject.toml maps no Python package to
another folder (package-dir names only the data "packages" of quarl_edge.data).

Two towers stand on one foundation: quarl_edge.core (the run directory contract, networks,
errors, schema, file writer, names, resources, host TFLite, environments) imports nothing outside
itself; the model side (rl -> quant, importers) and the board side (converters -> targets -> link)
import core and their own tower only, never each other; measure, where the towers meet, then
study, then the API (api, api_results, demo), then the CLI. Arrows run one way down that order
(within a tower too), there is no import circle, the run-directory contract is the only thing
later stages know of training, and the CLI goes through the Python API.

Every import counts, also those inside functions (the lazy ones are still dependencies).
`python tests/test_layout.py [CHECKOUT]` prints the graph of a checkout (default this one):
each module with its rank and the modules it imports, then the import circles, the arrows that
run back up or across the towers and the depth of the longest import chain."""
from __future__ import annotations

import ast
import os
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# The ranks: the foundation, the two towers' sides, where they meet (measure), the study, the
# API, the CLI on top. An import may go to its own rank or below, never up.
RANKS = {"quarl_edge.core": 0,
         "quarl_edge.rl": 1, "quarl_edge.quant": 1, "quarl_edge.importers": 1,
         "quarl_edge.converters": 1, "quarl_edge.targets": 1, "quarl_edge.link": 1,
         "quarl_edge.measure": 2,
         "quarl_edge.pipeline": 2.5,    # the steps composed once: study and the API call it
         "quarl_edge.study": 3,
         "quarl_edge.api": 4, "quarl_edge.api_results": 4, "quarl_edge.demo": 4,
         "quarl_edge.cli": 5, "quarl_edge": 5}
# The towers, each in its own pipeline order (an import goes to an earlier or the same step):
# the model side trains (rl) and quantizes (quant; importers is the other way into a run
# directory and uses quant's calibration, so it ranks with it); the board side generates C
# (converters), builds and starts firmware (targets) and speaks to the board (link).
TOWERS = {"model": [("quarl_edge.rl",), ("quarl_edge.quant", "quarl_edge.importers")],
          "board": [("quarl_edge.converters",), ("quarl_edge.targets",), ("quarl_edge.link",)]}
# What the rest of quarl-edge may import from the rl stage: its entry point, the TF-Agents
# adapter, QAT, and the recurrent policy's network (rl/recurrent.py: its arrays, numpy stepping
# and one-step conversion, what quantize and hil need of a recurrent run); the algorithm modules
# (dqn, ppo, rppo, off_policy, ...) and the run writers (recurrent_export) stay private to it.
# (The environments, which every stage uses, are quarl_edge.core.envs.)
RL_PUBLIC = {"quarl_edge.rl", "quarl_edge.rl.train", "quarl_edge.rl.tf_env",
             "quarl_edge.rl.qat", "quarl_edge.rl.recurrent"}


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, for every .py under quarl_edge/ (the folders are the packages). An
    older checkout's top-level converters/ (installed as quarl_edge.converters) is read too."""
    out = {}
    for base, prefix in ((root / "quarl_edge", "quarl_edge"),
                         (root / "converters", "quarl_edge.converters")):
        for f in sorted(base.rglob("*.py")):
            parts = list(f.relative_to(base).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([prefix, *parts])] = f
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the quarl_edge modules it imports (anywhere in the file)."""
    graph = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[:len(base) - node.level + 1]
                    mod = ".".join(base + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                targets = [f"{mod}.{a.name}" if f"{mod}.{a.name}" in mods else mod
                           for a in node.names]
            else:
                continue
            deps |= {t for t in targets if t in mods and t != name}
        graph[name] = deps
    return graph


def stage(module: str) -> str:
    for key in sorted(RANKS, key=len, reverse=True):
        if module == key or module.startswith(key + "."):
            return key
    raise AssertionError(f"{module} belongs to no stage of RANKS")


def tower(module: str) -> tuple[str, int] | None:
    """(tower, step in it) of a module on one of the two sides, else None."""
    st = stage(module)
    for name, steps in TOWERS.items():
        for i, step in enumerate(steps):
            if st in step:
                return name, i
    return None


def wrong_way(a: str, b: str) -> str | None:
    """Why the import a -> b breaks the order (None if it does not)."""
    if RANKS[stage(b)] > RANKS[stage(a)]:
        return "back up"
    ta, tb = tower(a), tower(b)
    if ta and tb and ta[0] != tb[0]:
        return "across the towers"
    if ta and tb and tb[1] > ta[1]:
        return f"back up the {ta[0]} side"
    return None


def depth(graph: dict[str, set[str]]) -> int:
    """Import levels: 1 for a module importing none of the others, else 1 + its deepest import
    (circles are cut where they close)."""
    memo: dict[str, int] = {}

    def level(v, seen):
        if v in memo:
            return memo[v]
        seen = seen | {v}
        d = 1 + max((level(w, seen) for w in graph[v] if w not in seen), default=0)
        memo[v] = d
        return d
    return max(level(v, frozenset()) for v in graph)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import circles (Tarjan's strongly connected components of more than one module)."""
    index, low, stack, on, out = {}, {}, [], set(), []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            visit(v)
    return out


GRAPH = imports(modules())


def test_there_is_no_import_circle():
    assert cycles(GRAPH) == []


def test_arrows_run_one_way_down_and_never_across_the_towers():
    bad = [f"{a} -> {b} ({why})" for a, deps in GRAPH.items() for b in sorted(deps)
           if (why := wrong_way(a, b))]
    assert bad == [], "imports against the order:\n" + "\n".join(bad)


def test_the_order_check_can_fail():
    """wrong_way() sees each kind of wrong arrow (so the test above is not vacuous)."""
    assert wrong_way("quarl_edge.core.run", "quarl_edge.rl.train") == "back up"
    assert wrong_way("quarl_edge.quant.schemes", "quarl_edge.converters.cgen") == \
        "across the towers"
    assert wrong_way("quarl_edge.converters.cgen", "quarl_edge.link.protocol") == \
        "back up the board side"
    assert wrong_way("quarl_edge.rl.train", "quarl_edge.quant.schemes") == \
        "back up the model side"
    assert wrong_way("quarl_edge.link.session", "quarl_edge.targets.build") is None
    assert wrong_way("quarl_edge.measure.hil", "quarl_edge.quant.schemes") is None


def test_the_core_imports_nothing_outside_itself():
    out = [f"{a} -> {b}" for a, deps in GRAPH.items() if stage(a) == "quarl_edge.core"
           for b in sorted(deps) if stage(b) != "quarl_edge.core"]
    assert out == [], "the foundation imports outside quarl_edge.core:\n" + "\n".join(out)
    assert {"quarl_edge.core.run", "quarl_edge.core.errors", "quarl_edge.core.envs"} <= set(GRAPH)


def test_the_folders_are_the_packages():
    """Every folder of Python under quarl_edge/ is a package, none outside is, and the build maps
    no Python package to another folder: the checkout reads as it is installed."""
    pkg = ROOT / "quarl_edge"
    folders = {f.parent for f in pkg.rglob("*.py") if "__pycache__" not in f.parts}
    assert [str(d) for d in sorted(folders) if not (d / "__init__.py").is_file()] == []
    outside = []
    for d, subdirs, files in os.walk(ROOT):     # not into .venv/, .git/, build/ or quarl_edge/
        subdirs[:] = [s for s in subdirs if not s.startswith(".") and s != "build"
                      and Path(d, s) != pkg]
        outside += [str(Path(d).relative_to(ROOT))] if "__init__.py" in files else []
    assert outside == [], f"packages outside quarl_edge/: {outside}"
    assert not (ROOT / "converters").exists()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    mapped = config["tool"]["setuptools"].get("package-dir", {})
    assert [k for k in mapped if not k.startswith("quarl_edge.data.")] == []
    for name, folder in mapped.items():         # a data "package" holds no Python package
        assert not (ROOT / folder / "__init__.py").exists(), name
    assert "package-dir" not in (ROOT / "setup.py").read_text()


def test_later_stages_know_training_only_through_the_run_contract():
    reach = [f"{a} -> {b}" for a, deps in GRAPH.items() if stage(a) != "quarl_edge.rl"
             for b in sorted(deps) if stage(b) == "quarl_edge.rl" and b not in RL_PUBLIC]
    assert reach == [], "imports of rl's algorithm modules from outside rl:\n" + "\n".join(reach)
    assert GRAPH["quarl_edge.core.run"] <= {"quarl_edge.core.errors", "quarl_edge.core.schema",
                                            "quarl_edge.core.files"}


def test_the_run_contract_holds_no_network_code():
    """run.py is the run directory (run.json, the network files it names, reading and writing
    them); running those networks is nets.py's, which stands on the contract and the errors."""
    assert GRAPH["quarl_edge.core.nets"] <= {"quarl_edge.core.errors", "quarl_edge.core.run"}
    assert "quarl_edge.core.run" in GRAPH["quarl_edge.core.nets"]
    tree = ast.parse((ROOT / "quarl_edge" / "core" / "run.py").read_text())
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    assert not defined & {"mlp_layers", "mlp_forward", "mlp_q_values", "keras_runner",
                          "keras_call", "keras_mlp", "weighted_layers", "ppo_action_std"}
    assert {"load_run", "write_run", "load_keras", "tflite_path"} <= defined


def test_the_converters_stand_on_their_own():
    """The generator needs nothing of the pipeline but the error classes and the file writer
    (files.py, which stands on the errors alone): it is also a CLI, `python -m
    quarl_edge.converters.cgen`, and TF Lite Micro users' exporter."""
    out = {b for a, deps in GRAPH.items() if stage(a) == "quarl_edge.converters" for b in deps
           if stage(b) != "quarl_edge.converters"}
    assert out <= {"quarl_edge.core.errors", "quarl_edge.core.files"}


def cli_imports() -> set[str]:
    """What the modules of the CLI package (quarl_edge/cli/) import from outside it."""
    cli = {m for m in GRAPH if stage(m) == "quarl_edge.cli"}
    assert {"quarl_edge.cli", "quarl_edge.cli.runs", "quarl_edge.cli.on_board"} <= cli
    return {b for a in cli for b in GRAPH[a] if b not in cli}


def test_the_cli_goes_through_the_python_api():
    """The CLI parses arguments and prints; the work is the API's (quarl_edge.api, reached as
    `import quarl_edge as qe`), so --json and the API return the same data. Every module of
    the package counts (the command groups' handlers are where a stage import would creep in);
    demo's is the one lazy import, read as well."""
    outside = cli_imports()
    assert outside <= {"quarl_edge", "quarl_edge.core.errors", "quarl_edge.core.noise",
                       "quarl_edge.demo", "quarl_edge.core.names",
                       "quarl_edge.core.files"}   # (only to say a full disk in one line)
    assert {"quarl_edge", "quarl_edge.demo"} <= outside     # the reader sees the package's
    init = (ROOT / "quarl_edge" / "__init__.py").read_text()     # its imports are lazy, by name
    assert GRAPH["quarl_edge"] == set() and 'import_module("quarl_edge.api")' in init


def test_the_demo_goes_through_the_python_api():
    """demo.py runs the pipeline as a user's script would: through quarl_edge.api (whose
    functions are the pipeline's steps), no stage; the run directory through its Run."""
    assert GRAPH["quarl_edge.demo"] <= {"quarl_edge.api", "quarl_edge.core.resources",
                                        "quarl_edge.core.run"}
    assert "quarl_edge.api" in GRAPH["quarl_edge.demo"]


def test_the_pipeline_is_composed_once():
    """pipeline.py composes the stages (rl, quant, targets, link, measure); the API and the
    study's cells call it rather than the stages' entry points it wraps."""
    assert {"quarl_edge.rl.train", "quarl_edge.quant.schemes", "quarl_edge.targets.build",
            "quarl_edge.link.session", "quarl_edge.measure.hil"} <= GRAPH["quarl_edge.pipeline"]
    # (rl.train's config helpers are the study's to read; its train() is the pipeline's)
    wrapped = {"quarl_edge.quant.schemes", "quarl_edge.measure.hil",
               "quarl_edge.measure.hil_act", "quarl_edge.link.session",
               "quarl_edge.measure.validate", "quarl_edge.measure.perop"}
    for user in ("quarl_edge.api", "quarl_edge.study.cells"):
        assert "quarl_edge.pipeline" in GRAPH[user], user
        assert not GRAPH[user] & wrapped, (user, GRAPH[user] & wrapped)


# Project imports made inside a function: at most this many, each commented `# lazy: <why>` on
# its line (TensorFlow, onnx and the like, which a core install may lack or which take seconds).
MAX_LAZY_IMPORTS = 25


def lazy_imports(root: Path = ROOT) -> list[tuple[str, int, str]]:
    """(file, line, its text) of every import of a quarl_edge module (absolute or relative)
    nested in a function, in quarl_edge/ and quarl_edge/converters/."""
    out = []
    for path in modules(root).values():
        text = path.read_text()
        lines = text.splitlines()

        def walk(node, in_function):
            for child in ast.iter_child_nodes(node):
                inner = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
                ours = (isinstance(child, ast.ImportFrom)
                        and (child.level > 0 or (child.module or "").startswith("quarl_edge"))
                        or isinstance(child, ast.Import)
                        and any(a.name.split(".")[0] == "quarl_edge" for a in child.names))
                if in_function and ours:
                    out.append((str(path.relative_to(root)), child.lineno,
                                "\n".join(lines[child.lineno - 1:child.end_lineno])))
                walk(child, inner)
        walk(ast.parse(text), False)
    return out


def test_project_imports_sit_at_the_top_of_their_module():
    """A reader (and this file's graph) follows a call from the API into a stage by the imports
    at the top; the few made inside a function say why with a `# lazy:` comment."""
    found = lazy_imports()
    assert len(found) <= MAX_LAZY_IMPORTS, "\n".join(f"{f}:{n}: {t}" for f, n, t in found)
    bare = [f"{f}:{n}: {t}" for f, n, t in found if "# lazy:" not in t]
    assert bare == [], "imports inside functions without a `# lazy: <why>` comment:\n" + \
        "\n".join(bare)


def test_the_lazy_import_check_sees_nested_imports(tmp_path):
    """The counter finds an import nested in a function, not one at the top."""
    (tmp_path / "quarl_edge").mkdir()
    (tmp_path / "converters").mkdir()
    (tmp_path / "quarl_edge" / "m.py").write_text(
        "from .errors import QuarlError\n\ndef f():\n    from .run import Run  # lazy: x\n"
        "    def g():\n        import quarl_edge.core.files\n")
    found = lazy_imports(tmp_path)
    assert [(n, "# lazy:" in t) for _, n, t in found] == [(4, True), (6, False)]


def test_the_names_module_is_a_foundation_module():
    """quarl_edge.core.names, which the CLI reads for its choices, imports nothing of the project (so
    --help needs no TensorFlow and no stage)."""
    assert GRAPH["quarl_edge.core.names"] == set()
    assert "quarl_edge.core.names" in cli_imports()


def test_the_graph_reader_sees_the_imports_it_checks():
    """The checks above can fail: the reader finds known arrows, lazy ones included."""
    assert "quarl_edge.targets.build" in GRAPH["quarl_edge.link.session"]
    assert "quarl_edge.converters.cgen" in GRAPH["quarl_edge.targets.build"]
    assert "quarl_edge.rl.tf_env" in GRAPH["quarl_edge.rl.dqn"]       # inside _envs()
    assert "quarl_edge.link.protocol" in GRAPH["quarl_edge.link.runner"]       # from . import
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


def test_the_schema_checker_is_a_foundation_module():
    """Board files, study configs and run.json are checked by quarl_edge.core.schema, which any stage
    may use: it stands on the errors alone."""
    assert GRAPH["quarl_edge.core.schema"] <= {"quarl_edge.core.errors"}
    assert "quarl_edge.core.schema" in GRAPH["quarl_edge.targets.boards"]
    assert "quarl_edge.core.schema" in GRAPH["quarl_edge.study.config"]


def test_the_file_writer_is_a_foundation_module():
    """Every stage writes its files through quarl_edge.core.files (temporary name, rename, no
    symlink followed, a full disk in one line): it stands on the errors alone."""
    assert GRAPH["quarl_edge.core.files"] <= {"quarl_edge.core.errors"}
    for user in ("quarl_edge.core.run", "quarl_edge.importers.common", "quarl_edge.targets.build",
                 "quarl_edge.measure.bench", "quarl_edge.measure.hil", "quarl_edge.study.report"):
        assert "quarl_edge.core.files" in GRAPH[user], user
    assert "quarl_edge.core.run" in GRAPH["quarl_edge.quant.schemes"]     # its models: Run's writes


if __name__ == "__main__":
    root = Path(sys.argv[1]).resolve() if len(sys.argv) > 1 else ROOT
    graph = imports(modules(root))

    def rank(m):
        try:
            return RANKS[stage(m)]
        except AssertionError:
            return -1
    for name in sorted(graph, key=lambda m: (str(rank(m)), m)):
        print(f"{rank(name)} {name} -> {', '.join(sorted(graph[name])) or '-'}")
    print(f"\n{len(graph)} modules, {sum(map(len, graph.values()))} imports, "
          f"{depth(graph)} import levels")
    for c in cycles(graph):
        print("circle:", " <-> ".join(c))
    for a, deps in sorted(graph.items()):
        for b in sorted(deps):
            if rank(a) >= 0 and rank(b) >= 0 and (why := wrong_way(a, b)):
                print(f"{why}: {a} -> {b}")
