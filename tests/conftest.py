"""Shared test helpers: paths to the repository's machines, fixtures and a YAML writer."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


@pytest.fixture
def write_machine(tmp_path: Path):  # type: ignore[no-untyped-def]
    """Write YAML text to a file and return its path."""

    def write(text: str, name: str = "machine.yaml") -> Path:
        path = tmp_path / name
        path.write_text(text, encoding="utf-8")
        return path

    return write
