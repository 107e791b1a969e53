"""Benchmark: what the per-request media cap (``handlers/request/services/media.py``) costs ``encode_request``.

Three transcripts of N tool turns each, every request's body built as the loop builds it
(the view grows by one turn, then ``encode_request``): **text** (no image: the cap counts
the new messages and returns the view as it is), **images under the cap** (a 1 MB image in
every tenth result, at most 24 of them: counted, kept), and **images over the cap** (a
4.9 MB image in each of the first twelve results, 59 MB: from the sixth on, every request
copies the transcript with its oldest images left out and serialises it again). Reported: the median CPU time of one
body over the last ten requests, and its size. Nothing is asserted. Usage:
``python tools/bench_media_cap.py [--turns 200] [--repeat 5]``
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

from bench.machine import describe_machine

from queryloop.handlers.messages import MessageView
from queryloop.handlers.request.services.backends import ModelCall
from queryloop.handlers.request.services.body import encode_request

_ONE_MB = 1_000_000


def _image(chars: int) -> dict[str, object]:
    return {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "A" * chars}}


def _turn(view: MessageView, n: int, image: int) -> MessageView:
    call = {"type": "tool_use", "id": f"toolu_{n}", "name": "mcp__s__shot", "input": {"n": n}}
    content: list[object] = [{"type": "text", "text": f"result {n} " * 20}]
    if image:
        content.append(_image(image))
    result = {"type": "tool_result", "tool_use_id": f"toolu_{n}", "content": content}
    return view.append({"role": "assistant", "content": [call]}).append({"role": "user", "content": [result]})


def _run(turns: int, image_at: Callable[[int], int]) -> tuple[float, int]:
    view = MessageView.of([{"role": "user", "content": "go"}])
    times: list[float] = []
    size = 0
    for n in range(turns):
        view = _turn(view, n, image_at(n))
        call = ModelCall(
            model="m", messages=view, system="s", tools=(), max_tokens=1000, stream=True, attempt=1, idle_timeout_s=60
        )
        start = time.process_time()
        body = encode_request(call, stream=True)
        times.append(time.process_time() - start)
        size = len(body)
    return statistics.median(times[-10:]), size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    cases: dict[str, Callable[[int], int]] = {
        "text": lambda n: 0,
        "images under the cap": lambda n: _ONE_MB if n % 10 == 0 and n < 240 else 0,
        "images over the cap": lambda n: 4_900_000 if n < 12 else 0,
    }
    print(describe_machine())
    for name, image_at in cases.items():
        runs = [_run(args.turns, image_at) for _ in range(args.repeat)]
        median = statistics.median(r[0] for r in runs)
        print(f"{name:>22}: {median * 1000:8.2f} ms per body, {runs[0][1] / _ONE_MB:7.1f} MB sent")


if __name__ == "__main__":
    main()
