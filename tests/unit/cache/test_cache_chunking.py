"""Chunking, manifests, source selection and source URIs: no servers."""

from __future__ import annotations

import os
import random

import pytest

from alnair_dataset import (
    FileEntry,
    InvalidSpecError,
    SourceChangedError,
    SourceUnreachableError,
    chunk_id,
    content_defined_chunks,
    fixed_chunks,
    open_source,
    selected,
)


def test_fixed_chunks_cover_the_data_in_order():
    data = bytes(range(256)) * 10
    pieces = list(fixed_chunks(data, 1000))
    assert [len(p) for p in pieces] == [1000, 1000, 560] and b"".join(pieces) == data
    assert list(fixed_chunks(b"", 1000)) == []


def test_content_defined_chunks_survive_an_insertion():
    rng = random.Random(7)
    data = rng.randbytes(1 << 20)
    edited = data[:1000] + b"inserted" + data[1000:]
    before = {chunk_id(c) for c in content_defined_chunks(data, average=16 << 10)}
    after = {chunk_id(c) for c in content_defined_chunks(edited, average=16 << 10)}
    assert b"".join(content_defined_chunks(edited, average=16 << 10)) == edited
    assert len(before & after) >= len(before) - 2  # only the chunk(s) around the edit differ
    fixed_before = {chunk_id(c) for c in fixed_chunks(data, 16 << 10)}
    fixed_after = {chunk_id(c) for c in fixed_chunks(edited, 16 << 10)}
    assert len(fixed_before & fixed_after) == 0  # every later boundary shifted


def test_a_manifest_entry_round_trips_and_maps_ranges_to_chunks():
    entry = FileEntry("a/b.bin", 2500, "etag", ("c0", "c1", "c2"), chunk_bytes=1000)
    assert FileEntry.from_json("a/b.bin", entry.to_json()) == entry
    assert list(entry.chunk_span(0, 2500)) == [0, 1, 2]
    assert list(entry.chunk_span(999, 1001)) == [0, 1]
    assert list(entry.chunk_span(1000, 1000)) == []


@pytest.mark.parametrize(("path", "include", "exclude", "want"), [
    ("train/a.jpg", (), (), True),
    ("train/a.jpg", ("train/*",), (), True),
    ("val/a.jpg", ("train/*",), (), False),
    ("train/a.tmp", ("train/*",), ("*.tmp",), False),
])
def test_selection_is_include_then_exclude(path, include, exclude, want):
    assert selected(path, include, exclude) is want


def test_source_uris_are_checked(tmp_path):
    with pytest.raises(InvalidSpecError, match="s3:// or file://"):
        open_source("http://example.com/data")
    with pytest.raises(InvalidSpecError, match="names no bucket"):
        open_source("s3:///prefix")
    with pytest.raises(InvalidSpecError, match="not a host"):
        open_source("file://server/data")
    missing = open_source(f"file://{tmp_path}/none")
    with pytest.raises(SourceUnreachableError, match="not a directory"):
        missing.list()


def test_the_data_client_needs_nothing_of_the_platform():
    import subprocess
    import sys

    code = ("import sys, alnair_dataset; bad = [m for m in sys.modules if m.split('.')[0] in "
            "('alnair_common', 'nats', 'pydantic', 'boto3', 'torch')]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_file_swapped_for_a_link_out_of_the_source_is_not_read(tmp_path):
    """A tenant who writes the source directory replaces a listed file by a link to someone
    else's file of the same size and mtime, between the hydrator's listing and its read."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.bin").write_bytes(b"mine" * 10)
    (tmp_path / "secret.bin").write_bytes(b"theirs" * 10)
    source = open_source(f"file://{tmp_path}/src")
    [listed] = source.list()
    st = os.stat(tmp_path / "src" / "a.bin")
    os.truncate(tmp_path / "secret.bin", st.st_size)
    os.utime(tmp_path / "secret.bin", ns=(st.st_atime_ns, st.st_mtime_ns))
    (tmp_path / "src" / "a.bin").unlink()
    (tmp_path / "src" / "a.bin").symlink_to(tmp_path / "secret.bin")
    with pytest.raises(SourceChangedError, match="now leads outside the source"):
        source.read(listed)
    # a link that stays inside the source is the source's data
    (tmp_path / "src" / "b.bin").write_bytes(b"inside" * 10)
    (tmp_path / "src" / "a.bin").unlink()
    (tmp_path / "src" / "a.bin").symlink_to(tmp_path / "src" / "b.bin")
    [a, b] = open_source(f"file://{tmp_path}/src").list()
    assert source.read(a) == b"inside" * 10
