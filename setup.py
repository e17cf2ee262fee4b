"""Build hook: generate the kubelet gRPC stubs from ``operator/proto`` with grpcio-tools.

Everything else about the package is declared in ``pyproject.toml``. The stubs are generated, never
committed: into the build tree for a wheel, into the source tree for an editable install (setuptools
maps an editable src-layout install onto ``operator/src``, so that is where Python finds them).
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
PROTO_ROOT = HERE / "operator" / "proto"
SRC = HERE / "operator" / "src"


def generate_stubs(out_root: Path) -> list[Path]:
    """Run protoc over every ``.proto`` under ``operator/proto``; the modules it wrote."""
    from grpc_tools import protoc  # a build requirement (pyproject [build-system])

    protos = sorted(PROTO_ROOT.rglob("*.proto"))
    grpc_include = Path(protoc.__file__).parent / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{grpc_include}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *(str(p.relative_to(PROTO_ROOT)) for p in protos),
    ]
    out_root.mkdir(parents=True, exist_ok=True)
    if protoc.main(args) != 0:
        raise SystemExit(f"protoc failed on {', '.join(p.name for p in protos)}")
    written = []
    for proto in protos:
        stem = out_root / proto.relative_to(PROTO_ROOT).with_suffix("")
        written += [stem.with_name(stem.name + suffix) for suffix in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")]
    return written


class BuildPyWithStubs(build_py):
    def run(self) -> None:
        if getattr(self, "editable_mode", False):
            generate_stubs(SRC)
            super().run()
        else:
            super().run()
            generate_stubs(Path(self.build_lib))

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:  # type: ignore[override]
        outputs = list(super().get_outputs(include_bytecode))
        if not getattr(self, "editable_mode", False):
            root = Path(self.build_lib)
            for proto in sorted(PROTO_ROOT.rglob("*.proto")):
                stem = root / proto.relative_to(PROTO_ROOT).with_suffix("")
                outputs += [str(stem.with_name(stem.name + s)) for s in ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")]
        return outputs


setup(cmdclass={"build_py": BuildPyWithStubs})
