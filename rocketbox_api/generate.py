"""Regenerate the Python modules of rocketbox's own gRPC APIs: ``python -m rocketbox_api.generate``.

The sources are ``proto/rocketbox/**/*.proto``. They are compiled with the import path
``rocketbox_api/...`` mapped onto ``proto/rocketbox/...``, so the generated modules form the
top-level package ``rocketbox_api`` (``rocketbox_api.admin.v1.broker_admin_pb2``) and import each
other under that name: a package called ``proto`` would clash with other projects' modules.

Each ``x.proto`` gives ``x_pb2.py``, its typing stub ``x_pb2.pyi`` and ``x_pb2_grpc.py``. They are
committed; tests/rocketbox_api/test_generated.py fails while they differ from a fresh generation.
The output depends on the grpcio-tools version, which is why pyproject.toml pins it.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
PROTO_ROOT = REPO_ROOT / "proto" / "rocketbox"
PACKAGE = "rocketbox_api"
GENERATED_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def proto_files(proto_root: Path = PROTO_ROOT) -> list[str]:
    """The sources, as protoc sees them: ``rocketbox_api/admin/v1/broker_admin.proto``."""
    return sorted(
        f"{PACKAGE}/{path.relative_to(proto_root).as_posix()}"
        for path in proto_root.rglob("*.proto")
    )


def generated_files(root: Path) -> list[Path]:
    """The generated modules under ``root/rocketbox_api``, relative to ``root``."""
    package = root / PACKAGE
    return sorted(
        path.relative_to(root)
        for path in package.rglob("*")
        if path.is_file() and path.name.endswith(GENERATED_SUFFIXES)
    )


def generate(out_dir: Path = REPO_ROOT) -> list[Path]:
    """Compile every source into ``out_dir``; returns the generated files relative to it.

    Modules of sources that no longer exist are removed first, so none outlives its .proto.
    """
    # Imported here: grpc_tools is a build tool, not needed to run rocketbox.
    from grpc_tools import protoc  # noqa: PLC0415 - grpc_tools is a dev tool, needed only to generate

    out_dir.mkdir(parents=True, exist_ok=True)
    for stale in generated_files(out_dir):
        (out_dir / stale).unlink()
    sources = proto_files()
    if not sources:
        raise SystemExit(f"no .proto files under {PROTO_ROOT}")
    well_known = resources.files("grpc_tools") / "_proto"
    args = [
        "grpc_tools.protoc",
        f"-I{PACKAGE}={PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *sources,
    ]
    code = protoc.main(args)
    if code != 0:
        raise SystemExit(f"protoc failed with exit code {code}")
    # Every directory of the package must be importable (the package's own files are committed).
    for source in sources:
        directory = out_dir / Path(source).parent
        while directory != out_dir:
            (directory / "__init__.py").touch(exist_ok=True)
            directory = directory.parent
    return generated_files(out_dir)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rocketbox_api.generate", description=__doc__)
    parser.add_argument(
        "--out", type=Path, default=REPO_ROOT, help="Directory to generate into (the repository)."
    )
    args = parser.parse_args(argv)
    for path in generate(args.out):
        sys.stdout.write(f"generated {path}\n")


if __name__ == "__main__":
    main()
