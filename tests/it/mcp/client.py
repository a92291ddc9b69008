"""A real MCP client (the Python SDK from PyPI) driving `swarm mcp` for the tests.

Usage: client.py SPEC.json. The spec names the server command, its arguments and working
directory, and the tool calls to make in order; each result is printed as one JSON object on
stdout: the tools listed, then each call's error flag, text and progress notifications.
"""

import asyncio
import json
import os
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


async def main(spec):
    server = StdioServerParameters(
        command=spec["command"],
        args=spec["args"],
        cwd=spec.get("cwd"),
        env=dict(os.environ),
    )
    out = {"server": None, "tools": [], "calls": []}
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            out["server"] = {"name": init.server_info.name, "version": init.server_info.version}
            listed = await session.list_tools()
            out["tools"] = sorted(tool.name for tool in listed.tools)
            for call in spec["calls"]:
                progress = []

                async def on_progress(value, total, message, progress=progress):
                    progress.append({"progress": value, "total": total, "message": message})

                result = await session.call_tool(
                    call["name"], call.get("arguments", {}), progress_callback=on_progress
                )
                text = "".join(c.text for c in result.content if getattr(c, "type", "") == "text")
                out["calls"].append(
                    {
                        "name": call["name"],
                        "is_error": bool(result.is_error),
                        "text": text,
                        "progress": progress,
                    }
                )
    print(json.dumps(out))


if __name__ == "__main__":
    with open(sys.argv[1]) as f:
        asyncio.run(main(json.load(f)))
