"""An fsspec filesystem over a data set: ``fsspec.filesystem("alnair", dataset="imagenet")``.

Paths are relative to the data set's root (``train/part-000.bin``; a leading ``/`` or
``alnair://`` is ignored). Read-only: the hydrator and the readers' write-back are the only
writers of the tier. Range reads go chunk by chunk through :class:`DatasetReader`.
"""

from __future__ import annotations

from typing import Any

from fsspec import AbstractFileSystem, register_implementation
from fsspec.spec import AbstractBufferedFile

from ._reader import DatasetReader


class DatasetFileSystem(AbstractFileSystem):
    protocol = "alnair"
    root_marker = ""
    cachable = False  # one per data set and arguments, and it holds threads

    def __init__(self, dataset: str | None = None, *, reader: DatasetReader | None = None,
                 **reader_options: Any) -> None:
        super().__init__()
        self.reader = reader or DatasetReader(dataset, **reader_options)

    def close(self) -> None:
        """Closes the reader: its threads end and its lease is given back."""
        self.reader.close()

    @classmethod
    def _strip_protocol(cls, path: str) -> str:
        path = path[len("alnair://"):] if path.startswith("alnair://") else path
        return path.strip("/")

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Any]:
        path = self._strip_protocol(path)
        prefix = f"{path}/" if path else ""
        entries: dict[str, dict[str, Any]] = {}
        for name in self.reader.files():
            if not name.startswith(prefix):
                if name == path:
                    return [self.info(name)] if detail else [name]
                continue
            head, sep, _ = name[len(prefix):].partition("/")
            full = prefix + head
            if sep:
                entries.setdefault(full, {"name": full, "size": 0, "type": "directory"})
            else:
                entries[full] = {"name": full, "size": self.reader.size(full), "type": "file"}
        if not entries and path:
            raise FileNotFoundError(path)
        out = sorted(entries.values(), key=lambda e: e["name"])
        return out if detail else [e["name"] for e in out]

    def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
        path = self._strip_protocol(path)
        try:
            return {"name": path, "size": self.reader.size(path), "type": "file"}
        except FileNotFoundError:
            if path == "" or any(f.startswith(path + "/") for f in self.reader.files()):
                return {"name": path, "size": 0, "type": "directory"}
            raise

    def cat_file(self, path: str, start: int | None = None, end: int | None = None,
                 **kwargs: Any) -> bytes:
        path = self._strip_protocol(path)
        size = self.reader.size(path)
        start = 0 if start is None else (size + start if start < 0 else start)
        end = size if end is None else (size + end if end < 0 else end)
        return self.reader.read(path, start, end)

    def _open(self, path: str, mode: str = "rb", block_size: int | None = None,
              autocommit: bool = True, cache_options: Any = None, **kwargs: Any) -> DatasetFile:
        if mode != "rb":
            raise PermissionError(f"data sets are read-only (mode {mode!r})")
        return DatasetFile(self, self._strip_protocol(path), mode, block_size or 4 << 20,
                           cache_options=cache_options, size=self.reader.size(
                               self._strip_protocol(path)))


class DatasetFile(AbstractBufferedFile):
    def _fetch_range(self, start: int, end: int) -> bytes:
        return self.fs.reader.read(self.path, start, end)


register_implementation("alnair", DatasetFileSystem, clobber=True)
