"""README's format table lists every registered reader (issue #21: every trainer with one example line)."""

from __future__ import annotations

from ingest.formats import FORMATS
from tests.conftest import REPO_ROOT


def test_every_reader_is_in_the_readme_format_table() -> None:
    readme = (REPO_ROOT / "README.md").read_text()
    table = readme.split("## Log formats", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| `")]
    names = [row.split("`")[1] for row in rows]
    assert names == list(FORMATS), "README.md's format table and ingest.formats.FORMATS differ"
    for row, reader in zip(rows, FORMATS.values(), strict=True):
        assert reader.description.replace("|", "\\|") in row
