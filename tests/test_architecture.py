"""The import contract (docs/design/architecture.md), checked over the AST of every module.

Floors, bottom up: ``platform`` (what both domains share); ``agent_rl``, the agent-RL stack
(policies, rollouts, SFT / GRPO / PPO / RFT / GiGPO) over the platform only; the domains ``coding_rl``
and ``simulator`` over it (never each other); ``offline`` over the simulator; ``human_review`` over
both of those; ``apps`` over human_review. On top, ``comparison``, ``cli.py`` and ``demo.py`` may import
every room. Every import counts, also the ones inside functions and ``TYPE_CHECKING`` blocks.
Run by ``make lint`` and CI.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

PACKAGE = "transferlab"
ROOT = Path(__file__).resolve().parents[1] / PACKAGE

TOP = {"comparison", "cli", "demo"}
ALLOWED: dict[str, set[str]] = {
    "platform": set(),
    "agent_rl": {"platform"},
    "coding_rl": {"agent_rl", "platform"},
    "simulator": {"agent_rl", "platform"},
    "offline": {"simulator", "agent_rl", "platform"},
    "human_review": {"offline", "simulator", "agent_rl", "platform"},
    "apps": {"human_review", "offline", "simulator", "agent_rl", "platform"},
    "__init__": {"platform"},
}
"""Room -> the rooms it may import (besides itself and the bare package). The top floor may import all."""


def room_of(module: str) -> str:
    """``transferlab.simulator.ops.env`` -> ``simulator``; ``transferlab`` -> ``__init__``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def module_name(path: Path, root: Path) -> str:
    rel = path.relative_to(root.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_room(root: Path, name: str) -> bool:
    return (root / name).is_dir() or (root / f"{name}.py").is_file()


def imports_of(path: Path, root: Path) -> Iterator[tuple[int, str]]:
    """(line, imported module) for every import of the package in ``path``, relative ones resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            names = [target]
            if target == PACKAGE:  # `from transferlab import coding_rl` imports a room
                names += [f"{PACKAGE}.{a.name}" for a in node.names if _is_room(root, a.name)]
        else:
            continue
        for name in names:
            if name == PACKAGE or name.startswith(PACKAGE + "."):
                yield node.lineno, name


def violations(root: Path, allowed: Mapping[str, set[str]] = ALLOWED, top: set[str] = TOP) -> list[str]:
    """Every import that breaks the contract, as ``path:line: room imports room (module)``."""
    found = []
    for path in sorted(root.rglob("*.py")):
        source = room_of(module_name(path, root))
        if source in top:
            continue
        may = allowed.get(source)
        for line, name in imports_of(path, root):
            target = room_of(name)
            if target in (source, "__init__") or name == PACKAGE:
                continue
            if may is None or target not in may:
                rel = path.relative_to(root.parent)
                found.append(f"{rel}:{line}: {source} imports {target} ({name})")
    return found


def room_graph(root: Path) -> dict[str, set[str]]:
    """Room -> the rooms its modules import (the bare package left out)."""
    graph: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        source = room_of(module_name(path, root))
        targets = graph.setdefault(source, set())
        targets.update(room_of(n) for _, n in imports_of(path, root) if n != PACKAGE)
        targets.discard(source)
        targets.discard("__init__")
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The import cycles between rooms (each once, as found by a depth-first walk)."""
    found: list[list[str]] = []
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append([*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                visit(nxt, [*trail, nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


# ------------------------------------------------------------------------------ the contract holds


def test_every_room_imports_only_the_floors_below() -> None:
    assert violations(ROOT) == []


def test_no_cycles_between_rooms() -> None:
    assert cycles(room_graph(ROOT)) == []


def test_every_room_is_in_the_contract() -> None:
    """A new room must be placed on a floor here (and in docs/design/architecture.md)."""
    rooms = {room_of(module_name(p, ROOT)) for p in ROOT.rglob("*.py")}
    assert rooms - set(ALLOWED) - TOP == set()


def test_the_architecture_page_names_every_room() -> None:
    page = (ROOT.parent / "docs" / "design" / "architecture.md").read_text(encoding="utf-8")
    rooms = {room_of(module_name(p, ROOT)) for p in ROOT.rglob("*.py")} - {"__init__", "cli", "demo"}
    assert [r for r in sorted(rooms) if f"`{r}/`" not in page] == []


# ------------------------------------------------------------------------ the checker, on a toy tree


def _tree(tmp_path: Path, files: Mapping[str, str]) -> Path:
    root = tmp_path / PACKAGE
    for rel, text in {"__init__.py": "", **files}.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_the_checker_finds_a_platform_module_importing_a_domain(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "platform/__init__.py": "",
            "platform/io.py": "def f():\n    from transferlab.simulator.world import World\n",
            "simulator/__init__.py": "",
            "simulator/world.py": "from transferlab.platform import io\nimport transferlab\n",
            "cli.py": "import transferlab.simulator.world\nimport transferlab.coding_rl\n",
        },
    )
    assert violations(root) == [
        "transferlab/platform/io.py:2: platform imports simulator (transferlab.simulator.world)"
    ]


@pytest.mark.parametrize(
    "line",
    [
        "from transferlab.coding_rl.env import ENV_ID",
        "from transferlab import coding_rl",
        "from ..coding_rl import env",
        "if TYPE_CHECKING:\n    import transferlab.coding_rl.env",
    ],
)
def test_the_checker_sees_every_form_of_import(tmp_path: Path, line: str) -> None:
    files = {"coding_rl/__init__.py": "", "simulator/__init__.py": "", "simulator/x.py": f"{line}\n"}
    root = _tree(tmp_path, files)
    (found,) = violations(root)
    assert "simulator imports coding_rl" in found


def test_the_checker_finds_a_cycle(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "offline/__init__.py": "",
            "offline/a.py": "import transferlab.simulator.b\n",
            "simulator/__init__.py": "",
            "simulator/b.py": "from transferlab.offline import a\n",
        },
    )
    assert cycles(room_graph(root)) == [["offline", "simulator", "offline"]]
    assert violations(root) == [
        "transferlab/simulator/b.py:1: simulator imports offline (transferlab.offline)"
    ]


def test_an_unknown_room_may_import_nothing(tmp_path: Path) -> None:
    root = _tree(tmp_path, {"newroom/__init__.py": "import transferlab.platform.io\n"})
    assert violations(root) == [
        "transferlab/newroom/__init__.py:1: newroom imports platform (transferlab.platform.io)"
    ]
