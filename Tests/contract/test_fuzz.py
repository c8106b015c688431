"""The seeded fuzzer (Tests/fuzz/fuzz_host.py) at a bounded size: about 20,000 valid, hostile and
broken frames over several host lifetimes, then as many over connections to one agent. `make fuzz
N=1000000` runs the same fuzzer long.

Every request whose id can be read is answered exactly once, every frame the host writes
validates against bridge-spec, host and spec agree on which params are invalid, the host exits
with the status the spec gives and its peak RSS stays bounded. FUZZ_SEED picks another seed."""

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))

import fuzz_host  # noqa: E402

FRAMES = 20_000
MAX_RSS_MIB = 160


def test_twenty_thousand_fuzzed_frames_are_each_answered_as_the_spec_says():
    seed = int(os.environ.get("FUZZ_SEED", "20260"))
    figures = fuzz_host.fuzz(FRAMES, seed, max_rss_mib=MAX_RSS_MIB)
    print(f"seed {seed}: {figures.report()}")
    assert figures.frames >= FRAMES
    assert not figures.failed, f"seed {seed}: {figures.report()}\n- " + "\n- ".join(figures.problems)


def test_twenty_thousand_fuzzed_frames_over_connections_to_one_agent():
    # Each host lifetime is a connection: exit and end of input end it, not the agent, whose
    # resident set after each connection stays bounded.
    seed = int(os.environ.get("FUZZ_SEED", "20261"))
    figures = fuzz_host.fuzz(FRAMES, seed, max_rss_mib=MAX_RSS_MIB, agent=True)
    print(f"seed {seed}: {figures.report()}")
    assert figures.frames >= FRAMES
    assert not figures.failed, f"seed {seed}: {figures.report()}\n- " + "\n- ".join(figures.problems)
