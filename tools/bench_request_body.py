"""Benchmark: what one model request costs the client, the SDK serialising it vs the prepared body.

A transcript of N no-op tool turns (2N+1 messages) is sent, streamed, to a trivial
server in its own process that answers every request with the same short SSE reply
(so its work is constant and outside the measured process). For each N three ways are
timed, interleaved, as the CPU time of this process (``time.process_time``: the
client's own work, the kernel's socket work for it included) per request:

* **SDK** — ``client.messages.create(..., stream=True)`` with the messages as a list of
  dicts, as any SDK loop sends them: the SDK serialises the whole transcript again.
* **prepared body** — what queryloop does: ``encode_request`` (the stored JSON of each
  message copied between a head and a tail, prompt-cache breakpoints placed) posted
  through the same client with ``client.post("/v1/messages", content=body, ...)``.
* **encode only** — ``encode_request`` alone.

Medians over the repeats; growth from the smallest to the largest N. Nothing is
asserted. Usage: ``python tools/bench_request_body.py [--repeat R] [--n 50,200,500,1000]``
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from typing import Any

import anthropic
from anthropic.types import Message, RawMessageStreamEvent
from bench.machine import describe_machine

from queryloop.handlers.messages import MessageView
from queryloop.handlers.request.services.backends import ModelCall
from queryloop.handlers.request.services.body import encode_request

_REPLY = [
    (
        "message_start",
        '{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant",'
        '"model":"m","content":[],"stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":1,"output_tokens":1}}}',
    ),
    ("content_block_start", '{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}'),
    ("content_block_delta", '{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"ok"}}'),
    ("content_block_stop", '{"type":"content_block_stop","index":0}'),
    (
        "message_delta",
        '{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":1}}',
    ),
    ("message_stop", '{"type":"message_stop"}'),
]

# the trivial server: reads each request whole, answers the same SSE reply; prints its port when listening
_SERVER = f"""
import asyncio, sys
from aiohttp import web
REPLY = b"".join(f"event: {{e}}\\ndata: {{d}}\\n\\n".encode() for e, d in {_REPLY!r})
async def answer(request):
    await request.read()
    return web.Response(body=REPLY, content_type="text/event-stream")
async def main():
    app = web.Application(client_max_size=1 << 30)
    app.router.add_post("/v1/messages", answer)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(site._server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""

TOOLS: tuple[dict[str, Any], ...] = (
    {
        "name": "noop",
        "description": "Does nothing.",
        "input_schema": {"type": "object", "properties": {"note": {"type": "string"}}},
    },
)
SYSTEM = "You are terse."


def transcript(turns: int) -> MessageView:
    view = MessageView().append({"role": "user", "content": "Call the noop tool until told otherwise, then say done."})
    for i in range(turns):
        tool_use = {"type": "tool_use", "id": f"toolu_{i:06d}", "name": "noop", "input": {"note": "again"}}
        result = {"type": "tool_result", "tool_use_id": f"toolu_{i:06d}", "content": "ok", "is_error": False}
        view = view.append({"role": "assistant", "content": [tool_use]})
        view = view.append({"role": "user", "content": [result]})
    return view


async def _drain(stream: Any) -> None:
    async for _ in stream:
        pass


async def measure(port: int, ns: list[int], repeat: int) -> dict[int, dict[str, float]]:
    client = anthropic.AsyncAnthropic(api_key="bench", base_url=f"http://127.0.0.1:{port}", max_retries=0)
    out: dict[int, dict[str, float]] = {}
    try:
        for n in ns:
            view = transcript(n)
            call = ModelCall(
                model="m",
                messages=view,
                system=SYSTEM,
                tools=TOOLS,
                max_tokens=1000,
                stream=True,
                attempt=1,
                idle_timeout_s=30,
            )
            times: dict[str, list[float]] = {"sdk": [], "prepared": [], "encode": []}
            size = 0
            for _ in range(repeat):
                for way in times:  # interleaved: drift hits every way alike
                    start = time.process_time()
                    if way == "sdk":
                        stream = await client.messages.create(
                            model="m",
                            messages=view.to_list(),  # type: ignore[arg-type]
                            system=SYSTEM,
                            tools=list(TOOLS),  # type: ignore[arg-type]
                            max_tokens=1000,
                            stream=True,
                        )
                        await _drain(stream)
                    elif way == "prepared":
                        body = encode_request(call, stream=True)
                        prepared = await client.post(
                            "/v1/messages",
                            cast_to=Message,
                            content=body,
                            options={"headers": {"content-type": "application/json"}},
                            stream=True,
                            stream_cls=anthropic.AsyncStream[RawMessageStreamEvent],
                        )
                        await _drain(prepared)
                    else:
                        size = len(encode_request(call, stream=True))
                    times[way].append(time.process_time() - start)
            out[n] = {way: statistics.median(values) for way, values in times.items()}
            out[n]["bytes"] = size
    finally:
        await client.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--n", default="50,200,500,1000")
    args = parser.parse_args()
    ns = sorted({int(x) for x in args.n.split(",") if x.strip()})
    server = subprocess.Popen([sys.executable, "-c", _SERVER], stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        results = asyncio.run(measure(port, ns, args.repeat))
    finally:
        server.terminate()
        server.wait()
    print(describe_machine())
    print(f"client CPU per streamed request, median of {args.repeat} (a trivial server in its own process)")
    print()
    print(f"{'N':>5} {'SDK serialises':>15} {'prepared body':>14} {'encode only':>12} {'body':>9}")
    for n in ns:
        r = results[n]
        print(
            f"{n:>5} {r['sdk'] * 1e3:>12.2f} ms {r['prepared'] * 1e3:>11.2f} ms "
            f"{r['encode'] * 1e6:>9.0f} µs {r['bytes'] / 1024:>6.0f} KB"
        )
    lo, hi = results[ns[0]], results[ns[-1]]
    print()
    print(
        f"growth N={ns[0]} → N={ns[-1]}: SDK serialises {hi['sdk'] / lo['sdk']:.2f}×, "
        f"prepared body {hi['prepared'] / lo['prepared']:.2f}×"
    )


if __name__ == "__main__":
    main()
