"""An MCP client of iohr's tools, written with the official MCP Python SDK (PyPI `mcp` 2.x).

Driven by tests/tests/mcp.rs: one argument, a JSON object
    {"transport": "http" | "stdio", "url": MCP URL (http), "iohr": path (stdio),
     "server": controller URL (stdio), "token": full token, "read_token": read-only token,
     "target": the sample target's URL}
It lists the tools, starts and waits for runs, compares two, and provokes a scope refusal
and bad inputs; it prints one JSON object of what it saw for the Rust test to assert on.
"""

import asyncio
import json
import sys
from contextlib import asynccontextmanager

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError


@asynccontextmanager
async def session(cfg, token):
    """A ClientSession over the configured transport, authenticated with `token`."""
    if cfg["transport"] == "http":
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with httpx2.AsyncClient(headers=headers, timeout=120) as http:
            async with streamable_http_client(cfg["url"], http_client=http) as (read, write):
                async with ClientSession(read, write) as s:
                    await s.initialize()
                    yield s
    else:
        params = StdioServerParameters(
            command=cfg["iohr"],
            args=["--server", cfg["server"], "--token", token, "mcp"],
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write) as s:
                await s.initialize()
                yield s


def outcome(result):
    """A tool result as JSON: its structured content and whether it is an error."""
    text = " ".join(c.text for c in result.content if getattr(c, "type", None) == "text")
    return {"is_error": bool(result.is_error), "structured": result.structured_content,
            "text": text}


async def call(s, name, args, **kw):
    """A tool call; a JSON-RPC error (an input the schema refuses) is reported, not raised."""
    try:
        return outcome(await s.call_tool(name, args, **kw))
    except MCPError as e:
        return {"rpc_error": {"code": e.error.code, "message": e.error.message}}


async def main(cfg):
    seen = {}
    target = cfg["target"]
    checks = {"kind": "checks", "environment": "staging", "target": target,
              "spec": {"checks": [{"path": "/"}]}, "change": "mcp-test"}
    load = {"kind": "load", "environment": "staging", "target": target,
            "spec": {"operations": [{"path": "/"}], "model": "open", "rate": 20,
                     "duration": "3s", "connections": 2}}
    async with session(cfg, cfg["token"]) as s:
        tools = (await s.list_tools()).tools
        seen["tools"] = sorted(t.name for t in tools)
        by_name = {t.name: t for t in tools}
        start = by_name["reliability_start_run"]
        seen["start_input_required"] = sorted(start.input_schema.get("required", []))
        seen["with_output_schema"] = sorted(t.name for t in tools if t.output_schema)

        first = await call(s, "reliability_start_run", checks)
        second = await call(s, "reliability_start_run", checks)
        seen["start"] = first
        ids = [first["structured"]["id"], second["structured"]["id"]]
        waits = [await call(s, "reliability_wait_run", {"id": i, "timeout_s": 60}) for i in ids]
        seen["wait"] = [{"is_error": w["is_error"], "timed_out": w["structured"]["timed_out"],
                         "status": w["structured"]["run"]["status"]} for w in waits]
        got = await call(s, "reliability_get_run", {"id": ids[0]})
        seen["get_status"] = got["structured"]["status"]

        compared = await call(s, "reliability_compare_runs", {"before": ids[0], "after": ids[1]})
        c = compared["structured"]
        seen["compare"] = {"is_error": compared["is_error"], "verdict": c["verdict"],
                           "exit_code": c["exit_code"], "differences": c["differences"]}

        # A load run waited for a second, then to its end: progress while it runs.
        run = await call(s, "reliability_start_run", load)
        load_id = run["structured"]["id"]
        progress = []

        async def on_progress(value, total, message):
            progress.append({"progress": value, "total": total, "message": message})

        short = await call(s, "reliability_wait_run", {"id": load_id, "timeout_s": 1},
                           progress_callback=on_progress)
        seen["short_wait"] = {"timed_out": short["structured"]["timed_out"],
                              "status": short["structured"]["run"]["status"]}
        full = await call(s, "reliability_wait_run", {"id": load_id, "timeout_s": 60},
                          progress_callback=on_progress)
        seen["full_wait"] = {"timed_out": full["structured"]["timed_out"],
                             "status": full["structured"]["run"]["status"]}
        seen["progress"] = progress
        refused = await call(s, "reliability_compare_runs", {"before": ids[0], "after": load_id})
        seen["compare_refused"] = refused

        runs = await call(s, "reliability_list_runs", {"limit": 10})
        seen["list_runs"] = len(runs["structured"]["runs"])
        agents = await call(s, "reliability_list_agents", {})
        seen["agents"] = [a["name"] for a in agents["structured"]["agents"]]
        findings = await call(s, "reliability_list_findings", {"status": "open"})
        seen["findings_is_error"] = findings["is_error"]
        scenarios = await call(s, "reliability_list_scenarios", {})
        seen["scenarios"] = sorted(x["id"] for x in scenarios["structured"]["scenarios"])

        # Bad inputs: refused by the tool's schema (JSON-RPC), by the tool, by REST.
        seen["missing_field"] = await call(s, "reliability_start_run", {"kind": "checks"})
        seen["unknown_field"] = await call(s, "reliability_get_run", {"id": ids[0], "x": 1})
        seen["long_wait"] = await call(s, "reliability_wait_run",
                                       {"id": ids[0], "timeout_s": 100000})
        seen["unknown_kind"] = await call(s, "reliability_start_run", {**checks, "kind": "nope"})
        seen["unknown_run"] = await call(s, "reliability_get_run", {"id": "no-such-run"})
        # The audit is a scope of its own: a run+read token is refused it.
        seen["audit_refused"] = await call(s, "reliability_list_audit", {"action": "run.start"})

    async with session(cfg, cfg["read_token"]) as s:
        seen["read_only_start"] = await call(s, "reliability_start_run", checks)
        seen["read_only_list"] = (await call(s, "reliability_list_runs", {}))["is_error"]
    if cfg["transport"] == "http":
        try:
            async with session(cfg, None) as s:
                seen["no_token"] = await call(s, "reliability_list_runs", {})
        except Exception as e:  # noqa: BLE001 - what the SDK raises on a 401 is its business
            seen["no_token"] = {"refused": repr(e)}
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
