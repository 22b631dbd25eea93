"""Pairs of runs compared through iohr's MCP tool `reliability_compare_runs`, with the
official MCP Python SDK (PyPI `mcp` 2.x), over both transports (the sessions of
client.py).

Driven by tests/tests/compare_kinds.rs: one argument, a JSON object
    {"url": MCP URL, "iohr": path, "server": controller URL, "token": full token,
     "pairs": {NAME: [BEFORE, AFTER], ...}}
It prints {"http": {NAME: OUTCOME}, "stdio": {NAME: OUTCOME}}, where an OUTCOME is
{"is_error", "verdict", "exit_code", "lines"} for a comparison and {"is_error", "code",
"message"} for a refusal.
"""

import asyncio
import json
import sys

from client import call, session


async def compared(cfg):
    seen = {}
    async with session(cfg, cfg["token"]) as s:
        for name, (before, after) in cfg["pairs"].items():
            got = await call(s, "reliability_compare_runs", {"before": before, "after": after})
            answer = got.get("structured") or {}
            if got.get("is_error"):
                error = answer.get("error", {})
                seen[name] = {"is_error": True, "code": error.get("code"),
                              "message": error.get("message")}
            else:
                seen[name] = {"is_error": False, "verdict": answer.get("verdict"),
                              "exit_code": answer.get("exit_code"),
                              "lines": answer.get("differences", [])}
    return seen


async def main(cfg):
    seen = {}
    for transport in ["http", "stdio"]:
        seen[transport] = await compared({**cfg, "transport": transport})
    print(json.dumps(seen))


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
