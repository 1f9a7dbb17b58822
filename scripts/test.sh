#!/usr/bin/env bash
# The whole test suite: unit tests of the core and client, emulator route tests, the official
# Dropbox SDK against the emulator, and real FUSE mounts compared with the served tree.
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-deps.sh
swift build --build-tests
# Swift layers: core against a fake, client against the emulator, emulator routes and knobs.
swift test --skip-build
# Real mounts, the Python SDK interop test, real file managers under Xvfb and the quick benchmark
# drive the built binaries.
python3 -m pytest -q Tests/Mount Tests/Interop Tests/Desktop Tests/Bench
