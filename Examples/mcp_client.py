#!/usr/bin/env python3
"""An MCP client signed in by the server's URL alone: it lists the server's tools and calls one.

    python3 Examples/mcp_client.py https://mcp.example.com/mcp [--tool echo] [--arg message=hello]...

AuthBridge does the OAuth: from the URL the host finds the server's authorization server (RFC
9728 protected resource metadata, RFC 8414), registers itself there (RFC 7591), and the sign-in
page opens in your browser (`$BROWSER`, else the desktop's). The session is kept (encrypted) for
the next run, under the profile named after the host ("mcp.example.com"). A tool that needs more
scopes (a 403 `insufficient_scope`) asks you for them once, then is called again. Needs the `mcp`
SDK (`pip install mcp`), which brings httpx2.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import TextContent

try:
    import authbridge
except ImportError:  # running from a checkout without `pip install ./clients/python`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "clients" / "python"))
    import authbridge


async def main(url: str, tool: str, arguments: dict[str, str]) -> None:
    async with authbridge.connect() as bridge:
        auth = await bridge.auth_for_url(url, library="httpx2")   # signs in unless a session is kept
        async with httpx2.AsyncClient(auth=auth, timeout=30) as http, \
                Client(streamable_http_client(url, http_client=http)) as mcp:
            tools = await mcp.list_tools()
            print("tools:", ", ".join(sorted(t.name for t in tools.tools)))
            result = await mcp.call_tool(tool, arguments)
            for part in result.content:
                print(f"{tool}:", part.text if isinstance(part, TextContent) else f"({part.type})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the MCP server's endpoint (streamable HTTP)")
    parser.add_argument("--tool", default="echo", help="the tool to call (default: echo)")
    parser.add_argument("--arg", action="append", default=[], metavar="NAME=VALUE", help="an argument of the tool")
    options = parser.parse_args()
    asyncio.run(main(options.url, options.tool, dict(arg.split("=", 1) for arg in options.arg)))
