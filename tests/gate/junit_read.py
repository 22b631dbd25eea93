"""Reads a JUnit XML report with junitparser (PyPI, a maintained JUnit reader nobody here
wrote) and prints what a CI system would see: each suite's counts and each case's result,
as one JSON value. The one argument is {"path": FILE}."""

import json
import sys

from junitparser import Error, Failure, JUnitXml, Skipped


def outcome(case):
    for result in case.result:
        if isinstance(result, Failure):
            return "failure", result.message
        if isinstance(result, Error):
            return "error", result.message
        if isinstance(result, Skipped):
            return "skipped", result.message
    return "passed", None


def main():
    config = json.loads(sys.argv[1])
    xml = JUnitXml.fromfile(config["path"])
    suites = []
    for suite in xml:
        cases = []
        for case in suite:
            result, message = outcome(case)
            cases.append({"name": case.name, "classname": case.classname,
                          "result": result, "message": message})
        suites.append({"name": suite.name, "tests": suite.tests,
                       "failures": suite.failures, "errors": suite.errors,
                       "cases": cases})
    print(json.dumps({"suites": suites}))


if __name__ == "__main__":
    main()
