"""`alnair dataset ls` in an 80-column terminal: every figure whole, a failure's message in full."""

from __future__ import annotations

from rich.console import Console

from alnair.v1 import cache_pb2
from alnair_cli._dataset import WIDE_COLUMNS, datasets_table

STATUSES = [
    cache_pb2.CacheDatasetStatus(
        dataset="imagenet-train", phase=cache_pb2.CACHE_PHASE_HYDRATING, progress=0.42,
        cached_bytes=512 << 20, total_bytes=120 << 30, files_cached=500000, files_total=1281167,
        dedup_saved_bytes=3 << 30, source="s3://ml-datasets/imagenet/train", message="hydrating"),
    cache_pb2.CacheDatasetStatus(
        dataset="coco", phase=cache_pb2.CACHE_PHASE_FAILED, progress=0.1, cached_bytes=1 << 30,
        total_bytes=20 << 30, files_cached=5, files_total=118000, source="file:///data/coco",
        reason="Insufficient",
        message="needs 120 GiB, 40 GiB free in tier memory; pin fewer or raise the budget"),
]


def render(width: int) -> str:
    console = Console(width=width, record=True, color_system=None)
    console.print(datasets_table(STATUSES, console.width))
    return console.export_text()


def test_a_narrow_terminal_cuts_no_figure_and_shows_the_whole_message() -> None:
    text = render(80)
    assert "…" not in text, text
    for figure in ("imagenet-train", "hydrating", "42%", "512 MiB/120 GiB", "500000/1281167",
                   "1/20 GiB", "5/118000", "s3://ml-datasets/imagenet/train"):
        assert figure in text, (figure, text)
    assert "pin fewer or raise the budget" in " ".join(text.split()), text
    assert max(map(len, text.splitlines())) <= 80


def test_a_wide_terminal_keeps_one_row_per_data_set() -> None:
    text = render(WIDE_COLUMNS + 40)
    [row] = [line for line in text.splitlines() if line.lstrip().startswith("imagenet-train")]
    assert "s3://ml-datasets/imagenet/train" in row and "42%" in row and "█" in row


def test_sizes_of_a_thousand_units_or_more_are_whole_numbers() -> None:
    from alnair_cli._dataset import _of

    assert _of(1023, 1536 << 30) == "1023 B/1536 GiB"
