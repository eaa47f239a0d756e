import os
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path_factory, monkeypatch):
    """Never read or write the user's real cache from tests."""
    if "DLPERF_CACHE_DIR" not in os.environ:
        monkeypatch.setenv("DLPERF_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "cache"))
