"""A target that reads each request's trace context with the official OpenTelemetry SDK
(W3C TraceContextTextMapPropagator and W3CBaggagePropagator) and tallies it per run, as
the target's own telemetry would see it (tests/tests/trace_context.rs).

It asks {"ask": "run", "target": URL} and waits for the answer {"runs": {RUN_ID: SAMPLE
or null}} once the test's runs ended; then prints one JSON object: per run id named in
the baggage, what its requests carried. No body is kept.

A POST to /j whose trace id ends in 0 (one in 16) is answered 150 ms late: the slow
requests a load run's exemplars must name. Each run's trace ids and the delayed ones are
printed, so that the test checks the exemplars against what the target saw."""

import asyncio
import hashlib
import json
import sys
import threading

from opentelemetry import baggage, trace
from opentelemetry.baggage.propagation import W3CBaggagePropagator
from opentelemetry.sdk.trace.sampling import TraceIdRatioBased
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

TRACE = TraceContextTextMapPropagator()
BAGGAGE = W3CBaggagePropagator()

# run id (from the baggage, or "" without one) -> tallies
seen = {}
lock = threading.Lock()


SLOW_PATH = "/j"
SLOW_SECONDS = 0.15


def tally(headers, path):
    """The request's tallies; whether it is to be answered late."""
    ctx = TRACE.extract(headers)
    span = trace.get_current_span(ctx).get_span_context()
    items = baggage.get_all(BAGGAGE.extract(headers, context=ctx))
    run = items.get("iohr.run_id", "")
    with lock:
        t = seen.setdefault(run, {
            "requests": 0, "valid": 0, "sampled": 0, "synthetic": 0,
            "prefixes": {}, "trace_ids": set(), "traces": [], "flags": [],
            "delayed": [],
        })
        t["requests"] += 1
        if items.get("synthetic") == "true":
            t["synthetic"] += 1
        if not (span.is_valid and span.is_remote):
            return False
        t["valid"] += 1
        if span.trace_flags.sampled:
            t["sampled"] += 1
        trace_id = f"{span.trace_id:032x}"
        prefix = trace_id[:16]
        t["prefixes"][prefix] = t["prefixes"].get(prefix, 0) + 1
        t["trace_ids"].add(trace_id)
        # Kept for the sampler's verdict once the run's rate is known.
        t["traces"].append(span.trace_id)
        t["flags"].append(bool(span.trace_flags.sampled))
        slow = path == SLOW_PATH and trace_id.endswith("0")
        if slow:
            t["delayed"].append(trace_id)
        return slow


async def serve(reader, writer):
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = {}
            for line in lines[1:]:
                if ":" in line:
                    name, value = line.split(":", 1)
                    headers[name.strip().lower()] = value.strip()
            length = int(headers.get("content-length", "0"))
            if length:
                await reader.readexactly(length)
            path = lines[0].split(" ")[1] if " " in lines[0] else ""
            if tally(headers, path):
                await asyncio.sleep(SLOW_SECONDS)
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 2\r\n\r\nok")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


def main():
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    port = []

    def run_server():
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(asyncio.start_server(serve, "127.0.0.1", 0))
        port.append(server.sockets[0].getsockname()[1])
        ready.set()
        loop.run_forever()

    threading.Thread(target=run_server, daemon=True).start()
    ready.wait()
    print(json.dumps({"ask": "run", "target": f"http://127.0.0.1:{port[0]}"}), flush=True)
    answer = json.loads(sys.stdin.readline())
    out = {}
    with lock:
        for run, t in seen.items():
            rate = answer["runs"].get(run)
            disagree = 0
            if rate is not None:
                sampler = TraceIdRatioBased(rate)
                for trace_id, flag in zip(t["traces"], t["flags"]):
                    decision = sampler.should_sample(None, trace_id, "request").decision
                    disagree += decision.is_sampled() != flag
            out[run] = {
                "requests": t["requests"],
                "valid": t["valid"],
                "sampled": t["sampled"],
                "synthetic": t["synthetic"],
                "distinct_trace_ids": len(t["trace_ids"]),
                "prefixes": t["prefixes"],
                "run_prefix": hashlib.sha256(run.encode()).hexdigest()[:16],
                "sampler_disagrees": disagree if rate is not None else None,
                "trace_ids": sorted(t["trace_ids"]),
                "delayed": t["delayed"],
            }
    print(json.dumps(out), flush=True)


main()
