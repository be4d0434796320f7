"""The core stays pure: importing it loads no runner and no cloud client (STYLE, brief rule 6)."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

CORE = ["beam_agents.memory", "beam_agents.model", "beam_agents.runtime", "beam_agents.metrics",
        "beam_agents.errors", "beam_agents.stores", "beam_agents.testing",
        "beam_agents.hosting", "beam_agents.tracing", "beam_agents.backend"]

PROBE = """
import importlib, sys
importlib.import_module(sys.argv[1])
roots = {"apache_beam", "pyflink", "httpx", "grpc", "sqlite3", "opentelemetry"}
# Bare `google.cloud` may be pre-imported by a namespace-package .pth file; its
# submodules (the clients) and google.genai / google.api_core may not.
clients = ("google.cloud.", "google.genai", "google.api_core")
print(",".join(sorted(m for m in sys.modules
                      if m.split(".")[0] in roots or m.startswith(clients))))
"""


@pytest.mark.parametrize("package", CORE)
def test_importing_the_core_loads_no_runner_or_cloud_client(package: str) -> None:
    result = subprocess.run([sys.executable, "-c", PROBE, package], capture_output=True,
                            text=True, check=True)
    assert result.stdout.strip() == "", f"{package} imported {result.stdout.strip()}"


SRC = Path(__file__).resolve().parents[2] / "src" / "beam_agents"
#: Module prefixes the core must not name: the edges and every runner or cloud SDK.
EDGES = ("beam_agents.stores", "beam_agents.model.providers", "beam_agents.hosting",
         "beam_agents.beam", "beam_agents.flink", "beam_agents.cli", "beam_agents.testing",
         "beam_agents.otel", "apache_beam", "pyflink", "google", "httpx", "grpc", "sqlite3",
         "opentelemetry")
#: protobuf is the core's one dependency (its messages are the state blobs).
ALLOWED = ("google.protobuf",)


def _core_modules() -> list[Path]:
    core = [*(SRC / "memory").rglob("*.py"), *(SRC / "runtime").rglob("*.py"),
            *(p for p in (SRC / "model").rglob("*.py") if "providers" not in p.parts),
            SRC / "tracing.py", SRC / "backend.py"]
    return sorted(core)


def _module_of(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported(node: ast.Import | ast.ImportFrom, package: str) -> list[str]:
    """The absolute names one import statement names: modules, and ``module.attr`` for a from."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = package.split(".")
        anchor = parts[: len(parts) - node.level + 1]
        base = ".".join([*anchor, base] if base else anchor)
    return [base, *(f"{base}.{alias.name}" for alias in node.names)]


def _named_modules(source: str, package: str) -> Iterator[tuple[int, str]]:
    """Every module an import statement, or importlib.import_module("..."), names."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield from ((node.lineno, name) for name in _imported(node, package))
        elif (isinstance(node, ast.Call) and node.args
              and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)
              and ast.unparse(node.func) in {"importlib.import_module", "import_module",
                                             "__import__"}):
            yield node.lineno, node.args[0].value


def _package_of(path: Path) -> str:
    module = _module_of(path)
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _is_edge(name: str) -> bool:
    def under(prefix: str) -> bool:
        return name == prefix or name.startswith(prefix + ".")

    return any(under(edge) for edge in EDGES) and not any(under(ok) for ok in ALLOWED)


@pytest.mark.parametrize("path", _core_modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_no_core_module_names_an_edge_even_lazily(path: Path) -> None:
    """The fresh-interpreter probe misses imports inside functions; the AST does not."""
    named = _named_modules(path.read_text(encoding="utf-8"), _package_of(path))
    assert [f"{path.name}:{line} {name}" for line, name in named if _is_edge(name)] == []


def test_the_ast_check_sees_lazy_and_relative_imports() -> None:
    """The check itself can fail: function-level, relative and importlib imports are caught."""
    source = ("def f():\n    from beam_agents.stores import SqliteLongtermStore\n"
              "    from ..beam import AgentDoFn\n"
              "    import importlib\n    importlib.import_module('apache_beam')\n"
              "from google.protobuf.message import DecodeError\n")
    named = [name for _, name in _named_modules(source, "beam_agents.runtime") if _is_edge(name)]
    assert sorted(named) == ["apache_beam", "beam_agents.beam", "beam_agents.beam.AgentDoFn",
                             "beam_agents.stores", "beam_agents.stores.SqliteLongtermStore"]


def test_spans_leave_the_core_only_through_the_tracing_port() -> None:
    """The core emits spans through `beam_agents.tracing`; OpenTelemetry is the edge's alone."""
    source = ("from beam_agents.tracing import ActivationTrace\n"
              "def f():\n    from opentelemetry import trace\n"
              "    from beam_agents.otel import OtelTracer\n")
    named = [name for _, name in _named_modules(source, "beam_agents.model") if _is_edge(name)]
    assert sorted(named) == ["beam_agents.otel", "beam_agents.otel.OtelTracer", "opentelemetry",
                             "opentelemetry.trace"]
    result = subprocess.run([sys.executable, "-c", PROBE, "beam_agents.otel"],
                            capture_output=True, text=True, check=True)
    assert "opentelemetry" in result.stdout, "the probe sees OpenTelemetry where it is loaded"


#: The few packages that may reach into another's private modules, and which ones. The doors
#: re-export names from the modules that define them, since the core's public modules no
#: longer hold them: the host door the runtime's engine and snapshot, the backend door the
#: store ports and their kit. The runtime takes the journal's entries from where they live,
#: as the core may not import a door.
MAY_REACH = {
    "hosting": ("beam_agents.runtime",),
    "backend": ("beam_agents.memory._store", "beam_agents.model._journal",
                "beam_agents.runtime._snapshot_parts"),
    "runtime": ("beam_agents.model._journal",),
}


def _is_private_of_another_package(name: str, own: str) -> bool:
    """Whether `name` reaches a ``_private`` module or name inside another top-level subpackage.

    The root's own private modules (``beam_agents._canonical``, ``_proto``, ...)
    are the shared internals every package builds on, so they do not count;
    nor do the reaches `MAY_REACH` allows.
    """
    parts = name.split(".")
    allowed = any(name == prefix or name.startswith(prefix + ".")
                  for prefix in MAY_REACH.get(own, ()))
    return (len(parts) > 2 and parts[0] == "beam_agents" and parts[1] != own
            and not parts[1].startswith("_") and not allowed
            and any(part.startswith("_") and not part.startswith("__") for part in parts[2:]))


def _private_imports_across_packages(source: str, module: str, package: str) -> list[str]:
    """``line: statement`` for each import of another top-level subpackage's private module."""
    own = module.split(".")[1] if "." in module else ""
    hits = [node for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Import | ast.ImportFrom)
            and any(_is_private_of_another_package(name, own)
                    for name in _imported(node, package))]
    return [f"{node.lineno}: {ast.unparse(node)}" for node in sorted(hits, key=lambda n: n.lineno)]


def test_no_module_imports_a_private_module_of_another_package() -> None:
    """Packages meet through their public ``__init__``: a backend or host outside the
    library needs nothing more than what the library's own backends and hosts use."""
    found = [f"{path.relative_to(SRC.parents[1])}:{hit}"
             for path in sorted(SRC.rglob("*.py")) if "_proto" not in path.parts
             for hit in _private_imports_across_packages(
                 path.read_text(encoding="utf-8"), _module_of(path), _package_of(path))]
    assert found == [], "import these from the package instead:\n" + "\n".join(found)


def test_the_private_import_check_sees_relative_and_lazy_imports() -> None:
    """The check itself can fail; imports inside one subpackage and of root internals pass."""
    source = ("from beam_agents.memory._store import validate_key\n"
              "def f():\n    from ..model import _journal\n"
              "    import beam_agents.beam._pubsub\n"
              "import beam_agents.stores._config\n"
              "from ._buffered import StoreBase\n"
              "from beam_agents._canonical import canonical_json\n"
              "from beam_agents.memory import validate_key\n")
    found = _private_imports_across_packages(source, "beam_agents.stores.sqlite",
                                             "beam_agents.stores")
    assert found == ["1: from beam_agents.memory._store import validate_key",
                     "3: from ..model import _journal", "4: import beam_agents.beam._pubsub"]


def test_the_doors_may_reach_only_the_private_modules_they_re_export() -> None:
    """The host door reaches the runtime's modules, the backend door the ports' and kit's;
    neither reaches further, and no other package reaches them."""
    source = ("from beam_agents.runtime._engine import KeyedEngine\n"
              "from beam_agents.memory._store import validate_key\n"
              "from beam_agents.model._journal import JournalEntry\n"
              "from beam_agents.model._facade import ModelFacade\n")
    assert _private_imports_across_packages(source, "beam_agents.hosting._runtime",
                                            "beam_agents.hosting") == [
        "2: from beam_agents.memory._store import validate_key",
        "3: from beam_agents.model._journal import JournalEntry",
        "4: from beam_agents.model._facade import ModelFacade"]
    assert _private_imports_across_packages(source, "beam_agents.backend", "beam_agents") == [
        "1: from beam_agents.runtime._engine import KeyedEngine",
        "4: from beam_agents.model._facade import ModelFacade"]
    assert len(_private_imports_across_packages(source, "beam_agents.stores.sqlite._longterm",
                                                "beam_agents.stores.sqlite")) == 4


def test_no_hand_written_module_has_grown_far_past_the_split_point() -> None:
    """A tripwire, not a target: STYLE splits a module by concept past about 600 lines.

    It sits well above the guidance so that nobody meets it by shortening prose;
    generated protobuf code aside.
    """
    sizes = {str(p.relative_to(SRC)): len(p.read_text(encoding="utf-8").splitlines())
             for p in SRC.rglob("*.py") if "_proto" not in p.parts}
    assert {name: lines for name, lines in sizes.items() if lines > 900} == {}
