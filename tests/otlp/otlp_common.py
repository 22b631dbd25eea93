"""What the OTLP/HTTP receivers of the tests share (receiver.py for metrics,
trace_receiver.py for spans): reading OTLP attributes, answering a POST, and listening on
loopback with the test asked to act."""
import json
import threading
from http.server import ThreadingHTTPServer


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(pairs):
    return {kv.key: value(kv.value) for kv in pairs}


def respond(handler, status, response):
    """Answers `status` with the serialized `response` (an OTLP Export*ServiceResponse)
    when it is 200, with no body otherwise."""
    body = response.SerializeToString() if status == 200 else b""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/x-protobuf")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


def listen(handler_class):
    """Serves `handler_class` on a free loopback port and asks the test to act there."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler_class)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    print(json.dumps({"ask": "act", "port": server.server_address[1]}), flush=True)
    return server
