"""A client of iohr's multiplexed WebSocket stream, written with PyPI `websockets` (17.x,
its asyncio API), a library nobody here wrote.

Driven by tests/tests/ws_stream.rs: one argument, a JSON object with a "mode":

- "main": {"url", "token", "run_token", "runs": [A, B, L] (L: a live run),
  "queued": 33 runs that stay queued, "other": a run of
  another account}. Refusals before the upgrade, two runs' frames on one connection, an
  unsubscribe and a resume, bad messages, the subscription bound, an oversized message.
- "bounds": {"url", "token", "run"}: the viewer bounds, per subscription and before the
  upgrade.
- "resume": {"url" (through the test's cutting proxy), "token", "run"}: frames until the
  first two, then asks for the cut, then reconnects and resumes after the last id seen.
- "revoked": {"url", "token", "run"}: a subscription, then asks for the token's
  revocation, then subscribes again.
- "events": {"url", "token", "stored": N, "run": R}: the account's events (topic
  "events"): the N stored ones, then run R's `reliability.run.finished` as it happens, an
  unsubscribe, a second subscribe refused, and a resume after the first event's id.

A mode asks the test to act by printing `{"ask": WHAT}` and waits for a line on stdin.
Every mode prints, as its last line, one JSON object of what it saw for the Rust test to
assert on.
"""

import asyncio
import json
import sys

from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

# Every wait is bounded: a stream that stops answering fails the test, it does not hang.
LIMIT = 60


def open_stream(cfg, token, url=None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    # proxy=None: loopback only, whatever the environment says about proxies.
    return connect(url or cfg["url"], additional_headers=headers, proxy=None,
                   max_size=16 * 1024 * 1024)


async def send(ws, message):
    await ws.send(message if isinstance(message, (str, bytes)) else json.dumps(message))


async def recv(ws):
    return json.loads(await asyncio.wait_for(ws.recv(), LIMIT))


async def ask(what):
    """Asks the Rust test to act (`{"ask": WHAT}` on stdout) and waits until it has."""
    print(json.dumps({"ask": what}), flush=True)
    await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(
        None, sys.stdin.readline), LIMIT)


async def refused_before_upgrade(cfg, token):
    """The HTTP status and error code of a refused handshake."""
    try:
        async with open_stream(cfg, token):
            return {"status": 101}
    except InvalidStatus as e:
        body = json.loads(e.response.body or b"null")
        return {"status": e.response.status_code, "code": (body or {}).get("error", {}).get("code")}


async def until_ended(ws, runs, seen=None):
    """Every message until each of `runs` has its `end`; the messages in order."""
    seen = [] if seen is None else seen
    left = set(runs)
    while left:
        message = await recv(ws)
        seen.append(message)
        if message["type"] == "end":
            left.discard(message["run"])
        if message["type"] == "error" and message.get("run") in left:
            raise RuntimeError(f"a subscription failed: {message}")
    return seen


async def answer_to(ws, message):
    """Sends `message` and returns the next message that is not a frame."""
    await send(ws, message)
    while True:
        answer = await recv(ws)
        if answer["type"] != "frame":
            return answer


async def main_mode(cfg):
    seen = {}
    seen["no_token"] = await refused_before_upgrade(cfg, None)
    seen["unknown_token"] = await refused_before_upgrade(cfg, "iohr_not_a_token")
    seen["run_only_token"] = await refused_before_upgrade(cfg, cfg["run_token"])

    a, b, live = cfg["runs"]
    async with open_stream(cfg, cfg["token"]) as ws:
        # Two runs on one connection, both from their first frame.
        await send(ws, {"op": "subscribe", "run": a})
        await send(ws, {"op": "subscribe", "run": b, "after": 0})
        seen["two_runs"] = await until_ended(ws, [a, b])

        # Unsubscribe a live run after its first frame: after `unsubscribed`, none of
        # its frames while B's are read again; then resume it after the last one seen.
        await send(ws, {"op": "subscribe", "run": live})
        first = []
        while not any(m["type"] == "frame" for m in first):
            first.append(await recv(ws))
        await send(ws, {"op": "unsubscribe", "run": live})
        while first[-1]["type"] != "unsubscribed":
            first.append(await recv(ws))
        await send(ws, {"op": "subscribe", "run": b})
        between = await until_ended(ws, [b])
        last = max(m["id"] for m in first if m["type"] == "frame")
        await send(ws, {"op": "subscribe", "run": live, "after": last})
        rest = await until_ended(ws, [live])
        seen["unsubscribe"] = {"first": first, "between": between, "rest": rest}

        # Bad messages: each an error message, and the connection goes on.
        bad = {
            "malformed": "{not json",
            "binary": b"\x00\x01",
            "not_an_object": "[1]",
            "unknown_op": {"op": "watch", "run": a},
            "unknown_field": {"op": "subscribe", "run": a, "since": 3},
            "negative_after": {"op": "subscribe", "run": a, "after": -1},
            "events_topic": {"op": "subscribe", "topic": "events", "after": "e1"},
            "unknown_run": {"op": "subscribe", "run": "01000000-0000-7000-8000-000000000000"},
            "other_account": {"op": "subscribe", "run": cfg["other"]},
            "not_subscribed": {"op": "unsubscribe", "run": a},
        }
        seen["bad"] = {name: await answer_to(ws, m) for name, m in bad.items()}

        queued = cfg["queued"]
        seen["subscribe_queued"] = await answer_to(ws, {"op": "subscribe", "run": queued[0]})
        seen["again"] = await answer_to(ws, {"op": "subscribe", "run": queued[0]})
        seen["unsubscribe_queued"] = await answer_to(ws, {"op": "unsubscribe", "run": queued[0]})

        # The bound: 32 subscriptions at once, the 33rd refused.
        answers = [await answer_to(ws, {"op": "subscribe", "run": r}) for r in queued[:33]]
        seen["bound"] = [m["type"] if m["type"] != "error" else m["code"] for m in answers]
        seen["unsubscribe_one"] = (await answer_to(ws, {"op": "unsubscribe", "run": queued[0]}))["type"]
        seen["then_room"] = (await answer_to(ws, {"op": "subscribe", "run": queued[32]}))["type"]
        seen["unsubscribe_all"] = sorted({(await answer_to(ws, {"op": "unsubscribe", "run": r}))["type"]
                                          for r in queued[1:33]})

        # The connection still serves: a finished run's frames after the last but one.
        b_last = max(m["id"] for m in seen["two_runs"] if m["type"] == "frame" and m["run"] == b)
        after = b_last - 1
        await send(ws, {"op": "subscribe", "run": b, "after": after})
        seen["b_tail"] = await until_ended(ws, [b])
        # Past its last frame: only the end, as the SSE stream closes at once.
        await send(ws, {"op": "subscribe", "run": b, "after": b_last})
        seen["b_past"] = await until_ended(ws, [b])

        # A message over the bound closes the connection with 1009.
        await send(ws, json.dumps({"op": "subscribe", "run": "x" * 5000}))
        try:
            while True:
                await asyncio.wait_for(ws.recv(), LIMIT)
        except ConnectionClosed as e:
            seen["oversized_close"] = e.rcvd.code if e.rcvd else None
    return seen


async def bounds_mode(cfg):
    """Per run 1 viewer, 3 in total: a connection takes one place, a subscription one."""
    seen = {}
    run = cfg["run"]
    async with open_stream(cfg, cfg["token"]) as first:
        seen["first"] = await answer_to(first, {"op": "subscribe", "run": run})
        async with open_stream(cfg, cfg["token"]) as second:
            seen["second"] = await answer_to(second, {"op": "subscribe", "run": run})
            seen["third_connection"] = await refused_before_upgrade(cfg, cfg["token"])
        # The second connection is gone: its place is free again once the server has
        # seen it go (a bounded poll: the close and the freeing are not one event).
        for _ in range(250):
            try:
                async with open_stream(cfg, cfg["token"]) as third:
                    seen["after_close"] = (await answer_to(third, {"op": "ping?"}))["code"]
                    break
            except InvalidStatus as e:
                if e.response.status_code != 429:
                    raise
                await asyncio.sleep(0.02)
    return seen


async def resume_mode(cfg):
    run = cfg["run"]
    before = []
    try:
        async with open_stream(cfg, cfg["token"]) as ws:
            await send(ws, {"op": "subscribe", "run": run})
            while True:
                message = await recv(ws)
                if message["type"] == "frame":
                    before.append(message)
                if len(before) == 2:
                    await ask("cut")
                if message["type"] == "end":
                    raise RuntimeError(f"the run ended before the cut: {before}")
    except ConnectionClosed as e:
        closed = {"code": e.rcvd.code if e.rcvd else None}
    last = before[-1]["id"]
    async with open_stream(cfg, cfg["token"]) as ws:
        await send(ws, {"op": "subscribe", "run": run, "after": last})
        after = await until_ended(ws, [run])
    return {"before": before, "closed": closed, "after": after}


async def revoked_mode(cfg):
    """A token revoked while its connection is open: the next subscribe closes it."""
    async with open_stream(cfg, cfg["token"]) as ws:
        first = await answer_to(ws, {"op": "subscribe", "run": cfg["run"]})
        await ask("revoke")
        await send(ws, {"op": "subscribe", "run": cfg["run"]})
        try:
            while True:
                await asyncio.wait_for(ws.recv(), LIMIT)
        except ConnectionClosed as e:
            return {"first": first, "close": [e.rcvd.code, e.rcvd.reason] if e.rcvd else None}


async def next_event(ws):
    while True:
        message = await recv(ws)
        if message["type"] == "event":
            return message
        if message["type"] != "subscribed":
            raise RuntimeError(f"not an event: {message}")


async def events_mode(cfg):
    """The events topic: stored events, a live one, unsubscribe, a resume after an id."""
    async with open_stream(cfg, cfg["token"]) as ws:
        subscribed = await answer_to(ws, {"op": "subscribe", "topic": "events"})
        stored = [await next_event(ws) for _ in range(cfg["stored"])]
        while True:
            live = await next_event(ws)
            if (live["event"] == "reliability.run.finished"
                    and live["data"]["data"]["run_id"] == cfg["run"]):
                break
        await send(ws, {"op": "subscribe", "topic": "events"})
        while (twice := await recv(ws))["type"] == "event":
            pass
        await send(ws, {"op": "unsubscribe", "topic": "events"})
        while (unsubscribed := await recv(ws))["type"] == "event":
            pass
    async with open_stream(cfg, cfg["token"]) as ws:
        await send(ws, {"op": "subscribe", "topic": "events", "after": stored[0]["id"]})
        resumed = []
        while not resumed or resumed[-1]["id"] < live["id"]:
            resumed.append(await next_event(ws))
    return {"subscribed": subscribed, "stored": stored, "live": live, "twice": twice,
            "unsubscribed": unsubscribed, "resumed": [e["id"] for e in resumed]}


async def main(cfg):
    modes = {"main": main_mode, "bounds": bounds_mode, "resume": resume_mode,
             "revoked": revoked_mode, "events": events_mode}
    mode = modes[cfg["mode"]]
    return await mode(cfg)


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(json.loads(sys.argv[1])))))
