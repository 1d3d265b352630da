"""Regenerate the client's copy of the sidecar API's protobuf module: ``python client/generate.py``.

The source is proto/rocketbox/v1/sidecar.proto, compiled exactly as rocketbox_api/generate.py
compiles it for the server: under the import path ``rocketbox_api/v1/sidecar.proto``. That name
is registered in protobuf's descriptor pool, and it is why the copy imports beside the server's
``rocketbox_api.v1.sidecar_pb2`` in one process: the same name with the same bytes is one file to
protobuf, while another name defining the same ``rocketbox.v1`` messages is a "duplicate symbol"
error at import.

Only ``sidecar_pb2.py`` and its typing stub ``sidecar_pb2.pyi`` are kept, in
``rocketbox_client/_proto/``. The gRPC stub module (``_pb2_grpc``) is not generated: it imports
``rocketbox_api`` by name and has no types; the client derives its method paths from the
descriptor instead (rocketbox_client/_rpc.py). The committed copy must be byte-identical to a fresh
generation (tests/client/test_generated.py); the output depends on the grpcio-tools version, which
the repository's pyproject.toml pins.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

CLIENT_ROOT = Path(__file__).resolve().parent
REPO_ROOT = CLIENT_ROOT.parent
PROTO_ROOT = REPO_ROOT / "proto" / "rocketbox"
# The server's import path for the same sources (rocketbox_api/generate.py): see the docstring.
SOURCE = "rocketbox_api/v1/sidecar.proto"
OUT_DIR = CLIENT_ROOT / "rocketbox_client" / "_proto"
GENERATED = ("sidecar_pb2.py", "sidecar_pb2.pyi")


def generate(out_dir: Path = OUT_DIR) -> list[Path]:
    """Compile the source and copy its modules into ``out_dir``; returns their paths."""
    # Imported here: grpc_tools is a build tool of the repository, not a client dependency.
    from grpc_tools import protoc  # noqa: PLC0415 - grpc_tools is a dev tool, needed only to generate

    well_known = resources.files("grpc_tools") / "_proto"
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        code = protoc.main(
            [
                "grpc_tools.protoc",
                f"-Irocketbox_api={PROTO_ROOT}",
                f"-I{well_known}",
                f"--python_out={scratch}",
                f"--pyi_out={scratch}",
                SOURCE,
            ]
        )
        if code != 0:
            raise SystemExit(f"protoc failed with exit code {code}")
        made = Path(scratch) / Path(SOURCE).parent
        for name in GENERATED:
            shutil.copyfile(made / name, out_dir / name)
    return [out_dir / name for name in GENERATED]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python client/generate.py", description=__doc__)
    parser.add_argument(
        "--out", type=Path, default=OUT_DIR, help="Directory to write the modules into."
    )
    args = parser.parse_args(argv)
    for path in generate(args.out):
        sys.stdout.write(f"generated {path}\n")


if __name__ == "__main__":
    main()
