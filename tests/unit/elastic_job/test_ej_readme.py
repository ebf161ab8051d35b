"""The service README's state table is the one the code has."""

from __future__ import annotations

from pathlib import Path

import alnair_elastic_job as ej

README = Path(__file__).resolve().parents[3] / "services" / "elastic_job" / "README.md"


def test_the_readme_shows_the_current_state_table() -> None:
    text = README.read_text()
    embedded = text.split("<!-- state-table -->\n", 1)[1].split("<!-- /state-table -->", 1)[0]
    assert embedded == ej.state_table_markdown(), \
        "regenerate the table in services/elastic_job/README.md from ej.state_table_markdown()"


def test_the_readme_example_is_a_valid_job() -> None:
    example = README.read_text().split("```yaml\n", 1)[1].split("```", 1)[0]
    job = ej.from_yaml(example, source="README.md")
    assert (job.name, job.min_replicas, job.max_replicas, job.request.gpus) == ("resnet", 2, 4, 0.3)
