"""Runs a composite GitHub Action's steps (action.yml) the way GitHub's runner does for
`shell: bash` steps: each step's `${{ }}` expressions evaluated first, its `env` set, its
script run as `bash --noprofile --norc -eo pipefail FILE`, its outputs read back from
the `$GITHUB_OUTPUT` file, a failing step ending the action. Only the expressions the
action uses are known (inputs.*, github.action_path, github.event.*, steps.*.outputs.*):
any other one fails this script, so the action cannot lean on something untested here.

The one argument is {"action": FILE, "inputs": {...}, "env": {...}, "event": {...},
"workdir": DIR}. Prints {"exit": N, "steps": [{"id", "exit", "outputs"}], "outputs": {...},
"log": TEXT} as one JSON value."""

import json
import os
import re
import subprocess
import sys
import tempfile

import yaml

EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")


def lookup(path, context):
    value = context
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return ""
        value = value[part]
    return "" if value is None else str(value)


def evaluate(text, context):
    def one(match):
        expression = match.group(1)
        root = expression.split(".")[0]
        if root not in ("inputs", "github", "steps") or not re.fullmatch(r"[\w.-]+", expression):
            raise SystemExit(f"run_action.py: unsupported expression ${{{{ {expression} }}}}")
        return lookup(expression, context)

    return EXPRESSION.sub(one, str(text))


def read_outputs(path):
    outputs = {}
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if "=" in line:
                key, value = line.split("=", 1)
                outputs[key] = value
    return outputs


def main():
    config = json.loads(sys.argv[1])
    action_file = config["action"]
    with open(action_file) as f:
        action = yaml.safe_load(f)
    assert action["runs"]["using"] == "composite", "a composite action"
    inputs = {name: str(spec.get("default", "")) for name, spec in action.get("inputs", {}).items()}
    for name, value in config.get("inputs", {}).items():
        if name not in inputs:
            raise SystemExit(f"run_action.py: the action has no input {name}")
        inputs[name] = value
    for name, spec in action.get("inputs", {}).items():
        if spec.get("required") and not inputs[name]:
            raise SystemExit(f"run_action.py: input {name} is required")
    context = {
        "inputs": inputs,
        "github": {"action_path": os.path.dirname(os.path.abspath(action_file)),
                   "event": config.get("event", {})},
        "steps": {},
    }
    workdir = config["workdir"]
    base_env = dict(os.environ)
    base_env.update(config.get("env", {}))
    base_env["GITHUB_ACTIONS"] = "true"
    results, log, code = [], [], 0
    for index, step in enumerate(action["runs"]["steps"]):
        step_id = step.get("id", f"step{index}")
        assert step.get("shell") == "bash", f"step {step_id}: shell bash"
        env = dict(base_env)
        for key, value in (step.get("env") or {}).items():
            env[key] = evaluate(value, context)
        with tempfile.NamedTemporaryFile("w", suffix=".sh", delete=False) as script:
            script.write(evaluate(step["run"], context))
        output_file = tempfile.NamedTemporaryFile("w", delete=False)
        output_file.close()
        env["GITHUB_OUTPUT"] = output_file.name
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", script.name],
            cwd=workdir, env=env, capture_output=True, text=True, timeout=300,
        )
        log.append(f"--- {step_id} exit {done.returncode}\n{done.stdout}{done.stderr}")
        outputs = read_outputs(output_file.name)
        context["steps"][step_id] = {"outputs": outputs}
        results.append({"id": step_id, "exit": done.returncode, "outputs": outputs})
        if done.returncode != 0:
            code = done.returncode
            break
    action_outputs = {name: evaluate(spec["value"], context)
                      for name, spec in action.get("outputs", {}).items()}
    print(json.dumps({"exit": code, "steps": results, "outputs": action_outputs,
                      "log": "\n".join(log)}))


if __name__ == "__main__":
    main()
