"""Scrapes each URL and parses it with the Prometheus project's own OpenMetrics parser
(PyPI prometheus_client), which refuses text that breaks the format. Prints, per URL, its
status and content type and, when it answered 200, each family's type and samples."""
import json
import sys
import urllib.error
import urllib.request

from prometheus_client.openmetrics.parser import text_string_to_metric_families


def scrape(url):
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = answer.read().decode()
            families = {}
            for family in text_string_to_metric_families(body):
                families[family.name] = {
                    "type": family.type,
                    "samples": [[s.name, s.labels, s.value] for s in family.samples],
                }
            return {"status": answer.status,
                    "content_type": answer.headers.get("Content-Type"),
                    "families": families}
    except urllib.error.HTTPError as error:
        return {"status": error.code, "content_type": error.headers.get("Content-Type")}


config = json.loads(sys.argv[1])
print(json.dumps({url: scrape(url) for url in config["urls"]}))
