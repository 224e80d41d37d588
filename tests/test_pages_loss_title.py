"""The overview's loss axis is titled by what the run's loss is (AppTest; ``stab_core.loss_origin``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from ingest.formats import read_log
from ingest.importing.importer import store_parsed
from ingest.services.run_analyses import open_analysed_store
from tests.conftest import open_page
from tests.test_loss_origin import yolo_csv


def _loss_title(at: AppTest) -> str:
    spec = json.loads(at.get("plotly_chart")[0].proto.spec)
    return str(spec["layout"]["yaxis"]["title"]["text"])


def test_the_overview_titles_the_loss_axis_by_its_origin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_analysed_store(tmp_path / "store")
    store_parsed(store, "yolo", read_log([yolo_csv(tmp_path / "results.csv")]))
    monkeypatch.setenv("STABSCOPE_STORE", str(store.root))
    at = open_page("overview").run()
    assert not at.exception
    assert _loss_title(at) == "loss (sum of box+cls+dfl)"
