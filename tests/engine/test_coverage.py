"""Transition coverage from recorded runs: what counts, what is missing, and the gate ``check --coverage``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from queryloop.frontends.cli import main
from queryloop.fsm import load_machine
from queryloop.fsm.verify.coverage import coverage_of, read_runs
from queryloop.machines import MACHINES_DIR

RETRY_FETCH = MACHINES_DIR / "examples" / "retry_fetch.yaml"
SPEC = load_machine(RETRY_FETCH, bind=False).spec

# (from, event, reason, to) of retry_fetch
FETCH = ("fetching", "fetched", "item_fetched", "storing")
STORE_LAST = ("storing", "stored", "all_items_stored", "done")
BACKOFF = ("fetching", "failed_transiently", "fetch_backoff", "backing_off")
RETRY = ("backing_off", "elapsed", "fetch_retry", "fetching")
ABORT_STORING = ("storing", "cancelled", "fetch_aborted", "aborted")


def _recorded(folder: Path, name: str, *steps: tuple[str, str, str, str], machine: str = "retry_fetch") -> None:
    """A trace file as an agent run writes it: one transition line per step, each naming its machine."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        {"type": "system", "subtype": "transition", "machine": machine, "from": s, "event": e, "reason": r, "to": t}
        for s, e, r, t in steps
    ]
    (folder / f"{name}.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))


def test_a_transition_with_several_sources_counts_once_per_source(tmp_path: Path) -> None:
    _recorded(tmp_path, "a", FETCH, ABORT_STORING)
    cov = coverage_of(SPEC, read_runs(tmp_path))
    assert cov.total == 10, "7 single-source entries and fetch_aborted from 3 states"
    assert cov.covered == 2 and cov.runs == 1
    assert ("storing", "fetch_aborted") in cov.taken and ("fetching", "fetch_aborted") not in cov.taken
    assert round(cov.percent, 1) == 20.0


def test_the_missing_transitions_are_listed_with_their_yaml_line(tmp_path: Path) -> None:
    _recorded(tmp_path, "a", FETCH, STORE_LAST)
    _recorded(tmp_path, "b", BACKOFF, RETRY, FETCH, STORE_LAST)
    cov = coverage_of(SPEC, read_runs(tmp_path))
    assert cov.taken[("fetching", "item_fetched")] == 2
    missing = {(t.source, t.reason): t.line for t in cov.missing}
    assert ("fetching", "retries_exhausted") in missing and ("storing", "all_items_stored") not in missing
    text = RETRY_FETCH.read_text().splitlines()
    assert "retries_exhausted" in text[missing[("fetching", "retries_exhausted")] - 1]


def test_stream_json_logs_count_like_recorded_traces(tmp_path: Path) -> None:
    log = [
        {"type": "system", "subtype": "init", "machine": "retry_fetch"},
        {"type": "assistant", "message": {}},
        *(
            {"type": "system", "subtype": "transition", "from": s, "event": e, "reason": r, "to": t}
            for s, e, r, t in [FETCH]
        ),
        {"type": "result", "terminal_reason": "done"},
    ]
    (tmp_path / "run.jsonl").write_text("".join(json.dumps(x) + "\n" for x in log) + '{"type": "sys')
    (run,) = read_runs(tmp_path)
    assert run.steps == {"retry_fetch": (FETCH,)} and run.unreadable_lines == 1, "a last line cut mid-write is skipped"
    assert coverage_of(SPEC, [run]).covered == 1


def test_steps_the_machine_does_not_declare_are_kept_apart_and_never_counted(tmp_path: Path) -> None:
    _recorded(tmp_path, "old", FETCH, ("fetching", "fetched", "renamed_reason", "storing"))
    _recorded(tmp_path, "other", ("a", "b", "item_fetched", "c"), machine="another_machine")
    cov = coverage_of(SPEC, read_runs(tmp_path))
    assert cov.covered == 1 and cov.runs == 1
    assert cov.foreign == {("fetching", "renamed_reason"): 1}


def test_check_coverage_fails_under_the_threshold_and_names_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _recorded(tmp_path, "a", FETCH, STORE_LAST)
    rc = main(["check", "--coverage", str(tmp_path), "--machine", str(RETRY_FETCH), "--fail-under", "100"])
    out = capsys.readouterr().out
    assert rc == 1
    assert "2 of 10 transitions taken (20.0 %) by 1 recorded run(s)" in out
    assert "missing: fetching --failed_transiently--> failed by 'retries_exhausted'" in out
    assert "FAIL: coverage 20.0 % is under --fail-under 100 %" in out
    assert main(["check", "--coverage", str(tmp_path), "--machine", str(RETRY_FETCH), "--fail-under", "20"]) == 0


def test_check_coverage_finds_the_machines_the_traces_name_and_prints_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _recorded(tmp_path, "a", FETCH, STORE_LAST)
    assert main(["check", "--coverage", str(tmp_path), "--format", "json"]) == 0
    (report,) = json.loads(capsys.readouterr().out)
    assert report["machine"] == "retry_fetch" and report["covered"] == 2 and report["transitions"] == 10
    assert {"from": "fetching", "reason": "item_fetched", "count": 1} in report["taken"]


def test_check_coverage_of_a_missing_directory_is_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check", "--coverage", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no such trace directory" in err


def test_fail_under_without_coverage_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--fail-under", "100"]) == 2
    assert "--fail-under applies to --coverage DIR" in capsys.readouterr().err
