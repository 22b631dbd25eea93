"""Scrapes each URL and parses it with the Prometheus project's own OpenMetrics parser
(PyPI prometheus_client), which refuses text that breaks the format. Prints, per URL, its
status and content type and, when it answered 200, each family's type and samples (a
sample with an exemplar has it fourth: its labels, value and timestamp). With "accept" in
the config, the scrape sends it as its Accept header (as Prometheus asks for OpenMetrics)."""
import json
import sys
import urllib.error
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def sample(s):
    out = [s.name, s.labels, s.value]
    if s.exemplar is not None:
        out.append({"labels": s.exemplar.labels, "value": s.exemplar.value,
                    "timestamp": None if s.exemplar.timestamp is None else float(s.exemplar.timestamp)})
    return out


def scrape(url, accept):
    request = urllib.request.Request(url)
    if accept:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            body = answer.read().decode()
            families = {}
            for family in text_string_to_metric_families(body):
                families[family.name] = {
                    "type": family.type,
                    "samples": [sample(s) for s in family.samples],
                }
            return {"status": answer.status,
                    "content_type": answer.headers.get("Content-Type"),
                    "families": families}
    except urllib.error.HTTPError as error:
        return {"status": error.code, "content_type": error.headers.get("Content-Type")}


config = json.loads(sys.argv[1])
print(json.dumps({url: scrape(url, config.get("accept")) for url in config["urls"]}))
