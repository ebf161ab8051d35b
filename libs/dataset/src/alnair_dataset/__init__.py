"""alnair_dataset: read an Alnair-cached data set from training code (work in progress)."""

__all__: list[str] = []
