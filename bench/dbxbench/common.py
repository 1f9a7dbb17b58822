"""Constants, fixture specs and the one error type every part of the runner shares."""
import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[2]
TOKEN = "emulator-token"
MiB = 1 << 20
GiB = 1 << 30
FIXTURE_VERSION = 1

# Fixture sets. The deep tree is fanout[0] x fanout[1] x fanout[2] folders, with
# deep_files files in each of the innermost (leaf) folders.
SPECS = {
    "full": {"wide_files": 10_000, "deep_fanout": [10, 10, 10], "deep_files": 100,
             "large_size": 1 * GiB, "large_count": 4, "huge_size": 2 * GiB},
    "quick": {"wide_files": 1_000, "deep_fanout": [5, 5, 4], "deep_files": 50,
              "large_size": 64 * MiB, "large_count": 4, "huge_size": 128 * MiB},
}

METADATA, READ = "metadata", "read"


class BenchError(Exception):
    """A problem worth one clear line, not a traceback."""


def log(message):
    print(f"[bench] {message}", file=sys.stderr, flush=True)


# What tail-1m reads at the end of the huge file, from the mount and with curl alike.
TAIL_BYTES = MiB
# What the stream-start rows read from the start of a large file: what a video player needs before
# it plays smoothly, or a copy's first seconds.
STREAM_START_BYTES = 32 * MiB
