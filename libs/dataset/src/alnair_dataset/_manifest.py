"""A data set's manifest: per file, its size, source version and ordered chunk ids.

A file is in the manifest only once every one of its chunks is in the tier, so a reader
that finds an entry can read the whole file from the tier, and a half-hydrated file is
never presented as cached.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ._chunking import CHUNK_BYTES


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    version: str  # S3 ETag or "<mtime_ns>-<size>" of a local file
    chunks: tuple[str, ...]
    chunk_bytes: int = CHUNK_BYTES

    def to_json(self) -> str:
        return json.dumps({"size": self.size, "version": self.version, "chunks": self.chunks,
                           "chunk_bytes": self.chunk_bytes}, separators=(",", ":"))

    @classmethod
    def from_json(cls, path: str, text: str | bytes) -> FileEntry:
        raw = json.loads(text)
        return cls(path, int(raw["size"]), str(raw["version"]), tuple(raw["chunks"]),
                   int(raw.get("chunk_bytes", CHUNK_BYTES)))

    def chunk_span(self, start: int, end: int) -> range:
        """Indexes of the chunks that hold bytes ``start``..``end`` (end exclusive)."""
        if end <= start:
            return range(0)
        return range(start // self.chunk_bytes, (end - 1) // self.chunk_bytes + 1)

    def span_bytes(self, span: range) -> int:
        """How many bytes the chunks ``span`` (consecutive indexes) hold (the last chunk of a
        file may be short)."""
        return min(span.stop * self.chunk_bytes, self.size) - span.start * self.chunk_bytes
