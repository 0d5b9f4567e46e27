"""Test helper: a small disk of its own (a tmpfs mounted in a temporary directory) that a test fills up and
frees again, so hubd meets a real ENOSPC from the kernel. (No read-only remount: Linux refuses it while a
file is open for writing, as the database is.)

Mounting needs root: `SmallDisk.skip_unless_root()` skips the test with the reason otherwise. A test
module turns it into a fixture that unmounts at teardown (`with SmallDisk(path, size) as disk`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import subprocess
from pathlib import Path
from types import TracebackType

import pytest

FILL_CHUNK = 64 * 1024


class SmallDisk:
    """A tmpfs of `size_bytes` mounted at `path`; `fill()` takes every free byte, `free()` gives them back."""

    def __init__(self, path: Path, size_bytes: int) -> None:
        self.path = path
        self.size_bytes = size_bytes
        self._filler = path / "filler"
        self._mounted = False

    @staticmethod
    def skip_unless_root() -> None:
        """Skip the calling test (with the reason) where a tmpfs cannot be mounted."""
        if os.geteuid() != 0:
            pytest.skip("mounting a small tmpfs to fill it up needs root")
        if shutil.which("mount") is None:
            pytest.skip("no mount(8) here to mount a small tmpfs")

    def __enter__(self) -> SmallDisk:
        self.path.mkdir(parents=True, exist_ok=True)
        _run("mount", "-t", "tmpfs", "-o", f"size={self.size_bytes},mode=0700", "tmpfs", str(self.path))
        self._mounted = True
        return self

    def __exit__(self, kind: type[BaseException] | None, value: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self._mounted:
            # A process that still holds files open there (a killed hubd is reaped first) would make it busy:
            # lazy, so teardown never fails on that; the memory goes once the last file closes.
            _run("umount", "-l", str(self.path))
            self._mounted = False

    def fill(self) -> int:
        """Write a filler file until the disk is full; how many bytes it took."""
        written = 0
        chunk = b"\xa5" * FILL_CHUNK
        with open(self._filler, "ab", buffering=0) as out:
            while True:
                try:
                    written += out.write(chunk) or 0
                except OSError as err:
                    if err.errno != errno.ENOSPC:
                        raise
                    break
        # The last partial page may still fit small writes: take it with ever smaller ones.
        size = FILL_CHUNK // 2
        with open(self._filler, "ab", buffering=0) as out:
            while size >= 1:
                try:
                    written += out.write(b"\xa5" * size) or 0
                except OSError:
                    size //= 2
        return written

    def free(self) -> None:
        """Delete the filler file: the space is there again."""
        with contextlib.suppress(FileNotFoundError):
            self._filler.unlink()

    def free_bytes(self) -> int:
        """What the filesystem says is still free."""
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True)
