#!/usr/bin/env python3
"""Makes an install tree (as `make stage-tree` lays it out) self-contained and relocatable.

    bundle.py TREE --mode portable|system --generate-manual TOOL [--checkouts DIR]

The tree holds bin/authbridge (C: it answers tokens from the agent and hands every other command
line to lib/authbridge/authbridge-host — serve, agent, plugin-runner — or to
lib/authbridge/authbridge-cli, the command-line tool), lib/authbridge/*.so (the helper libraries)
and lib/authbridge/plugins/*.so, straight from the build: their RUNPATH names the
toolchain (/opt/swift/usr/lib/swift/linux) and $ORIGIN. This script

1. resolves every shared library they need (`ldd`, which follows those RUNPATHs),
2. copies into lib/authbridge/ every library that comes from the Swift toolchain — always —
   and, in `portable` mode, every other library outside the base every glibc Linux has
   (the manylinux set: glibc, libstdc++, libgcc_s); in `system` mode those stay the package
   manager's business (the .deb's Depends),
3. strips symbols and debug information, then sets each file's RUNPATH to a path relative to $ORIGIN
   (patchelf), so that nothing names the toolchain or the build folder,
4. generates the man page (swift-argument-parser's generate-manual) and the bash, zsh and fish
   completions from the relocated host, and writes the license notices of what was bundled,
5. normalises modes (folders and executables — bin/*, lib/authbridge/authbridge-{host,cli} — 0755, other files 0644) and, with
   SOURCE_DATE_EPOCH set, every mtime — so that packing the tree is reproducible.

It checks its own result: every ELF file's RUNPATH is $ORIGIN-relative and every library it
needs is in the tree or in the allowed base, or the script fails.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

#: Libraries every glibc-based Linux has: never bundled (PEP 600's manylinux base, the part we use).
BASE = {
    "linux-vdso.so.1", "ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "libc.so.6", "libm.so.6", "libdl.so.2",
    "librt.so.1", "libpthread.so.0", "libresolv.so.2", "libutil.so.1", "libnsl.so.1", "libstdc++.so.6",
    "libgcc_s.so.1",
}

LIB = Path("lib/authbridge")
PLUGINS = LIB / "plugins"


def run(argv: list[str | Path], **kwargs) -> str:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise SystemExit(f"bundle.py: {' '.join(map(str, argv))} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def is_elf(path: Path) -> bool:
    with path.open("rb") as file:
        return file.read(4) == b"\x7fELF"


def elf_files(tree: Path) -> list[Path]:
    return sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink() and is_elf(p))


def dynamic(path: Path) -> tuple[list[str], str]:
    """(NEEDED sonames, RUNPATH or RPATH) of an ELF file."""
    text = run(["readelf", "-d", "-W", path])
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", text)
    runpath = re.search(r"\((?:RUNPATH|RPATH)\)\s+Library (?:runpath|rpath): \[([^\]]*)\]", text)
    return needed, runpath.group(1) if runpath else ""


def resolve(path: Path) -> dict[str, Path]:
    """soname → file, for the whole closure of `path` (ldd follows RUNPATHs as the loader does)."""
    found: dict[str, Path] = {}
    for line in run(["ldd", path]).splitlines():
        match = re.match(r"\s*(\S+) => (\S+) \(0x", line)
        if match:
            found[match.group(1)] = Path(match.group(2))
        elif "=> not found" in line:
            raise SystemExit(f"bundle.py: {path} needs {line.split()[0]}, which is not installed")
    return found


def toolchain_folders(files: list[Path], tree: Path, build: Path | None) -> set[Path]:
    """The absolute RUNPATH entries of the build's files that are not the build folder: the Swift
    toolchain's runtime folders."""
    folders: set[Path] = set()
    for path in files:
        for entry in dynamic(path)[1].split(":"):
            if entry and not entry.startswith("$ORIGIN"):
                folder = Path(entry).resolve()
                if build is None or not str(folder).startswith(str(build)):
                    folders.add(folder)
    return folders


def sections(path: Path) -> dict[str, tuple[int, int]]:
    """Section name → (file offset, size)."""
    found = {}
    for line in run(["readelf", "-S", "-W", path]).splitlines():
        match = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+\S+\s+[0-9a-f]+\s+([0-9a-f]+)\s+([0-9a-f]+)", line)
        if match:
            found[match.group(1)] = (int(match.group(2), 16), int(match.group(3), 16))
    return found


def make_reproducible(path: Path) -> None:
    """Clears what differs between two builds of the same source in different folders:
    swiftc's per-object module hashes (.swift_modhash, compile-time bookkeeping for skipping
    unchanged code generation, never read at run time) and the GNU build ID, which the linker
    computed over debug information that names the build folder. The build ID becomes a hash of
    the shipped file itself, so it still identifies the binary."""
    found = sections(path)
    data = bytearray(path.read_bytes())
    if ".swift_modhash" in found:
        offset, size = found[".swift_modhash"]
        data[offset:offset + size] = bytes(size)
    if ".note.gnu.build-id" in found:
        offset, size = found[".note.gnu.build-id"]
        name_size, desc_size = int.from_bytes(data[offset:offset + 4], "little"), int.from_bytes(data[offset + 4:offset + 8], "little")
        desc = offset + 12 + (name_size + 3) // 4 * 4
        if desc + desc_size <= offset + size:
            data[desc:desc + desc_size] = bytes(desc_size)
            data[desc:desc + desc_size] = hashlib.sha1(data).digest()[:desc_size].ljust(desc_size, b"\0")
    path.write_bytes(data)


def target_runpath(tree: Path, path: Path) -> str:
    relative = os.path.relpath(tree / LIB, path.parent)
    return "$ORIGIN" if relative == "." else f"$ORIGIN/{relative}"


def debian_package_of(path: Path) -> str | None:
    done = subprocess.run(["dpkg", "-S", str(path)], capture_output=True, text=True)
    if done.returncode != 0:
        real = path.resolve()
        done = subprocess.run(["dpkg", "-S", str(real)], capture_output=True, text=True)
    return done.stdout.split(":", 1)[0] if done.returncode == 0 else None


def write_notices(tree: Path, doc: Path, runtime: dict[str, Path], grafted: dict[str, Path],
                  checkouts: Path | None, repo: Path) -> None:
    """LICENSE (ours) and THIRD-PARTY-NOTICES: the Swift runtime, the Swift packages linked into the
    binaries, and the Debian copyright file of every grafted system library."""
    doc.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(repo / "LICENSE", doc / "LICENSE")
    parts = ["Third-party software in this distribution of AuthBridge, and its licenses.\n"]
    if runtime:
        license = next((folder.parents[2] / "share" / "swift" / "LICENSE.txt"
                        for folder in {p.parent for p in runtime.values()}
                        if (folder.parents[2] / "share" / "swift" / "LICENSE.txt").exists()), None)
        parts.append("== The Swift runtime libraries (lib/authbridge: " + ", ".join(sorted(runtime)) + ")\n")
        parts.append(license.read_text() if license else "Apache License 2.0 with Runtime Library Exception, https://swift.org/LICENSE.txt\n")
    if checkouts and checkouts.is_dir():
        for package in sorted(p for p in checkouts.iterdir() if p.is_dir()):
            for name in ("LICENSE", "LICENSE.txt", "NOTICE", "NOTICE.txt", "NOTICES.txt"):
                if (package / name).is_file():
                    parts.append(f"== {package.name} ({name}), linked into the host or its helper libraries\n")
                    parts.append((package / name).read_text(errors="replace"))
    seen: set[str] = set()
    for soname, source in sorted(grafted.items()):
        package = debian_package_of(source)
        copyright_file = Path("/usr/share/doc") / (package or "") / "copyright"
        if package and package not in seen and copyright_file.is_file():
            seen.add(package)
            parts.append(f"== {soname} (Debian package {package})\n")
            parts.append(copyright_file.read_text(errors="replace"))
    (doc / "THIRD-PARTY-NOTICES").write_text("\n".join(parts))


def generate_docs(tree: Path, mode: str, tool: Path, epoch: int) -> None:
    host = tree / "bin" / "authbridge"
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tree), "LANG": "C.UTF-8"}
    man = tree / "share" / "man" / "man1"
    man.mkdir(parents=True, exist_ok=True)
    date = subprocess.run(["date", "-u", "-d", f"@{epoch}", "+%Y-%m-%d"], capture_output=True, text=True).stdout.strip()
    scratch = tree / ".man"
    scratch.mkdir()
    run([tool, host, "--date", date, "--authors", "AuthBridge maintainers", "--output-directory", scratch], env=env)
    # mdoc wants no blank lines (paragraph breaks are .Pp; groff warns otherwise).
    page = re.sub(rb"\n\n+", b"\n.Pp\n", (scratch / "authbridge.1").read_bytes())
    shutil.rmtree(scratch)
    # gzip -9n: no name, no time stamp in the header.
    with open(man / "authbridge.1.gz", "wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as compressed:
        compressed.write(page)
    zsh_folder = "vendor-completions" if mode == "system" else "site-functions"
    for shell, target in (("bash", Path("share/bash-completion/completions/authbridge")),
                          ("zsh", Path(f"share/zsh/{zsh_folder}/_authbridge")),
                          ("fish", Path("share/fish/vendor_completions.d/authbridge.fish"))):
        script = run([host, "--generate-completion-script", shell], env=env)
        if script.startswith("#!"):   # sourced by the shell, never run: no interpreter line
            script = script.split("\n", 1)[1]
        (tree / target).parent.mkdir(parents=True, exist_ok=True)
        (tree / target).write_text(script)


def normalise(tree: Path, epoch: int | None) -> None:
    for path in sorted(tree.rglob("*"), reverse=True):
        if path.is_symlink():
            continue
        if path.is_dir():
            path.chmod(0o755)
        elif path.parent.name == "bin" or path.relative_to(tree) in (LIB / "authbridge-cli", LIB / "authbridge-host"):
            path.chmod(0o755)
        else:
            path.chmod(0o644)
        if epoch is not None:
            os.utime(path, (epoch, epoch), follow_symlinks=False)
    tree.chmod(0o755)
    if epoch is not None:
        os.utime(tree, (epoch, epoch))


def check(tree: Path, mode: str) -> None:
    """Every RUNPATH $ORIGIN-relative; every NEEDED in the tree or the base (portable), or at
    least not in a toolchain (system)."""
    present = {p.name for p in (tree / LIB).iterdir() if p.is_file()}
    problems = []
    for path in elf_files(tree):
        needed, runpath = dynamic(path)
        entries = [e for e in runpath.split(":") if e]
        if not entries or any(not e.startswith("$ORIGIN") for e in entries):
            problems.append(f"{path.relative_to(tree)}: RUNPATH {runpath!r} is not $ORIGIN-relative")
        for soname in needed:
            if soname in present or soname in BASE:
                continue
            if mode == "portable" or soname.startswith("libswift") or soname.startswith("libFoundation"):
                problems.append(f"{path.relative_to(tree)} needs {soname}, which is not in the tree")
    if problems:
        raise SystemExit("bundle.py: the tree is not self-contained:\n  " + "\n  ".join(problems))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("tree", type=Path)
    parser.add_argument("--mode", choices=("portable", "system"), required=True)
    parser.add_argument("--generate-manual", type=Path, required=True, help="swift-argument-parser's tool")
    parser.add_argument("--build", type=Path, help="the build folder (its paths never count as the toolchain)")
    parser.add_argument("--checkouts", type=Path, help="SwiftPM's checkouts, for the license notices")
    args = parser.parse_args()
    tree: Path = args.tree.resolve()
    repo = Path(__file__).resolve().parents[2]
    epoch = int(os.environ["SOURCE_DATE_EPOCH"]) if os.environ.get("SOURCE_DATE_EPOCH") else None

    ours = elf_files(tree)
    toolchain = toolchain_folders(ours, tree, args.build.resolve() if args.build else None)
    runtime: dict[str, Path] = {}
    grafted: dict[str, Path] = {}
    for path in ours:
        for soname, source in resolve(path).items():
            if soname in BASE or source.resolve().is_relative_to(tree):
                continue
            if any(source.resolve().is_relative_to(folder) for folder in toolchain):
                runtime[soname] = source
            elif args.mode == "portable":
                grafted[soname] = source
    for soname, source in {**runtime, **grafted}.items():
        target = tree / LIB / soname
        shutil.copyfile(source.resolve(), target)
        target.chmod(0o644)

    for path in elf_files(tree):
        # Symbols and debug information out: sizes, and the build's paths.
        run(["strip", "--strip-unneeded", "--remove-section=.comment", path])
        run(["patchelf", "--set-rpath", target_runpath(tree, path), path])
        make_reproducible(path)

    generate_docs(tree, args.mode, args.generate_manual, epoch or 0)
    doc = tree / "share" / "doc" / "authbridge"
    write_notices(tree, doc, runtime, grafted, args.checkouts, repo)
    check(tree, args.mode)
    normalise(tree, epoch)
    print(f"bundled into {tree}: {len(runtime)} Swift runtime libraries"
          + (f", {len(grafted)} system libraries ({', '.join(sorted(grafted))})" if grafted else ""))


if __name__ == "__main__":
    sys.exit(main())
