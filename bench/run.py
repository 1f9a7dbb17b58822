#!/usr/bin/env python3
"""dbx-mount benchmark runner: every speed figure beside a baseline measured in the same run.

    python3 bench/run.py [--quick] [--latency-ms N] [--bandwidth BPS] [--repeats N]
                         [--out DIR] [--only WORKLOAD ...]

It builds the release binaries, generates deterministic fixtures (cached under bench/.fixtures),
starts dbx-emulator over them with added latency, and runs every workload on a fresh mount
(cold) and again on the same mount (warm). Baselines cannot flatter dbx-mount:
  * metadata workloads run the same command on the local directory the emulator serves;
  * read workloads compare with curl downloading the same bytes from the same emulator
    (fio random reads compare with fio on the local file).
list-million (a fresh mount's cold full listing of an account of 10^6 entries, with a fixture and
an emulator of its own) runs only when --only names it.
Writes results.json, results.md and ratios.svg into the output directory (default
bench-results/). Python 3 standard library only. The runner's parts are the modules of the
dbxbench package beside this file: common, processes, environment, fixtures, emulator, mounts,
workloads, baselines, runner, formatting, chart, report, cli. Every mount it makes is unmounted and every
process it starts is stopped, also on errors, timeouts, Ctrl-C and SIGTERM.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dbxbench.cli import main  # noqa: E402
from dbxbench.workloads import OPT_IN_NAMES, OPT_IN_WORKLOADS, WORKLOAD_NAMES, WORKLOADS  # noqa: E402,F401

if __name__ == "__main__":
    sys.exit(main())
