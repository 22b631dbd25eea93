"""An OTLP/HTTP receiver on loopback that decodes what it is sent with the OpenTelemetry
project's own protobuf definitions (PyPI opentelemetry-proto). It answers every POST to
/v1/metrics with the status its config names (200, or 503 for a collector that refuses
everything), asks the test to act once it listens ({"ask": "act", "port": N}), waits for
the test's answer on stdin, then prints what it received: per request, its content type,
the headers the config names, and each resource's attributes and metrics (type,
temporality, points with their attributes, counts, sums, bucket counts and bounds)."""
import json
import sys
import threading
from http.server import BaseHTTPRequestHandler

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)

from otlp_common import attributes, listen, respond

config = json.loads(sys.argv[1])
STATUS = config.get("status", 200)
HEADERS = config.get("headers", [])
received = []
lock = threading.Lock()


def number(point):
    return point.as_int if point.WhichOneof("value") == "as_int" else point.as_double


def metric(m):
    kind = m.WhichOneof("data")
    out = {"name": m.name, "unit": m.unit, "type": kind}
    if kind == "histogram":
        out["temporality"] = m.histogram.aggregation_temporality
        out["points"] = [{
            "attributes": attributes(p.attributes),
            "start": p.start_time_unix_nano, "time": p.time_unix_nano,
            "count": p.count, "sum": p.sum,
            "bucket_counts": list(p.bucket_counts), "bounds": list(p.explicit_bounds),
            "min": p.min, "max": p.max,
            "exemplars": [{"trace_id": e.trace_id.hex(), "span_id": e.span_id.hex(),
                           "value": e.as_double,
                           "attributes": attributes(e.filtered_attributes)}
                          for e in p.exemplars],
        } for p in m.histogram.data_points]
    elif kind == "sum":
        out["temporality"] = m.sum.aggregation_temporality
        out["monotonic"] = m.sum.is_monotonic
        out["points"] = [{"attributes": attributes(p.attributes), "value": number(p),
                          "start": p.start_time_unix_nano, "time": p.time_unix_nano}
                         for p in m.sum.data_points]
    elif kind == "gauge":
        out["points"] = [{"attributes": attributes(p.attributes), "value": number(p),
                          "time": p.time_unix_nano} for p in m.gauge.data_points]
    return out


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = ExportMetricsServiceRequest()
        request.ParseFromString(body)  # raises (500) on anything that is not one
        seen = {
            "path": self.path,
            "content_type": self.headers.get("Content-Type"),
            "headers": {name: self.headers.get(name) for name in HEADERS},
            "resources": [{
                "attributes": attributes(rm.resource.attributes),
                "scopes": [{"name": sm.scope.name,
                            "metrics": [metric(m) for m in sm.metrics]}
                           for sm in rm.scope_metrics],
            } for rm in request.resource_metrics],
        }
        with lock:
            received.append(seen)
        respond(self, STATUS, ExportMetricsServiceResponse())

    def log_message(self, *args):
        pass


server = listen(Handler)
sys.stdin.readline()
server.shutdown()
with lock:
    print(json.dumps({"requests": received}), flush=True)
