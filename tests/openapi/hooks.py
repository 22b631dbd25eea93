"""Loaded by schemathesis (SCHEMATHESIS_HOOKS) in tests/tests/openapi.rs.

It works around one CPython 3.11 bug, nothing of ours. Hypothesis describes a
strategy's lambdas by parsing their source with `ast`. On CPython before 3.11.8
that parse can raise `SystemError: AST constructor recursion depth mismatch`
(CPython gh-106905). This machine has 3.11.7. Schemathesis reports the error as
a failed operation, so one CI run failed on GET /v1/reliability/audit with
every response correct. The description is only text for reports. When that
one error comes up, the lambda is described as unknown, which is what
Hypothesis itself prints when it cannot find a lambda's source.
"""

from hypothesis.internal import lambda_sources

_describe = lambda_sources._lambda_description


def _describe_despite_cpython_gh_106905(f, *args, **kwargs):
    try:
        return _describe(f, *args, **kwargs)
    except SystemError as error:
        if "recursion depth mismatch" not in str(error):
            raise
        return "lambda: <unknown>"


lambda_sources._lambda_description = _describe_despite_cpython_gh_106905
