"""The README's Install section names exactly the files `make dist` writes (so its commands can
be pasted as they are), one command per way, and the sizes it links to are bench/README's."""

from __future__ import annotations

import re

from conftest import DIST, code_blocks, section


def test_the_install_commands_name_the_files_in_dist():
    [block] = code_blocks(section("## Install"), "sh")
    commands = [line for line in block.splitlines() if line and not line.startswith("#")]
    assert [c.split()[0:2] for c in commands] == [["tar", "-xzf"], ["pip", "install"], ["sudo", "apt"],
                                                  ["npm", "install"]]
    named = {re.sub(r"^\./", "", word) for command in commands for word in command.split()
             if re.search(r"\.(tar\.gz|whl|deb|tgz)$", word)}
    assert named == {path.name for path in DIST.iterdir() if path.name != "SHA256SUMS"}
