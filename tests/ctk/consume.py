"""A Chaos Toolkit consumer reading a journal: chaoslib's own validator on the embedded
experiment (`ensure_experiment_is_valid`, which also loads its configuration and
secrets as `chaos run` does), then every field a report reads (chaostoolkit-reporting
renders the title, the chaoslib version, platform, node, the times, the duration, the
status, the steady states and each activity's name, type, provider, status and times),
parsed with the types `chaos run` writes them in: times as ISO 8601 with a time zone,
durations as numbers.

Argument: {"journal": PATH, "env": {NAME: VALUE}}. Prints what it read as one JSON object.
"""

import json
import os
import sys
from datetime import datetime

import chaoslib
from chaoslib.experiment import ensure_experiment_is_valid


def when(text):
    at = datetime.fromisoformat(text)
    assert at.tzinfo is not None, f"{text!r} has no time zone"
    return at


def main():
    config = json.loads(sys.argv[1])
    os.environ.update(config.get("env", {}))
    with open(config["journal"], encoding="utf-8") as f:
        journal = json.load(f)
    ensure_experiment_is_valid(journal["experiment"])
    start, end = when(journal["start"]), when(journal["end"])
    assert end >= start, (start, end)
    assert isinstance(journal["duration"], (int, float))
    for key in ("chaoslib-version", "platform", "node"):
        assert isinstance(journal[key], str), key
    states = journal["steady_states"]
    runs = []
    for phase in ("before", "after"):
        state = states[phase]
        if state is not None:
            assert isinstance(state["steady_state_met"], bool)
            runs.extend(state["probes"])
    for state in states["during"]:
        runs.extend(state["probes"])
    runs.extend(journal["run"])
    runs.extend(journal["rollbacks"])
    for run in runs:
        assert when(run["end"]) >= when(run["start"])
        assert isinstance(run["duration"], (int, float))
        activity = run["activity"]
        assert activity["type"] in ("probe", "action"), activity
        assert isinstance(activity["name"], str)
        assert isinstance(activity["provider"]["type"], str)
        assert run["status"] in ("succeeded", "failed"), run["status"]
    print(json.dumps({
        "chaoslib": chaoslib.__version__,
        "written_by": journal["chaoslib-version"],
        "title": journal["experiment"]["title"],
        "status": journal["status"],
        "deviated": journal["deviated"],
        "activities": len(runs),
        "seconds": (end - start).total_seconds(),
    }))


if __name__ == "__main__":
    main()
