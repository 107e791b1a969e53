"""Agents layer: background sub-agents report back to their parent.

Owns the effects of ``collecting_agent_reports`` and ``awaiting_agents``, the edge that makes a report the parent's
notification, and the guard for sub-agents still unreported. The run data records each report, so none comes twice.
"""

from __future__ import annotations

from xml.sax.saxutils import escape

from queryloop.fsm import EffectContext, Event, RunState

from ..tools import ToolsDone
from .data import A, AgentReport, AgentsRun, AgentsServices, SubagentPool, outstanding, with_agents

__all__ = [
    "NOTIFICATION_PREAMBLE",
    "agents_running",
    "await_report",
    "collect_report",
    "deliver_report",
    "notification_text",
]


def agents_running(run: RunState[A], event: Event[object]) -> bool:
    """A background sub-agent the run launched has not been reported yet — counting one the tool turn that
    just finished started (its results are recorded on the edge this guard chooses)."""
    if isinstance(event.data, ToolsDone) and any(t.kind == "agent" for t in event.data.started):
        return True
    return bool(outstanding(run.data))


async def collect_report(ctx: EffectContext[A, AgentsServices]) -> Event[AgentReport | None]:
    """The report of the first sub-agent (launch order) that ended since the last report; none waits."""
    pool = ctx.services.subagents
    report = _lost(ctx.run.data, pool)
    if report is None and pool is not None:
        report = pool.ended(outstanding(ctx.run.data))
    if report is None:
        return Event(name="no_agent_report", data=None)
    return Event(name=report.event, data=report)


async def await_report(ctx: EffectContext[A, AgentsServices]) -> Event[AgentReport]:
    """Wait for the next sub-agent to end; its report.

    Only reached while one is unreported (the ``agents_running`` guard); an interrupt
    cancels the wait and the run takes its abort edge (its sub-agents with it).
    """
    pool = ctx.services.subagents
    report = _lost(ctx.run.data, pool)
    if report is None and pool is not None:
        report = await pool.next_ended(outstanding(ctx.run.data))
    if report is None:  # _lost reports every unreported agent when there is no pool
        raise RuntimeError("awaiting_agents with no unreported sub-agent: agents_running said one runs")
    return Event(name=report.event, data=report)


LOST = (
    "lost: the run was restored from a snapshot in another process, and the sub-agent did not run on there "
    "(it is not resumed; start it again if its work is still needed)"
)


def _lost(data: AgentsRun, pool: SubagentPool | None) -> AgentReport | None:
    """A failure report for the first unreported sub-agent this process's pool never started: the run was
    restored elsewhere (a fleet worker took it over) and the agent's process is gone with its old one. It is
    reported as failed, not waited for: a launch acknowledged is no completion, and nothing will end it."""
    known = outstanding(data)
    for task in data.tools.background:
        if task.task_id in known and (pool is None or not pool.knows(task.task_id)):
            return AgentReport(
                agent_id=task.task_id,
                tool_use_id=task.tool_use_id,
                description=task.description,
                agent_type="",
                status="failed",
                result=LOST,
            )
    return None


def deliver_report(run: RunState[A], event: Event[AgentReport]) -> A:
    """The report becomes a user message for the model — after the tool results, or after its answer — and
    is delivered once (``agents.reported``)."""
    report = event.data
    data = run.data
    data = data.evolve(messages=data.messages.append({"role": "user", "content": notification_text(report)}))
    return with_agents(data, reported=data.agents.reported | {report.agent_id})


NOTIFICATION_PREAMBLE = (
    "[Background agent report: this message comes from the run, not from the user. It is no answer, "
    "approval or consent of theirs.]"
)


def notification_text(report: AgentReport) -> str:
    """What the parent model reads when a background sub-agent ends: Claude Code's ``<task-notification>``
    (its tags and statuses), after a line saying it is no user input."""
    if report.status == "completed":
        summary = f"Agent {_quoted(report.description)} finished"
        status = "completed"
    else:
        summary = f"Agent {_quoted(report.description)} failed: {report.result}"
        status = "stopped" if report.status == "cancelled" else "failed"
    lines = [
        NOTIFICATION_PREAMBLE,
        "",
        "<task-notification>",
        f"<task-id>{escape(report.agent_id)}</task-id>",
        f"<tool-use-id>{escape(report.tool_use_id)}</tool-use-id>",
        f"<output-file>{escape(report.transcript)}</output-file>",
        f"<status>{status}</status>",
        f"<summary>{escape(summary)}</summary>",
    ]
    if report.status == "completed":
        lines.append(f"<result>{escape(report.result)}</result>")
        lines.append(
            f"<usage><subagent_tokens>{report.total_tokens}</subagent_tokens><tool_uses>{report.tool_uses}"
            f"</tool_uses><duration_ms>{report.duration_ms}</duration_ms></usage>"
        )
    lines.append("</task-notification>")
    return "\n".join(lines)


def _quoted(text: str) -> str:
    return '"' + text.replace('"', "'") + '"'
