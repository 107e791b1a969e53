"""The bounded reader of files someone else wrote (``queryloop.fsm.read_text_file``): its edges."""

from __future__ import annotations

from pathlib import Path

import pytest

from queryloop.fsm import UnreadableFileError, read_text_file
from queryloop.fsm.model.textfile import read_file_bytes


def test_a_file_of_exactly_the_cap_is_read_and_one_byte_more_is_refused_naming_the_cap(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_text("x" * 100)
    assert read_text_file(path, limit=100) == "x" * 100
    with pytest.raises(UnreadableFileError, match=r"/f: is larger than 99 bytes, the cap on a file read here$"):
        read_text_file(path, limit=99)
    assert read_file_bytes(path, limit=None) == b"x" * 100


def test_a_missing_file_is_file_not_found_and_a_directory_or_bad_utf8_is_one_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_text_file(tmp_path / "missing")
    with pytest.raises(FileNotFoundError):
        read_text_file(tmp_path / "missing" / "below")
    with pytest.raises(UnreadableFileError, match=r": is a directory, not a regular file$"):
        read_text_file(tmp_path)
    (tmp_path / "latin1").write_bytes(b"caf\xe9!")
    with pytest.raises(UnreadableFileError, match=r"is not UTF-8 text \(invalid continuation byte at byte 3\)"):
        read_text_file(tmp_path / "latin1")
