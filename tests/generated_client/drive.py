"""A third-party integrator's program: it uses only the client that openapi-python-client
(PyPI, pinned in tests/requirements.txt) generated from docs/openapi.json, no
hand-written request. Driven by tests/tests/generated_client.rs with one argument, a
JSON object: {"package": the directory the client was generated into, "url", "token",
"target"}.

It starts a checks run against the target, polls the generated `get_run` until the run
ends, does that twice, compares the two with the generated `compare_runs`, lists the runs, and prints
one JSON object of what it saw for the Rust test to assert on. Any answer the document
does not describe raises (`raise_on_unexpected_status`), and any body that does not
parse as documented raises in the generated models: both fail the test.
"""

import json
import sys
import time

cfg = json.loads(sys.argv[1])
sys.path.insert(0, cfg["package"])

from iohr_reliability_api_client import AuthenticatedClient  # noqa: E402
from iohr_reliability_api_client.api.compare import compare_runs  # noqa: E402
from iohr_reliability_api_client.api.runs import create_run, get_run, list_runs  # noqa: E402
from iohr_reliability_api_client.models import (  # noqa: E402
    ApiError,
    Comparison,
    CreateRun,
    CreateRunSpecType0,
    RunKind,
    RunPage,
    RunRecord,
    RunStatus,
)

# Every wait is bounded: a run that never ends fails the test, it does not hang.
LIMIT_S = 60
ENDED = {RunStatus.PASSED, RunStatus.FAILED, RunStatus.ERROR, RunStatus.CANCELLED, RunStatus.REFUSED}

client = AuthenticatedClient(
    base_url=cfg["url"],
    token=cfg["token"],
    raise_on_unexpected_status=True,
    # Loopback only, whatever the environment says about proxies.
    httpx_args={"trust_env": False},
)


def expect(answer, kind, what):
    if isinstance(answer, ApiError):
        raise SystemExit(f"{what}: {answer.error.code}: {answer.error.message}")
    if not isinstance(answer, kind):
        raise SystemExit(f"{what}: answered {answer!r}, not a {kind.__name__}")
    return answer


def finished_run():
    body = CreateRun(
        kind=RunKind.CHECKS,
        environment="staging",
        target=cfg["target"],
        spec=CreateRunSpecType0.from_dict(
            {"checks": [{"name": "home", "path": "/"}], "invariants": [{"rule": "no_5xx"}]}
        ),
    )
    run = expect(create_run.sync(client=client, body=body), RunRecord, "create_run")
    if run.kind != RunKind.CHECKS:
        raise SystemExit(f"create_run answered kind {run.kind!r}")
    deadline = time.monotonic() + LIMIT_S
    while run.status not in ENDED:
        if time.monotonic() > deadline:
            raise SystemExit(f"run {run.id} still {run.status} after {LIMIT_S} s")
        # Polling is what a client of this API does; the interval is not a synchronisation.
        time.sleep(0.2)
        run = expect(get_run.sync(run.id, client=client), RunRecord, "get_run")
    return run


with client as client:
    before = finished_run()
    after = finished_run()
    comparison = expect(
        compare_runs.sync(client=client, before=before.id, after=after.id),
        Comparison,
        "compare_runs",
    )
    # A page of runs parses too (it failed as soon as one run existed while the document
    # spelled the kinds `Checks`, `Load`, ...).
    listed = expect(list_runs.sync(client=client), RunPage, "list_runs")

print(
    json.dumps(
        {
            "runs": [
                {"id": r.id, "kind": r.kind.value, "status": r.status.value} for r in (before, after)
            ],
            "comparison": {
                "before": comparison.before,
                "after": comparison.after,
                "verdict": comparison.verdict.value,
                "differences": [
                    {"measure": d.measure, "worse": d.worse, "line": d.line}
                    for d in comparison.differences
                ],
                "unchanged": comparison.unchanged,
                "notes": comparison.notes,
                "level": comparison.level,
                "noise_floor": comparison.noise_floor,
            },
            "listed": [r.id for r in listed.runs],
        }
    )
)
