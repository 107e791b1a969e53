"""Context governance services: estimates, API-round groups, collapses, compaction plans."""

from __future__ import annotations

import copy
import itertools
import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from queryloop.handlers.context.services import clearing as clearing_module
from queryloop.handlers.context.services import compaction as context_module
from queryloop.handlers.context.services.compaction import (
    CLEARED_RESULT,
    COLLAPSE_STUB_PREFIX,
    MICROCOMPACT_KEEP_RECENT,
    MICROCOMPACT_MIN_TOKENS,
    SUMMARY_MARKER,
    SUMMARY_PROMPT,
    Clearing,
    CompactBoundary,
    StagedCollapse,
    api_round_groups,
    clear_results,
    commit_collapses,
    compacted_messages,
    dominant_part,
    dominant_part_from,
    drop_oldest_group,
    not_compactable_hint,
    not_compactable_hint_from,
    plan_clearing,
    plan_compaction,
    regenerate_attachments,
    request_overhead_tokens,
    request_tokens,
    stage_collapses,
    summary_request_messages,
)
from queryloop.handlers.messages import MessageView, message_tokens, messages_tokens
from queryloop.mockapi.server import estimate_input_tokens

Message = dict[str, Any]

# ---------------------------------------------------------------------------- builders


def user(content: str | list[Any]) -> Message:
    return {"role": "user", "content": content}


def assistant(*blocks: Any) -> Message:
    return {"role": "assistant", "content": list(blocks)}


def text(value: str) -> dict[str, Any]:
    return {"type": "text", "text": value}


def tool_use(tool_id: str, name: str = "Bash", **tool_input: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input or {"command": "ls"}}


def result(tool_id: str, content: str | list[Any], *, is_error: bool = False) -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content, "is_error": is_error}


def tool_round(tool_id: str, output: str, *, name: str = "Bash", **tool_input: Any) -> list[Message]:
    return [assistant(text("let me look"), tool_use(tool_id, name, **tool_input)), user([result(tool_id, output)])]


def transcript(*outputs: str) -> list[Message]:
    """A prompt, one tool round per output, and a final answer."""
    messages = [user("fix the bug")]
    for n, output in enumerate(outputs):
        messages += tool_round(f"t{n}", output)
    return [*messages, assistant(text("done"))]


def ledger_problems(messages: Sequence[Mapping[str, Any]]) -> list[str]:
    """Violations of the ledger invariant: each tool_use answered in the next message, in order."""
    problems = []
    for i, message in enumerate(messages):
        blocks = message["content"] if isinstance(message["content"], list) else []
        if message["role"] == "assistant":
            uses = [b["id"] for b in blocks if b.get("type") == "tool_use"]
            if not uses:
                continue
            following = messages[i + 1] if i + 1 < len(messages) else None
            answers = (
                [b["tool_use_id"] for b in following["content"] if b.get("type") == "tool_result"]
                if following is not None and following["role"] == "user" and isinstance(following["content"], list)
                else []
            )
            if answers[: len(uses)] != uses:
                problems.append(f"message {i}: tool_use {uses} answered by {answers}")
        else:
            answered = [b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"]
            previous = messages[i - 1] if i > 0 else None
            asked = (
                [b["id"] for b in previous["content"] if b.get("type") == "tool_use"]
                if previous is not None and previous["role"] == "assistant" and isinstance(previous["content"], list)
                else []
            )
            if any(a not in asked for a in answered):
                problems.append(f"message {i}: tool_result {answered} without tool_use in the previous message")
    return problems


def roles_alternate(messages: Sequence[Mapping[str, Any]]) -> bool:
    return all(a["role"] != b["role"] for a, b in itertools.pairwise(messages))


@st.composite
def transcripts(draw: st.DrawFn, *, meta: bool = True) -> list[Message]:
    """Random valid transcripts: tool rounds with 0–3 calls, thinking, errors, large
    results, meta user messages (when ``meta``) and new prompts."""
    sizes = st.sampled_from([0, 7, 300, 4500, 9000])
    messages: list[Message] = [user(draw(st.sampled_from(["go", "fix the tests", "ünïcode prompt"])))]
    rounds = draw(st.integers(0, 10))
    for r in range(rounds):
        blocks: list[Any] = []
        if draw(st.booleans()):
            blocks.append({"type": "thinking", "thinking": "hm " * draw(st.integers(1, 5)), "signature": "sig"})
        calls = draw(st.integers(0, 3))
        if calls == 0 or draw(st.booleans()):
            blocks.append(text(f"step {r}"))
        ids = [f"toolu_{r}_{k}" for k in range(calls)]
        for tool_id in ids:
            blocks.append(tool_use(tool_id, draw(st.sampled_from(["Read", "Bash", "Glob"])), file_path=f"f{r}.txt"))
        messages.append(assistant(*blocks))
        if calls:
            answers: list[Any] = []
            for tool_id in ids:
                size = draw(sizes)
                body: str | list[Any] = "x" * size if draw(st.booleans()) else [text("y" * size)]
                answers.append(result(tool_id, body, is_error=draw(st.booleans())))
            if draw(st.booleans()):
                answers.append(text("(meta) keep going"))
            messages.append(user(answers))
            if meta and draw(st.integers(0, 4)) == 0:
                messages.append(user("[hidden meta message]"))
        elif r < rounds - 1 or draw(st.booleans()):
            messages.append(user(f"next request {r}"))
    return messages


# --------------------------------------------------------------------------- estimates


def test_message_tokens_is_a_quarter_of_the_compact_json_characters_rounded_up() -> None:
    message = user("héllo wörld ✓")
    compact = json.dumps(message, separators=(",", ":"), ensure_ascii=False)
    assert message_tokens(message) == math.ceil(len(compact) / 4)
    assert message_tokens(message) < math.ceil(len(json.dumps(message)) / 4)


@settings(max_examples=60, deadline=None)
@given(transcripts(), st.sampled_from([None, "", "You are a coding agent. ✓"]), st.integers(0, 3))
def test_request_tokens_match_the_embedded_server_and_the_running_total_stays_within_one_token_per_message(
    messages: list[Message], system: str | None, tool_count: int
) -> None:
    tools = [{"name": f"T{k}", "description": "d" * 40, "input_schema": {"type": "object"}} for k in range(tool_count)]
    server = estimate_input_tokens(system, messages, tools or None)
    assert request_tokens(system, tools, messages) == server
    running = request_overhead_tokens(system, tools) + sum(message_tokens(m) for m in messages)
    assert abs(running - server) <= max(len(messages), 1)
    assert messages_tokens(messages) == sum(message_tokens(m) for m in messages)


# ------------------------------------------------------------------------------ groups


def test_groups_start_at_each_assistant_message_and_keep_the_prompt_with_the_first() -> None:
    messages = [user("a"), user("b"), *tool_round("t1", "out"), user("meta"), assistant(text("done")), user("more")]
    assert api_round_groups(messages) == [range(0, 2), range(2, 5), range(5, 7)]


def test_an_empty_transcript_has_no_groups_and_a_prompt_alone_has_one() -> None:
    assert api_round_groups([]) == []
    assert api_round_groups([user("hi")]) == [range(0, 1)]


def test_a_tool_result_answering_an_earlier_group_merges_the_groups_between_them() -> None:
    messages = [
        user("go"),
        assistant(tool_use("a")),
        user("interjection"),
        assistant(text("hm")),
        user([result("a", "x")]),
    ]
    assert api_round_groups(messages) == [range(0, 1), range(1, 5)]


@settings(max_examples=150, deadline=None)
@given(transcripts())
def test_groups_partition_the_transcript_and_never_split_a_tool_use_from_its_result(messages: list[Message]) -> None:
    groups = api_round_groups(messages)
    assert [i for g in groups for i in g] == list(range(len(messages)))
    assert all(len(g) > 0 for g in groups)
    group_of = {i: k for k, g in enumerate(groups) for i in g}
    use_group = {
        b["id"]: group_of[i]
        for i, m in enumerate(messages)
        if isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use"
    }
    for i, m in enumerate(messages):
        if isinstance(m["content"], list):
            for b in m["content"]:
                if b.get("type") == "tool_result":
                    assert use_group[b["tool_use_id"]] == group_of[i]
    assert all(messages[g.start]["role"] == "assistant" for g in groups[1:])


# ---------------------------------------------------------------------------- collapse


def test_staging_picks_only_large_results_outside_the_recent_groups() -> None:
    big = "x" * 5000
    messages = transcript(big, "small", big, big, big)
    staged = stage_collapses(messages, keep_recent_groups=2)
    # groups: prompt, t0..t4 rounds, final answer; the t4 round and the answer are recent
    assert [(s.message_index, s.block_index, s.chars) for s in staged] == [(2, 0, 5000), (6, 0, 5000), (8, 0, 5000)]
    assert all(s.tokens_freed > 1000 for s in staged)
    assert stage_collapses(messages, keep_recent_groups=10) == ()
    assert stage_collapses(messages, min_chars=6000) == ()


def test_staging_counts_text_blocks_inside_list_content_and_keeps_images_when_committed() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    messages = [
        user("go"),
        assistant(tool_use("t1")),
        user([result("t1", [text("a" * 3000), image, text("b" * 3000)])]),
    ]
    messages += [assistant(text("ok")), user("next"), assistant(text("done"))]
    staged = stage_collapses(messages)
    assert [(s.message_index, s.chars) for s in staged] == [(2, 6000)]
    content = commit_collapses(messages, staged)[2]["content"][0]["content"]
    assert content[0]["text"].startswith(COLLAPSE_STUB_PREFIX)
    assert "6,000 characters" in content[0]["text"]
    assert content[1:] == [image]


def test_committing_replaces_contents_with_stubs_keeping_ids_and_error_flags_without_mutating_inputs() -> None:
    messages = transcript("x" * 5000, "small", "y" * 4500, "z")
    messages[4]["content"][0]["is_error"] = True
    snapshot = copy.deepcopy(messages)
    staged = stage_collapses(messages)
    committed = commit_collapses(messages, staged)
    assert messages == snapshot
    assert [s.message_index for s in staged] == [2, 6]
    for index, tool_id, chars in [(2, "t0", 5000), (6, "t2", 4500)]:
        block = committed[index]["content"][0]
        assert block["tool_use_id"] == tool_id
        assert block["content"] == f"{COLLAPSE_STUB_PREFIX}: {chars:,} characters; run the tool again if you need it]"
        assert committed[index] is not messages[index]
    assert committed[4]["content"][0]["is_error"] is True
    assert all(committed[i] is messages[i] for i in range(len(messages)) if i not in (2, 6))
    freed = messages_tokens(messages) - messages_tokens(committed)
    assert abs(freed - sum(s.tokens_freed for s in staged)) <= len(staged)
    assert ledger_problems(committed) == []


@settings(max_examples=80, deadline=None)
@given(transcripts(), st.integers(0, 3), st.sampled_from([1, 100, 4000]))
def test_staged_tokens_freed_is_a_lower_bound_of_what_committing_saves(
    messages: list[Message], keep_recent_groups: int, min_chars: int
) -> None:
    staged = stage_collapses(messages, keep_recent_groups=keep_recent_groups, min_chars=min_chars)
    committed = commit_collapses(messages, staged)
    affected = len({s.message_index for s in staged})
    assert messages_tokens(messages) - messages_tokens(committed) >= sum(s.tokens_freed for s in staged) - affected
    assert ledger_problems(committed) == ledger_problems(messages) == []
    assert stage_collapses(committed, keep_recent_groups=keep_recent_groups, min_chars=min_chars) == ()


def test_stubs_are_not_staged_again() -> None:
    messages = transcript("x" * 5000, "y" * 5000, "z", "w")
    committed = commit_collapses(messages, stage_collapses(messages, min_chars=1))
    assert stage_collapses(committed, min_chars=1) == ()


def test_committing_a_collapse_staged_against_another_transcript_fails_with_a_hint() -> None:
    stale = StagedCollapse(message_index=1, block_index=0, chars=10, tokens_freed=1)
    with pytest.raises(ValueError, match="stage the collapses again"):
        commit_collapses(transcript("x"), [stale])


# -------------------------------------------------------------------------- compaction


def test_plan_keeps_the_most_recent_whole_groups_that_fit_the_budget() -> None:
    messages = transcript("a" * 4000, "b" * 4000, "c" * 40, "d" * 40)
    groups = api_round_groups(messages)
    budget = sum(message_tokens(m) for m in messages[groups[3].start :])
    plan = plan_compaction(messages, keep_recent_tokens=budget)
    assert plan is not None
    assert plan.older == tuple(messages[: groups[3].start])
    assert plan.recent == tuple(messages[groups[3].start :])
    assert plan.older_groups == 3
    assert plan.recent[0]["role"] == "assistant"


def test_plan_keeps_at_least_the_minimum_groups_however_large_and_always_summarises_one() -> None:
    messages = transcript("a" * 9000, "b" * 9000)
    plan = plan_compaction(messages, keep_recent_tokens=0, min_recent_groups=2)
    assert plan is not None and plan.older_groups == 2 and len(plan.recent) == 3
    everything = plan_compaction(messages, keep_recent_tokens=10**9, min_recent_groups=10)
    assert everything is not None and everything.older_groups == 1 and everything.older == (messages[0],)
    nothing_kept = plan_compaction(messages, keep_recent_tokens=0, min_recent_groups=0)
    assert nothing_kept is not None and nothing_kept.recent == () and len(nothing_kept.older) == len(messages)


def test_plan_is_none_when_there_are_fewer_than_two_groups() -> None:
    assert plan_compaction([], keep_recent_tokens=100) is None
    assert plan_compaction([user("a"), user("b")], keep_recent_tokens=100) is None
    assert plan_compaction([user("a"), assistant(text("b"))], keep_recent_tokens=0) is not None


def test_summary_request_is_the_history_as_sent_with_the_prompt_as_one_more_block() -> None:
    older = [user("fix it"), *tool_round("t1", "boom", command="make")]
    request = summary_request_messages(older, "keep the make output")
    assert request[:-1] == older[:-1], "the agent's own messages, unchanged: the prefix its requests cached"
    *kept, prompt = request[-1]["content"]
    assert kept == older[-1]["content"] and request[-1]["role"] == "user"
    assert prompt["text"].startswith(SUMMARY_PROMPT) and prompt["text"].endswith("keep the make output")
    after_reply = summary_request_messages([*older, assistant(text("trying"))])
    assert after_reply[-1] == {"role": "user", "content": [{"type": "text", "text": SUMMARY_PROMPT}]}
    as_string = summary_request_messages([user("fix it"), assistant(text("ok")), user("go on")])
    assert as_string[-1]["content"] == [text("go on"), {"type": "text", "text": SUMMARY_PROMPT}]


def test_summary_request_notes_a_dropped_head() -> None:
    older = [assistant({"type": "thinking", "thinking": "secret", "signature": "s"}, text("did it")), user("ok")]
    request = summary_request_messages(older)
    assert [m["role"] for m in request] == ["user", "assistant", "user"]
    assert "dropped" in request[0]["content"]
    assert request[1] == older[0]


def test_summary_prompt_carries_the_marker_and_what_to_keep() -> None:
    assert SUMMARY_PROMPT.startswith(SUMMARY_MARKER)
    for topic in ("goals", "Decisions", "Files", "Commands", "Errors", "next step"):
        assert topic in SUMMARY_PROMPT


def test_dropping_oldest_groups_shrinks_the_head_until_one_group_is_left() -> None:
    older = transcript("a", "b", "c")
    groups = len(api_round_groups(older))
    drops = 0
    dropped_total = 0
    while (step := drop_oldest_group(older)) is not None:
        remaining, dropped = step
        assert remaining == older[dropped:] and dropped > 0
        assert ledger_problems(remaining) == []
        older, drops, dropped_total = remaining, drops + 1, dropped_total + dropped
    assert drops == groups - 1
    assert len(older) + dropped_total == len(transcript("a", "b", "c"))
    assert summary_request_messages(older)[0]["role"] == "user"


def test_attachments_reattach_current_content_of_read_files_inside_cwd_most_recent_first(tmp_path: Path) -> None:
    cwd = tmp_path / "work"
    (cwd / "src").mkdir(parents=True)
    (cwd / "src" / "a.py").write_text("old a\n")
    (cwd / "b.txt").write_text("b\n")
    (tmp_path / "secret.txt").write_text("outside\n")
    removed = [
        user("go"),
        *tool_round("r1", "1 old a", name="Read", file_path="src/a.py"),
        *tool_round("r2", "outside", name="Read", file_path="../secret.txt"),
        *tool_round("r3", "gone", name="Read", file_path="missing.txt"),
        *tool_round("r4", "b", name="Read", file_path=str(cwd / "b.txt")),
        *tool_round("r5", "again", name="Read", file_path="./src/../src/a.py"),
        *tool_round("w1", "wrote", name="Write", file_path="c.txt"),
    ]
    (cwd / "src" / "a.py").write_text("new a\n")
    attachments = regenerate_attachments(removed, cwd)
    assert attachments == [
        "Contents of src/a.py (re-attached after compaction):\nnew a\n",
        "Contents of b.txt (re-attached after compaction):\nb\n",
    ]
    assert regenerate_attachments(removed, cwd, max_files=1) == attachments[:1]


def test_attachments_truncate_long_files_with_a_marker_and_skip_symlinks_out_of_cwd(tmp_path: Path) -> None:
    (tmp_path / "outside.txt").write_text("no")
    cwd = tmp_path / "work"
    cwd.mkdir()
    (cwd / "big.txt").write_text("z" * 100)
    os.symlink(tmp_path / "outside.txt", cwd / "link.txt")
    removed = [
        *tool_round("r1", "", name="Read", file_path="link.txt"),
        *tool_round("r2", "", name="Read", file_path="big.txt"),
    ]
    (attachment,) = regenerate_attachments(removed, cwd, max_chars_per_file=30)
    assert attachment.startswith("Contents of big.txt (re-attached after compaction):\n" + "z" * 30 + "\n[")
    assert "70 more characters not shown" in attachment


def test_compacted_messages_open_with_the_summary_and_alternate_roles() -> None:
    recent = tool_round("t9", "out")
    compacted = compacted_messages("We fixed X.", recent, ["Contents of a (re-attached after compaction):\nA"])
    assert roles_alternate(compacted)
    assert compacted[0]["role"] == "user"
    assert "We fixed X." in compacted[0]["content"][0]["text"]
    assert compacted[0]["content"][1]["text"].startswith("Contents of a")
    assert compacted[1:] == recent


def test_compacted_messages_merge_a_leading_user_message_and_refuse_orphaned_results() -> None:
    compacted = compacted_messages("S", [user("continue please"), assistant(text("ok"))], [])
    assert [m["role"] for m in compacted] == ["user", "assistant"]
    assert compacted[0]["content"][-1] == text("continue please")
    with pytest.raises(ValueError, match="group boundary"):
        compacted_messages("S", [user([result("t1", "x")])], [])
    with pytest.raises(ValueError, match="summary is empty"):
        compacted_messages("  ", [], [])


@settings(max_examples=150, deadline=None)
@given(transcripts(), st.integers(0, 6000), st.integers(0, 3))
def test_the_ledger_stays_closed_after_compaction_of_random_transcripts(
    messages: list[Message], keep_recent_tokens: int, min_recent_groups: int
) -> None:
    snapshot = copy.deepcopy(messages)
    plan = plan_compaction(messages, keep_recent_tokens=keep_recent_tokens, min_recent_groups=min_recent_groups)
    assert messages == snapshot
    if plan is None:
        assert len(api_round_groups(messages)) < 2
        return
    assert list(plan.older + plan.recent) == messages
    compacted = compacted_messages("summary", plan.recent, [])
    assert ledger_problems(compacted) == []
    assert compacted[0]["role"] == "user"
    assert all(a["role"] != "assistant" or b["role"] != "assistant" for a, b in itertools.pairwise(compacted))
    request = summary_request_messages(plan.older)
    assert request[0]["role"] == "user" and request[-1]["role"] == "user"  # sent as stored, as the agent's are
    assert ledger_problems(request) == [] and request[: len(plan.older) - 1] == list(plan.older[:-1])


@settings(max_examples=80, deadline=None)
@given(transcripts(meta=False))
def test_compaction_of_alternating_transcripts_alternates_roles(messages: list[Message]) -> None:
    plan = plan_compaction(messages, keep_recent_tokens=2000)
    if plan is not None:
        assert roles_alternate(compacted_messages("summary", plan.recent, ["attached"]))


# ------------------------------------------------------------------ boundary and hints


def test_compact_boundary_serialises_its_fields_and_rejects_negative_counts() -> None:
    boundary = CompactBoundary(
        trigger="reactive",
        pre_tokens=190_000,
        post_tokens=12_000,
        lossy=True,
        dropped_messages=4,
        summarized_messages=40,
    )
    assert boundary.to_json() == {
        "trigger": "reactive",
        "pre_tokens": 190_000,
        "post_tokens": 12_000,
        "lossy": True,
        "dropped_messages": 4,
        "summarized_messages": 40,
    }
    with pytest.raises(ValueError):
        attrs.evolve(boundary, dropped_messages=-1)


def test_hint_blames_the_history_when_it_is_the_larger_part() -> None:
    messages = transcript("x" * 8000)
    assert dominant_part("short", [], messages) == "history"
    hint = not_compactable_hint("short", [], messages)
    history = messages_tokens(messages)
    total = history + request_overhead_tokens("short", [])
    assert hint == (
        f"the conversation history is {round(100 * history / total)}% of the request "
        f"({history:,} of {total:,} estimated tokens); start a new session or remove large tool outputs"
    )


def test_hint_blames_the_system_prompt_and_tools_when_they_are_the_larger_part() -> None:
    tools = [{"name": "Big", "description": "d" * 6000, "input_schema": {"type": "object"}}]
    assert dominant_part("s" * 2000, tools, [user("hi")]) == "system prompt and tools"
    hint = not_compactable_hint("s" * 2000, tools, [user("hi")])
    assert hint.startswith("the system prompt and tool definitions are 100% of the request (")
    assert "shorten the system prompt or offer fewer tools" in hint


def test_hint_from_running_totals_matches_the_hint_from_the_request() -> None:
    messages = transcript("x" * 8000, "y")
    history, overhead = messages_tokens(messages), request_overhead_tokens("sys", [])
    assert not_compactable_hint_from(history, overhead) == not_compactable_hint("sys", [], messages)
    assert dominant_part_from(183_000, 18_000) == "history"
    assert not_compactable_hint_from(183_000, 18_000).startswith(
        "the conversation history is 91% of the request (183,000 of 201,000 estimated tokens)"
    )
    assert dominant_part_from(0, 0) == "system prompt and tools"
    assert not_compactable_hint_from(0, 0).startswith("the system prompt and tool definitions are 100%")


def test_module_exports_a_sorted_all_of_existing_names() -> None:
    assert context_module.__all__ == sorted(context_module.__all__)
    assert all(hasattr(context_module, name) for name in context_module.__all__)


# --------------------------------------------------------------------------- microcompaction


def test_clearing_takes_the_old_results_of_the_clearable_tools_and_keeps_the_newest_four() -> None:
    messages = [user("go")]
    for n in range(7):
        messages += tool_round(f"r{n}", "x" * 8000, name="Read", file_path=f"f{n}.py")
        messages += tool_round(f"m{n}", "y" * 8000, name="mcp__notes__get")  # not clearable: kept whatever its age
    view = MessageView.of(messages)
    clearing = plan_clearing(view)
    assert MICROCOMPACT_KEEP_RECENT == 4
    assert clearing.tool_use_ids == {"r0", "r1", "r2"}
    assert clearing.tokens_freed == 3 * 2000
    first = 2  # the message holding r0's result: everything from it on is written to the cache again
    assert clearing.tokens_rewritten == view.tokens - messages_tokens(messages[:first]) - 3 * 2000


def test_a_branch_of_a_history_sees_only_its_own_calls() -> None:
    messages = [user("go")]
    for n in range(8):
        messages += tool_round(f"b{n}", "z" * 4000)
    longer = MessageView.of(messages)
    shorter = MessageView.of(messages[:9])  # the prompt and four rounds
    assert [c[1] for c in longer.tool_calls()] == [f"b{n}" for n in range(8)]
    assert plan_clearing(shorter).tool_use_ids == frozenset()
    branch = shorter.append(assistant(tool_use("other", "Bash")))  # a branch off the same history
    assert [c[1] for c in branch.tool_calls()] == [*(f"b{n}" for n in range(4)), "other"]
    assert plan_clearing(longer).tool_use_ids == {"b0", "b1", "b2", "b3"}
    bash, read = frozenset({"Bash"}), frozenset({"Read"})
    assert [longer.count_calls(bash), shorter.count_calls(bash), branch.count_calls(bash)] == [8, 4, 5]
    assert longer.count_calls(read) == 0 and MessageView().count_calls(bash) == 0


def test_each_result_is_measured_once_however_many_turns_plan_a_clearing(monkeypatch: pytest.MonkeyPatch) -> None:
    measured: list[str] = []
    real = clearing_module._freed_by
    monkeypatch.setattr(clearing_module, "_freed_by", lambda m, call_id: measured.append(call_id) or real(m, call_id))
    view = MessageView.of([user("go")])
    for n in range(40):  # one turn each: the history grows and the clearing is planned again, as each turn does
        for message in tool_round(f"t{n}", "w" * 400, name="Read", file_path=f"f{n}.py"):
            view = view.append(message)
        assert plan_clearing(view).tool_use_ids == {f"t{k}" for k in range(n - 3)}
    assert sorted(measured) == sorted(f"t{n}" for n in range(36))  # each aged-out result once, not once a turn


class _CountingFacts(dict[str, Any]):
    """A store's cache of what clearing each result frees, counting how often it is read."""

    reads = 0

    def get(self, key: str, default: Any = None) -> Any:
        type(self).reads += 1
        return super().get(key, default)


def test_each_turns_clearing_plan_looks_only_at_the_calls_that_aged_out_since(monkeypatch: pytest.MonkeyPatch) -> None:
    """Planning the clearing on every turn went over every old result again: a turn's work grew with the transcript."""
    view = MessageView.of([user("go")])
    view.memos[clearing_module._CLEARABLE] = _CountingFacts()
    looked: list[int] = []
    for n in range(40):
        for message in tool_round(f"t{n}", "w" * 400 if n % 3 else "", name="Read", file_path=f"f{n}.py"):
            view = view.append(message)
        before = _CountingFacts.reads
        plan = plan_clearing(view)
        looked.append(_CountingFacts.reads - before)
        assert plan == plan_clearing(MessageView.of(view.to_list()))  # the same as planned afresh on a new store
    assert max(looked) <= 1, looked  # one call ages out a turn


def test_a_clearing_pays_once_it_frees_the_minimum_and_what_it_makes_the_next_request_write_again() -> None:
    assert MICROCOMPACT_MIN_TOKENS == 10_000
    assert Clearing(tool_use_ids=frozenset(), tokens_freed=12_000, tokens_rewritten=11_000).pays
    assert not Clearing(tool_use_ids=frozenset(), tokens_freed=12_000, tokens_rewritten=13_000).pays
    assert not Clearing(tool_use_ids=frozenset(), tokens_freed=9_999, tokens_rewritten=0).pays
    # two large old results and four small new ones: it pays; six equal ones: the four kept outweigh two cleared
    large_then_small = [user("go")]
    for n, size in enumerate([25_000, 25_000, 1000, 1000, 1000, 1000]):
        large_then_small += tool_round(f"t{n}", "x" * size)
    assert plan_clearing(MessageView.of(large_then_small)).pays
    equal = [user("go")]
    for n in range(6):
        equal += tool_round(f"t{n}", "x" * 25_000)
    assert not plan_clearing(MessageView.of(equal)).pays


def test_clearing_replaces_contents_keeping_ids_and_error_flags_without_mutating_inputs() -> None:
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}
    messages = [
        user("go"),
        assistant(tool_use("a", "Read", file_path="x.png")),
        user([result("a", [text("a picture"), image])]),
        assistant(tool_use("b", "Bash")),
        user([result("b", "boom", is_error=True), text("(meta) keep going")]),
    ]
    before = copy.deepcopy(messages)
    cleared = clear_results(messages, Clearing(tool_use_ids=frozenset({"a", "b"}), tokens_freed=2001))
    assert messages == before
    assert cleared[2]["content"] == [{**result("a", CLEARED_RESULT)}]
    assert cleared[4]["content"] == [result("b", CLEARED_RESULT, is_error=True), text("(meta) keep going")]
    assert cleared[1] is messages[1], "unchanged messages are the same objects"
    # the image counts 2,000, the text a quarter of its characters
    assert plan_clearing(MessageView.of(messages), keep_recent=1).tokens_freed == 2000 + 3


@given(transcripts())
@settings(max_examples=60, deadline=None)
def test_a_clearing_keeps_the_ledger_and_leaves_nothing_more_to_clear(messages: list[Message]) -> None:
    clearing = plan_clearing(MessageView.of(messages), keep_recent=2)
    cleared = clear_results(messages, clearing)
    assert ledger_problems(cleared) == ledger_problems(messages)
    assert [m["role"] for m in cleared] == [m["role"] for m in messages]
    assert messages_tokens(cleared) <= messages_tokens(messages)
    again = plan_clearing(MessageView.of(cleared), keep_recent=2)
    assert again.tool_use_ids == frozenset() and again.tokens_freed == 0


def test_a_read_file_that_became_a_symlink_loop_or_a_fifo_is_not_reattached_and_compaction_goes_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "loop").symlink_to("loop")
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "b.txt").write_text("b\n")
    removed = [
        user("go"),
        *tool_round("r1", "b", name="Read", file_path="b.txt"),
        *tool_round("r2", "x", name="Read", file_path="loop"),
        *tool_round("r3", "y", name="Read", file_path="pipe"),
    ]
    assert regenerate_attachments(removed, tmp_path) == ["Contents of b.txt (re-attached after compaction):\nb\n"]
