"""The Python test kit: what the contract suite (Tests/contract), the Python client's tests
(clients/python/tests), the distribution tests (Tests/dist), the fuzzer and the frame tools share,
written once.

    sys.path.insert(0, str(REPO / "Tests" / "support"))
    from authbridge_testkit import Host, host_command, spec, isolated_environment, copy_plugins

Modules:
  paths       where things are: the repository, the host under test, its build folder (from
              AUTHBRIDGE_BIN and AUTHBRIDGE_BUILD_DIR, the test targets' variables; Makefile header)
  spec        validators built from bridge-spec/openrpc.json, and the checks of one frame each way
  isolation   the isolation recipe: a host's own XDG folders (the runtime one too) and HOME, no
              session bus, no vault secret or agent socket from outside, private 0644 copies of
              plugin files in a 0755 folder
  host        `Host`, one `authbridge serve` child whose every frame is validated as it arrives
  agent       `Agent`, one `authbridge agent`, and `AgentClient`, one connection to it validated the same
              way (host.FrameLink); `NodeBridge`, a Node client driven through bridge_repl.mjs;
              `frame_recorder`, the Python client's frames for recorded.validate
  leak_scan   no code or token in a host's log or in a frame that does not carry one by contract
  dot_auth    django-oauth-toolkit (Tests/support/dot_server.py), the suites' authorization server
  openid_servers  what the real OpenID providers of the scenarios offer (`OpenIDServer`), their users
              and clients, and `TokenEndpointRecorder`, a relay that sees what reaches a token endpoint
  glewlwyd    glewlwyd (Debian's package), set up through its admin API in a temporary folder
  idpyoidc_op an OpenID provider of our own on idpyoidc (Tests/support/idpyoidc_server.py)
  mcp_server  an MCP server of our own (mcp SDK) that is its own OAuth authorization server
  tls         a self-signed certificate for https test servers
  http_answer an answer written on an http.server handler (status, headers, length, body)
  token_gated servers that let in only a token DOT accepts: git's smart HTTP (git http-backend),
              a Kubernetes API server's discovery (https)
"""

from .host import TIMEOUT, Host, HostError, host_command, session_records
from .isolation import copy_plugins, isolated_environment
from .paths import BUILD_DIR, HOST_BIN, PLUGINS_DIR, REPO, SPEC_PATH, SUPPORT_DIR, TEST_PLUGINS_DIR
from .spec import Spec, error_code, frame_problems, id_key, schema_problem, schema_problems, sent_frame_problems, short, spec

__all__ = [
    "TIMEOUT", "Host", "HostError", "host_command", "session_records", "copy_plugins", "isolated_environment",
    "BUILD_DIR", "HOST_BIN", "PLUGINS_DIR", "REPO", "SPEC_PATH", "SUPPORT_DIR", "TEST_PLUGINS_DIR", "Spec", "error_code",
    "frame_problems", "id_key", "schema_problem", "schema_problems", "sent_frame_problems", "short", "spec",
]
