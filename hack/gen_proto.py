#!/usr/bin/env python3
"""Generate the Python gRPC stubs for every .proto under functions/ with grpcio-tools.

Each .proto lives at its Python package path, so the stubs are generated next to it
with the repository root as the include path and import each other by package name.
Stubs are build output: git ignores them, `make test` and the image build run this.

    python hack/gen_proto.py           generate (only what is missing or older)
    python hack/gen_proto.py --force   regenerate everything
"""

import sys
from importlib.metadata import version
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
GRPCIO_TOOLS = "1.84.0"  # the grpcio the function SDK pins; stubs check it at import


def _outputs(proto: Path) -> list[Path]:
    stem = proto.with_suffix("")
    return [stem.with_name(f"{stem.name}_pb2.py"), stem.with_name(f"{stem.name}_pb2_grpc.py")]


def generate(force: bool = False) -> list[Path]:
    found = version("grpcio-tools")
    if found != GRPCIO_TOOLS:
        sys.exit(f"gen_proto: grpcio-tools {GRPCIO_TOOLS} is pinned; found {found}")
    from grpc_tools import protoc  # noqa: PLC0415  (only after the version check)

    written = []
    for proto in sorted((REPO / "functions").rglob("*.proto")):
        outputs = _outputs(proto)
        mtime = proto.stat().st_mtime
        if not force and all(o.exists() and o.stat().st_mtime >= mtime for o in outputs):
            continue
        relative = proto.relative_to(REPO)
        args = [
            "grpc_tools.protoc",
            f"-I{REPO}",
            f"--python_out={REPO}",
            f"--grpc_python_out={REPO}",
            str(relative),
        ]
        if protoc.main(args) != 0:
            sys.exit(f"gen_proto: protoc failed on {relative}")
        written.extend(outputs)
    return written


if __name__ == "__main__":
    for path in generate(force="--force" in sys.argv[1:]):
        print(f"generated {path.relative_to(REPO)}")
