"""The storage servers as the tests run them: `python tests/storage_servers.py gcs ARGS` is
gcp-storage-emulator and `... s3 ARGS` moto's server, each with its own command-line arguments
and one per-request cost taken out. Everything else, the HTTP APIs included, is theirs.

gcs: the emulator keeps every bucket's and object's metadata in one JSON file (`.meta`) and
rewrites it whole, indented, on every change (each object of a batch delete included). The
session's emulator serves every test module on its test worker, so the file grows through the
run and each write gets slower: 1.0 MB after one worker's modules, 10 ms a rewrite; that one
process used 15.8 s of CPU in a suite run (2026-12-04), over half of it in `json.dumps`. Here the
file is written without indentation (3 ms where indented took 10 ms, same content) and atomically
(a temporary file renamed over it: a process stopped in the middle of a write leaves the previous
whole file, not a broken one). The test buckets are made with soft delete off
(tests/servers.py, `GcsServer._create_bucket`), which keeps the file small.

s3: moto's server looks up which service a request is for by listing its own package folder
(`moto.backends.list_of_moto_modules`: a listdir and ~200 isdir calls) on every request, a fifth
of the server's samples under py-spy while the S3 tests ran. The list is made once here.
"""

from __future__ import annotations

import json
import os
import sys

__all__ = ["main"]


def _write_config_to_file(self) -> None:
    """gcp_storage_emulator's Storage._write_config_to_file, compact and atomic."""
    data = {
        "buckets": self.buckets,
        "objects": self.objects,
        "resumable": self.resumable,
        "bucket_iam_policies": self.bucket_iam_policies,
        "soft_deleted": self.soft_deleted,
    }
    content = json.dumps(data, separators=(",", ":")).encode("utf-8")
    store = self._store
    if getattr(store, "_use_memory", False):
        store.write_bytes(".meta", content)
        return
    path = store._disk_path(".meta")  # noqa: SLF001 - the emulator's own path for the file
    path.parent.mkdir(parents=True, exist_ok=True)
    temp = path.with_name(f".meta.{os.getpid()}.tmp")
    temp.write_bytes(content)
    os.replace(temp, path)


def _gcs(argv: list[str]) -> int:
    from gcp_storage_emulator import storage
    from gcp_storage_emulator.__main__ import main as emulator_main

    storage.Storage._write_config_to_file = _write_config_to_file  # noqa: SLF001
    return emulator_main(argv) or 0


def _s3(argv: list[str]) -> int:
    from moto import backends
    from moto.server import main as moto_main

    modules = tuple(backends.list_of_moto_modules())
    backends.list_of_moto_modules = lambda: modules
    moto_main(argv)
    return 0


def main(argv: list[str]) -> int:
    kind, rest = argv[0], argv[1:]
    sys.argv[0] = {"gcs": "gcp-storage-emulator", "s3": "moto_server"}[kind]
    return {"gcs": _gcs, "s3": _s3}[kind](rest)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
