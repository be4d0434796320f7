"""Regenerate src/beam_agents/_proto from proto/ with grpcio-tools.

The generated modules are committed so that installing the package (on a
Dataflow worker, in a Flink TaskManager) needs no code generator. Each .proto
is self-contained, so the modules can live flat in one private package while
the descriptors keep their full `beam_agents/v1/...` names in the pool.

    python tools/gen_protos.py          # rewrite the generated code
    python tools/gen_protos.py --check  # exit 1 if it drifted from proto/
"""

from __future__ import annotations

import argparse
import filecmp
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

ROOT = Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT = ROOT / "src" / "beam_agents" / "_proto"
HEADER = '"""Generated from proto/beam_agents/v1 by tools/gen_protos.py. Do not edit."""\n'


def generate(dest: Path) -> None:
    sources = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.rglob("*.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        include = str(Path(protoc.__file__).parent / "_proto")
        args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={tmp}",
                f"--pyi_out={tmp}", *sources]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        dest.mkdir(parents=True, exist_ok=True)
        for produced in sorted(Path(tmp).rglob("*_pb2.py*")):
            # protoc names the module after the .proto path (beam_agents.v1.x_pb2);
            # point it at where the module really lives, or pickling a message
            # (Beam, Flink and cloudpickle all pickle by module path) fails.
            text = produced.read_text().replace("'beam_agents.v1.", "'beam_agents._proto.")
            (dest / produced.name).write_text(text)
    (dest / "__init__.py").write_text(HEADER)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if the committed code drifted")
    args = parser.parse_args()
    if not args.check:
        generate(OUT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp) / "_proto"
        generate(fresh)
        names = {p.name for p in fresh.iterdir()} | {p.name for p in OUT.iterdir()
                                                     if p.suffix in {".py", ".pyi"}}
        drifted = sorted(n for n in names
                         if not (fresh / n).exists() or not (OUT / n).exists()
                         or not filecmp.cmp(fresh / n, OUT / n, shallow=False))
    if drifted:
        print("generated protobuf code drifted from proto/: " + ", ".join(drifted), file=sys.stderr)
        print("run: python tools/gen_protos.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
