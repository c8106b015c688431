#!/usr/bin/env python3
"""Packs the bundled trees (scripts/dist/bundle.py) into the four distributions and SHA256SUMS.

    package.py --version V --portable TREE --system TREE --out dist/ [--only NAME...]

- authbridge-V-linux-x86_64.tar.gz   the portable tree under authbridge-V-linux-x86_64/
- authbridge-V-py3-none-TAG.whl      the Python client, and the portable tree installed beside it
                                     as the wheel's data: bin/authbridge (and git-credential-authbridge)
                                     are the tree's binary itself, lib/authbridge/ next to them in the
                                     environment; TAG is what `auditwheel show` finds the binaries
                                     need (the lowest glibc, manylinux)
- authbridge_V_amd64.deb             the system tree under /usr, Depends from dpkg-shlibdeps
- authbridge-client-V.tgz            `npm pack` of the Node client with the portable tree in
                                     host/linux-x64/, whose bin/authbridge is the package's `bin`
- SHA256SUMS                         for the four, as sha256sum -c reads it

Everything is reproducible from the same trees: entries sorted, owners 0, modes normalised,
times from SOURCE_DATE_EPOCH (the commit's), compressors without names or time stamps.
It prints each file's compressed size and the installed size of its tree.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import hashlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH") or 0)


def run(argv: list[str | Path], **kwargs) -> str:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, **kwargs)
    if done.returncode != 0:
        raise SystemExit(f"package.py: {' '.join(map(str, argv))} failed:\n{done.stdout}{done.stderr}")
    return done.stdout


def tree_files(tree: Path) -> list[Path]:
    """The regular files of a tree (not its symlinks, e.g. bin/git-credential-authbridge)."""
    return sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_symlink())


def tree_size(tree: Path) -> int:
    return sum(p.stat().st_size for p in tree_files(tree))


def executable(path: Path) -> bool:
    return bool(path.stat().st_mode & 0o111)


# ── Tarball ──────────────────────────────────────────────────────────────────

def tarball(tree: Path, out: Path, version: str) -> Path:
    top = f"authbridge-{version}-linux-x86_64"
    target = out / f"{top}.tar.gz"

    def entry(path: Path, name: str) -> tarfile.TarInfo:
        info = tarfile.TarInfo(name)
        info.mtime = EPOCH
        info.uid = info.gid = 0
        info.uname = info.gname = "root"
        if path.is_symlink():
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, os.readlink(path), 0o777
        elif path.is_dir():
            info.type, info.mode = tarfile.DIRTYPE, 0o755
        else:
            info.size = path.stat().st_size
            info.mode = 0o755 if executable(path) else 0o644
        return info

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as archive:
        archive.addfile(entry(tree, top))
        for path in sorted(tree.rglob("*")):
            info = entry(path, f"{top}/{path.relative_to(tree)}")
            if path.is_symlink() or path.is_dir():
                archive.addfile(info)
            else:
                with path.open("rb") as file:
                    archive.addfile(info, file)
    with target.open("wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as compressed:
        compressed.write(buffer.getvalue())
    return target


# ── Python wheel ─────────────────────────────────────────────────────────────

def pyproject() -> dict:
    import tomllib
    return tomllib.loads((REPO / "clients" / "python" / "pyproject.toml").read_text())["project"]


def wheel_tag(wheel: Path) -> str:
    """The platform tag `auditwheel show` says the wheel's binaries are consistent with."""
    report = run([Path(sys.executable).parent / "auditwheel", "show", wheel])
    tags = re.findall(r'"((?:manylinux|musllinux)_\d+_\d+_\w+)"', report)
    if not tags:
        raise SystemExit(f"package.py: auditwheel finds no manylinux tag for the wheel:\n{report}")
    return tags[0]


def write_wheel(target: Path, files: dict[str, tuple[bytes, bool]], dist_info: str, tag: str,
                metadata: str) -> None:
    wheel_text = f"Wheel-Version: 1.0\nGenerator: authbridge scripts/dist/package.py\nRoot-Is-Purelib: false\nTag: {tag}\n"
    contents = dict(files)
    contents[f"{dist_info}/METADATA"] = (metadata.encode(), False)
    contents[f"{dist_info}/WHEEL"] = (wheel_text.encode(), False)
    contents[f"{dist_info}/licenses/LICENSE"] = ((REPO / "LICENSE").read_bytes(), False)
    record_lines = []
    for name, (data, _) in sorted(contents.items()):
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record_lines.append(f"{name},sha256={digest},{len(data)}")
    record_lines.append(f"{dist_info}/RECORD,,")
    contents[f"{dist_info}/RECORD"] = (("\n".join(record_lines) + "\n").encode(), False)
    # dist-info last, as the wheel spec recommends; ZIP times cannot go below 1980.
    stamp = max(EPOCH, 315532800)
    date_time = tuple(__import__("time").gmtime(stamp))[:6]
    ordered = sorted(contents, key=lambda n: (n.startswith(dist_info), n))
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as archive:
        for name in ordered:
            data, is_executable = contents[name]
            info = zipfile.ZipInfo(name, date_time)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = ((0o100755 if is_executable else 0o100644) << 16)
            archive.writestr(info, data, compresslevel=9)


def wheel_data(tree: Path, data: str) -> dict[str, tuple[bytes, bool]]:
    """The portable tree as the wheel's data, so that the command is the tree's own binary (no
    Python between git or kubectl and the host: bench/startup.py).

    pip installs `.data/data/*` under the environment's root (venv, --user, --prefix, a
    distribution's /usr/local), executable bits kept: bin/authbridge next to lib/authbridge/, the
    tarball's layout, so its $ORIGIN RUNPATH, authbridge-cli and the bundled plugins are found as
    in the tarball — and, in the wheel itself, by auditwheel (which a binary in `.data/scripts`,
    one folder off, would hide its libraries from). A wheel holds no symlinks:
    bin/git-credential-authbridge (the host tells the git helper by that name) is a second copy of
    the binary. The man page and completions land in the environment's share/."""
    files = {f"{data}/data/{path.relative_to(tree)}": (path.read_bytes(), executable(path)) for path in tree_files(tree)}
    files[f"{data}/data/bin/git-credential-authbridge"] = files[f"{data}/data/bin/authbridge"]
    return files


def wheel(tree: Path, out: Path, version: str) -> Path:
    project = pyproject()
    if project["version"] != version:
        raise SystemExit(f"package.py: clients/python/pyproject.toml says {project['version']}, the host {version}")
    if sorted(p.name for p in (tree / "bin").iterdir()) != ["authbridge", "git-credential-authbridge"]:
        raise SystemExit(f"package.py: wheel_data knows bin/authbridge and its git-credential name, the tree has {sorted((tree / 'bin').iterdir())}")
    package = REPO / "clients" / "python" / "authbridge"
    files: dict[str, tuple[bytes, bool]] = {}
    for path in sorted(package.rglob("*")):
        if path.is_file() and "__pycache__" not in path.parts and path.suffix in (".py", ".typed"):
            files[f"authbridge/{path.relative_to(package)}"] = (path.read_bytes(), False)
    files |= wheel_data(tree, f"authbridge-{version}.data")
    dist_info = f"authbridge-{version}.dist-info"
    readme = (REPO / "clients" / "python" / "README.md").read_text()
    classifiers = "".join(f"Classifier: {c}\n" for c in project.get("classifiers", []))
    # The extras (`authbridge[httpx]`: what the auth objects for HTTP libraries need), as setuptools writes them.
    extras = "".join(f"Provides-Extra: {name}\n" + "".join(f'Requires-Dist: {need}; extra == "{name}"\n' for need in needs)
                     for name, needs in project.get("optional-dependencies", {}).items())
    metadata = (f"Metadata-Version: 2.4\nName: authbridge\nVersion: {version}\nSummary: {project['description']}\n"
                f"License-Expression: Apache-2.0\nLicense-File: LICENSE\nRequires-Python: {project['requires-python']}\n"
                f"{extras}{classifiers}Classifier: Operating System :: POSIX :: Linux\n"
                f"Description-Content-Type: text/markdown\n\n{readme}")
    # Tag it once provisionally, ask auditwheel what the binaries really need, then write it
    # again with that tag (the tag is inside the wheel too, in WHEEL).
    with tempfile.TemporaryDirectory() as scratch:
        provisional = Path(scratch) / f"authbridge-{version}-py3-none-linux_x86_64.whl"
        write_wheel(provisional, files, dist_info, "py3-none-linux_x86_64", metadata)
        tag = wheel_tag(provisional)
    target = out / f"authbridge-{version}-py3-none-{tag}.whl"
    write_wheel(target, files, dist_info, f"py3-none-{tag}", metadata)
    return target


# ── Debian package ───────────────────────────────────────────────────────────

DEB_COPYRIGHT = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: AuthBridge

Files: *
Copyright: 2025-{year} AuthBridge maintainers
License: Apache-2.0

Files: usr/lib/authbridge/libswift* usr/lib/authbridge/libFoundation* usr/lib/authbridge/lib_Foundation*
 usr/lib/authbridge/libdispatch.so usr/lib/authbridge/libBlocksRuntime.so
Copyright: 2014-{year} Apple Inc. and the Swift project authors
License: Apache-2.0 with Runtime Library Exception
 The Swift runtime libraries, as shipped with the Swift toolchain that built AuthBridge.
 .
 As an exception, if you use this Software to compile your source code and
 portions of this Software are embedded into the binary product as a result,
 you may redistribute such product without providing attribution as would
 otherwise be required by Sections 4(a), 4(b) and 4(d) of the License.

License: Apache-2.0
 On Debian systems, the full text of the Apache License, Version 2.0 is in
 /usr/share/common-licenses/Apache-2.0.
 .
 The notices of the Swift packages linked into the binaries (swift-argument-parser,
 swift-log, swift-crypto with BoringSSL) are in /usr/share/doc/authbridge/THIRD-PARTY-NOTICES.gz.
"""

DEB_CONTROL = """Package: authbridge
Version: {version}
Architecture: amd64
Maintainer: AuthBridge maintainers <maintainers@authbridge.invalid>
Installed-Size: {installed_kb}
Depends: {depends}
Recommends: libsecret-1-0
Suggests: gnome-keyring
Section: net
Priority: optional
Description: OAuth token broker with provider plugins, spoken to over JSON-RPC
 AuthBridge signs users in to identity providers (any OpenID Connect server,
 Salesforce, Tableau Server, MarketSharp, Duke's authorizer), keeps them signed
 in with refresh tokens kept in an encrypted vault or the desktop keyring,
 refreshes them without races and revokes them on sign-out.
 .
 The authbridge command serves JSON-RPC 2.0 on stdin/stdout for Node and
 Python frontends, and signs people in from a terminal (login, status, token,
 logout). Provider plugins are shared libraries in /usr/lib/authbridge/plugins;
 the plugin ABI header is /usr/include/authbridge/plugin.h.
"""


def shlib_depends(root: Path, files: list[Path]) -> str:
    """dpkg-shlibdeps over the package's ELF files (the Swift runtime in usr/lib/authbridge is the
    package's own: found in its build tree, it adds no dependency)."""
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        (work / "debian").mkdir()
        (work / "debian" / "control").write_text("Source: authbridge\n\nPackage: authbridge\nArchitecture: amd64\n")
        package_root = work / "debian" / "authbridge"
        shutil.copytree(root, package_root, symlinks=True)
        argv = ["dpkg-shlibdeps", "-O", f"-l{package_root / 'usr/lib/authbridge'}"]
        argv += [f"-e{package_root / f.relative_to(root)}" for f in files]
        output = run(argv, cwd=work)
    match = re.search(r"shlibs:Depends=(.*)", output)
    return match.group(1).strip() if match else ""


def deb(tree: Path, out: Path, version: str) -> Path:
    target = out / f"authbridge_{version}_amd64.deb"
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch) / "root"
        shutil.copytree(tree, root / "usr", symlinks=True)
        doc = root / "usr" / "share" / "doc" / "authbridge"
        # Debian's layout: the license in copyright (Apache-2.0 is in common-licenses), notices gzipped.
        (doc / "LICENSE").unlink()
        notices = (doc / "THIRD-PARTY-NOTICES").read_bytes()
        (doc / "THIRD-PARTY-NOTICES").unlink()
        with open(doc / "THIRD-PARTY-NOTICES.gz", "wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as z:
            z.write(notices)
        year = run(["date", "-u", "-d", f"@{EPOCH}", "+%Y"]).strip()
        (doc / "copyright").write_text(DEB_COPYRIGHT.replace("{year}", year))
        changelog = (f"authbridge ({version}) unstable; urgency=medium\n\n"
                     f"  * Release {version}.\n\n"
                     f" -- AuthBridge maintainers <maintainers@authbridge.invalid>  "
                     f"{run(['date', '-u', '-R', '-d', f'@{EPOCH}']).strip()}\n")
        with open(doc / "changelog.gz", "wb") as raw, gzip.GzipFile("", "wb", 9, raw, mtime=0) as z:
            z.write(changelog.encode())
        elf = [p for p in tree_files(root) if p.read_bytes()[:4] == b"\x7fELF"]
        depends = shlib_depends(root, elf)
        installed_kb = (tree_size(root) + 1023) // 1024
        control = root / "DEBIAN"
        control.mkdir()
        (control / "control").write_text(DEB_CONTROL.format(version=version, installed_kb=installed_kb, depends=depends))
        sums = "".join(f"{hashlib.md5(p.read_bytes()).hexdigest()}  {p.relative_to(root)}\n"
                       for p in tree_files(root) if "DEBIAN" not in p.parts)
        (control / "md5sums").write_text(sums)
        for path in [*sorted(root.rglob("*")), root]:
            if not path.is_symlink():
                if path.is_dir():
                    path.chmod(0o755)
                elif path.parent == control:
                    path.chmod(0o644)
                os.utime(path, (EPOCH, EPOCH), follow_symlinks=False)
        run(["dpkg-deb", "--root-owner-group", "-Zxz", "--build", root, target],
            env={**os.environ, "SOURCE_DATE_EPOCH": str(EPOCH)})
    return target


# ── Node package ─────────────────────────────────────────────────────────────

def npm(tree: Path, out: Path, version: str) -> Path:
    source = REPO / "clients" / "node"
    manifest = json.loads((source / "package.json").read_text())
    if manifest["version"] != version:
        raise SystemExit(f"package.py: clients/node/package.json says {manifest['version']}, the host {version}")
    with tempfile.TemporaryDirectory() as scratch:
        stage = Path(scratch) / "package"
        stage.mkdir()
        for name in manifest["files"]:
            path = source / name.rstrip("/")
            if path.is_dir():
                shutil.copytree(path, stage / path.name)
            else:
                shutil.copy2(path, stage / path.name)
        shutil.copy2(REPO / "LICENSE", stage / "LICENSE")
        shutil.copytree(tree, stage / "host" / "linux-x64", symlinks=True)
        manifest["files"] = [*manifest["files"], "host/", "LICENSE"]
        # `npx authbridge`, node_modules/.bin/authbridge: npm links the host itself (no Node in between).
        manifest["bin"] = {"authbridge": "host/linux-x64/bin/authbridge"}
        manifest.pop("private", None)
        manifest["license"] = "Apache-2.0"
        (stage / "package.json").write_text(json.dumps(manifest, indent=2) + "\n")
        for path in [*sorted(stage.rglob("*")), stage]:
            os.utime(path, (EPOCH, EPOCH), follow_symlinks=False)
        output = run(["npm", "pack", "--json", "--pack-destination", out], cwd=stage,
                     env={**os.environ, "npm_config_update_notifier": "false", "npm_config_fund": "false",
                          "npm_config_audit": "false", "npm_config_offline": "true"})
        name = json.loads(output)[0]["filename"]
    return out / name


# ── All of it ────────────────────────────────────────────────────────────────

def human(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", required=True)
    parser.add_argument("--portable", type=Path, required=True)
    parser.add_argument("--system", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    out: Path = args.out.resolve()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    portable, system = args.portable.resolve(), args.system.resolve()
    built = [
        (tarball(portable, out, args.version), tree_size(portable)),
        # The wheel installs the binary twice (bin/git-credential-authbridge: wheel_data).
        (wheel(portable, out, args.version), tree_size(portable) + (portable / "bin" / "authbridge").stat().st_size),
        (deb(system, out, args.version), tree_size(system)),
        (npm(portable, out, args.version), tree_size(portable)),
    ]
    sums = "".join(f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n" for path, _ in built)
    (out / "SHA256SUMS").write_text(sums)
    width = max(len(path.name) for path, _ in built)
    print(f"{'file':<{width}}  compressed  installed")
    for path, installed in built:
        print(f"{path.name:<{width}}  {human(path.stat().st_size):>10}  {human(installed):>9}")


if __name__ == "__main__":
    sys.exit(main())
