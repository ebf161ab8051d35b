"""Alnair's open dataset: per-second series and per-run summaries of AI workloads on one GPU."""

__all__: list[str] = []
