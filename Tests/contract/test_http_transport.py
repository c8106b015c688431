"""The HTTP transport as the host process uses it (libAuthBridgeHTTP.so over libcurl): waiting on a
server that never answers costs no CPU, and a request creates nothing outside the host's folders.

The transport it replaced (URLSession) burned ~80 % of a core for the whole wait and created
$XDG_DATA_HOME/bin (0755) on its first request.
"""

from __future__ import annotations

import os
import socket
import threading
import time

from conftest import error_code


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of the whole process so far (/proc/PID/stat, all threads)."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class SilentServer:
    """Accepts connections on 127.0.0.1 and never answers; counts them."""

    def __init__(self) -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.port = self.socket.getsockname()[1]
        self.held: list[socket.socket] = []
        self.accepted = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            self.held.append(connection)
            self.accepted.set()

    def close(self) -> None:
        for connection in self.held:
            connection.close()
        self.socket.close()


def test_waiting_on_a_silent_server_costs_no_cpu_and_creates_no_folders(start_host, oidc_plugin_dir):
    server = SilentServer()
    try:
        host = start_host([oidc_plugin_dir])
        data_home = host.workdir / "xdg-data"
        home = host.workdir / "home"
        before = {p.relative_to(host.workdir) for p in host.workdir.rglob("*")}
        # Discovery against the silent issuer: the host's first HTTP request, which waits.
        request = host.send_request("configureProfile", {"name": "silent", "plugin": "oidc", "settings": {
            "issuer": f"http://127.0.0.1:{server.port}/o", "clientId": "c"}})
        assert server.accepted.wait(15), "the host never connected"
        start = cpu_seconds(host.proc.pid)
        time.sleep(2.0)   # the measurement window, not a synchronisation
        spent = cpu_seconds(host.proc.pid) - start
        assert spent < 0.3, f"the host used {spent:.2f} s of CPU in 2 s of waiting on the server"
        host.notify("$/cancelRequest", {"id": request})
        assert error_code(host.wait_response(request)) == -32800
        created = {p.relative_to(host.workdir) for p in host.workdir.rglob("*")} - before
        outside = [str(p) for p in created
                   if not (str(p).startswith("xdg-data/authbridge") or p.name == "stderr.log")]
        assert outside == [], f"created outside the host's own folders: {outside}"
        assert not (data_home / "bin").exists() and not (home / ".local").exists()
    finally:
        server.close()
