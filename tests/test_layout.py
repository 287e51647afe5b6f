"""The shape of the code, checked from its own imports: stages are packages and arrows run one
way (rl -> quant -> converters -> targets -> link -> measure -> study, the API and the CLI on
top), no import circle, the run-directory contract is the only thing later stages know of
training, and the CLI goes through the Python API.

Every import counts, also those inside functions (the lazy ones are still dependencies).
`python tests/test_layout.py` prints the stage graph (module -> the modules it imports)."""
from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Foundation modules any stage may use, then the stages in pipeline order, then the top.
RANKS = {"quarl_edge.errors": 0, "quarl_edge.resources": 0, "quarl_edge.run": 0,
         "quarl_edge.rl": 1, "quarl_edge.quant": 2, "quarl_edge.converters": 3,
         "quarl_edge.targets": 4, "quarl_edge.link": 5, "quarl_edge.measure": 6,
         "quarl_edge.study": 7, "quarl_edge.api": 8, "quarl_edge.demo": 8, "quarl_edge.cli": 9,
         "quarl_edge": 9}
# What the rest of quarl-edge may import from the rl stage: its entry point, the environment
# helpers and QAT; the algorithm modules (dqn, ppo, off_policy, ...) stay private to it.
RL_PUBLIC = {"quarl_edge.rl", "quarl_edge.rl.train", "quarl_edge.rl.envs", "quarl_edge.rl.tf_env",
             "quarl_edge.rl.qat"}


def modules() -> dict[str, Path]:
    """Module name -> file, for quarl_edge/ and converters/ (installed as quarl_edge.converters)."""
    out = {}
    for base, prefix in ((ROOT / "quarl_edge", "quarl_edge"),
                         (ROOT / "converters", "quarl_edge.converters")):
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


def test_arrows_run_one_way_down_the_pipeline():
    back = [f"{a} -> {b}" for a, deps in GRAPH.items() for b in sorted(deps)
            if RANKS[stage(b)] > RANKS[stage(a)]]
    assert back == [], "imports that run back up the pipeline:\n" + "\n".join(back)


def test_later_stages_know_training_only_through_the_run_contract():
    reach = [f"{a} -> {b}" for a, deps in GRAPH.items() if stage(a) != "quarl_edge.rl"
             for b in sorted(deps) if stage(b) == "quarl_edge.rl" and b not in RL_PUBLIC]
    assert reach == [], "imports of rl's algorithm modules from outside rl:\n" + "\n".join(reach)
    assert GRAPH["quarl_edge.run"] <= {"quarl_edge.errors"}


def test_the_converters_stand_on_their_own():
    """The generator needs nothing of the pipeline but the error classes (it is also a CLI,
    `python -m quarl_edge.converters.cgen`, and TF Lite Micro users' exporter)."""
    out = {b for a, deps in GRAPH.items() if stage(a) == "quarl_edge.converters" for b in deps
           if stage(b) != "quarl_edge.converters"}
    assert out <= {"quarl_edge.errors"}


def test_the_graph_reader_sees_the_imports_it_checks():
    """The checks above can fail: the reader finds known arrows, lazy ones included."""
    assert "quarl_edge.targets.build" in GRAPH["quarl_edge.link.session"]
    assert "quarl_edge.converters.cgen" in GRAPH["quarl_edge.targets.build"]   # inside build()
    assert "quarl_edge.link.protocol" in GRAPH["quarl_edge.link.runner"]       # from . import
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]


if __name__ == "__main__":
    for name in sorted(GRAPH, key=lambda m: (RANKS[stage(m)], m)):
        print(f"{RANKS[stage(name)]} {name} -> {', '.join(sorted(GRAPH[name])) or '-'}")
