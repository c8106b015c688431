"""Python client for AuthBridge, the OAuth token broker (`authbridge serve` as a child process).

    import authbridge

    async with authbridge.connect(plugins=["/usr/lib/authbridge/plugins"]) as bridge:
        status = await bridge.check_sign_in_status("corp")
        if not status.signed_in:
            await bridge.request_oauth_tokens("corp", flow="browser",
                                              on_progress=lambda e: e.stage == "openUrl" and print(e.url))
        answer = await bridge.fetch("corp", "https://api.example.com/me")

Modules: `transport` (the process and its pipes), `protocol` (JSON-RPC: ids, cancellation,
events), `client` (the typed asyncio API), `errors`, `types`, `sync` (a blocking wrapper).
No third-party dependencies; Python 3.10+. Imported only when asked for, as they need their
library: `authbridge.requests`, `authbridge.httpx` and `authbridge.httpx2` (the `mcp` SDK's),
`auth=` objects for those HTTP clients.
"""

__version__ = "0.1.0"

from .client import PROTOCOL_VERSION, AuthBridge, connect, open_in_browser, profile_name_for_url  # noqa: E402
from .errors import *  # noqa: E402,F401,F403
from .errors import __all__ as _errors_all  # noqa: E402
from .protocol import EventStream  # noqa: E402
from .types import *  # noqa: E402,F401,F403
from .types import __all__ as _types_all  # noqa: E402

__all__ = ["__version__", "PROTOCOL_VERSION", "AuthBridge", "connect", "open_in_browser", "profile_name_for_url", "EventStream", *_errors_all, *_types_all]

from . import sync  # noqa: E402,F401  (authbridge.sync.connect after a plain `import authbridge`)
