#!/usr/bin/env python3
"""Start-up of the `authbridge` command each distribution installs: the Python wheel's (in a fresh
venv) next to the tarball's bin/authbridge, the same commands in turn.

    startup.py --dist dist/ [--runs 40]

git and kubectl start the command on every credential they need, so what stands between them and
the host counts. Two commands: `--version` (start-up alone) and `token corp` (issue 27's: the
command-line tool, the configuration, the vault and the oidc plugin, for a profile whose provider
refuses the connection at once, on a loopback port nothing listens on). Each run is the whole
process, from fork to exit; the two commands alternate (A B A B …) after a warm-up of each, so
drift of a busy machine hits both alike. It prints min / median / max in milliseconds and the
ratio of the medians (wheel / tarball; issue 27's goal: at most 1.2).
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
import venv
from pathlib import Path


def one(path: Path, pattern: str) -> Path:
    [found] = sorted(path.glob(pattern))
    return found


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def timed(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return (time.perf_counter() - start) * 1000


def compare(commands: dict[str, list[str]], env: dict[str, str], runs: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {name: [] for name in commands}
    for argv in commands.values():
        timed(argv, env)   # warm-up: the page cache, the vault's key file
    for _ in range(runs):
        for name, argv in commands.items():
            times[name].append(timed(argv, env))
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dist", type=Path, default=Path("dist"))
    parser.add_argument("--runs", type=int, default=40)
    args = parser.parse_args()
    dist = args.dist.resolve()
    with tempfile.TemporaryDirectory(prefix="authbridge-startup-") as scratch:
        work = Path(scratch)
        environment = work / "venv"
        venv.EnvBuilder(with_pip=True).create(environment)
        subprocess.run([environment / "bin" / "python", "-m", "pip", "install", "-q", "--no-index",
                        "--disable-pip-version-check", one(dist, "authbridge-*.whl")], check=True)
        with tarfile.open(one(dist, "authbridge-*-linux-x86_64.tar.gz")) as archive:
            archive.extractall(work / "opt", filter="tar")
        tarball = one(work / "opt", "authbridge-*") / "bin" / "authbridge"
        wheel = environment / "bin" / "authbridge"

        home = work / "home"
        config = home / ".config" / "authbridge"
        config.mkdir(parents=True)
        issuer = f"http://127.0.0.1:{closed_port()}/o"
        (config / "config.json").write_text(json.dumps(
            {"profiles": {"corp": {"plugin": "oidc", "settings": {"issuer": issuer, "clientId": "bench"}}}}))
        env = {"HOME": str(home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8",
               "XDG_CONFIG_HOME": str(home / ".config"), "XDG_DATA_HOME": str(home / ".local" / "share")}

        print(f"Start-up of the installed `authbridge` command ({args.runs} runs each, in turn; ms, whole process):")
        print(f"{'command':<22} {'install':<26} {'min':>7} {'median':>7} {'max':>7}   wheel/tarball (medians)")
        for label, extra in (("--version", ["--version"]), ("token corp", ["token", "corp"])):
            times = compare({"wheel": [str(wheel), *extra], "tarball": [str(tarball), *extra]}, env, args.runs)
            medians = {name: statistics.median(values) for name, values in times.items()}
            for name, what in (("wheel", "venv bin/authbridge (wheel)"), ("tarball", "bin/authbridge (tarball)")):
                values = times[name]
                ratio = f"   {medians['wheel'] / medians['tarball']:.2f}" if name == "wheel" else ""
                print(f"{label:<22} {what:<26} {min(values):7.1f} {medians[name]:7.1f} {max(values):7.1f}{ratio}")


if __name__ == "__main__":
    sys.exit(main())
