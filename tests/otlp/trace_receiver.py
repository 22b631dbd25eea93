"""An OTLP/HTTP trace receiver on loopback that decodes what it is sent with the
OpenTelemetry project's own protobuf definitions (PyPI opentelemetry-proto). It answers
every POST to /v1/traces with the status its config names, asks the test to act once it
listens ({"ask": "act", "port": N}), acts again on each answer that says "more" (the
test's way to wait for spans: it gets what arrived so far), and on an answer with "stop"
prints everything received: per span, its service (the resource's service.name), name,
trace, span and parent ids (hex), start and end (ns) and attributes."""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

from otlp_common import attributes, listen, respond

config = json.loads(sys.argv[1])
STATUS = config.get("status", 200)
spans = []
requests = []
lock = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = ExportTraceServiceRequest()
        request.ParseFromString(body)  # raises (500) on anything that is not one
        seen = []
        for rs in request.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    seen.append({
                        "service": resource.get("service.name"),
                        "name": s.name,
                        "trace_id": s.trace_id.hex(),
                        "span_id": s.span_id.hex(),
                        "parent_span_id": s.parent_span_id.hex(),
                        "start": s.start_time_unix_nano,
                        "end": s.end_time_unix_nano,
                        "attributes": attributes(s.attributes),
                    })
        with lock:
            requests.append({"path": self.path,
                             "content_type": self.headers.get("Content-Type")})
            spans.extend(seen)
        respond(self, STATUS, ExportTraceServiceResponse())

    def log_message(self, *args):
        pass


server = listen(Handler)
while True:
    answer = json.loads(sys.stdin.readline() or '{"stop": true}')
    if answer.get("stop"):
        break
    with lock:
        print(json.dumps({"ask": "more", "spans": spans}), flush=True)
server.shutdown()
with lock:
    print(json.dumps({"requests": requests, "spans": spans}), flush=True)
