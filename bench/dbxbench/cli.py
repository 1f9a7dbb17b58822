"""The command line: arguments, and the run from build to report."""
import argparse
import atexit
import datetime
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .common import BenchError, REPO, SPECS, log
from .processes import _on_signal, cleanup
from .environment import build, check_environment
from .fixtures import MILLION, fixture_layout, generate_fixtures, million_shape
from .emulator import Emulator
from .workloads import OPT_IN_NAMES, OPT_IN_WORKLOADS, WORKLOADS, WORKLOAD_NAMES
from .runner import Runner
from .report import git_commit, machine_info, results_markdown, write_outputs


# --------------------------------------------------------------------------------------------

def parse_args(argv):
    p = argparse.ArgumentParser(description="Benchmark dbx-mount against same-run baselines (see the README's Benchmarks).")
    p.add_argument("--quick", action="store_true", help="small fixtures, 1 repeat, short fio: under 3 minutes")
    p.add_argument("--latency-ms", type=int, help="emulator latency per request for every workload")
    p.add_argument("--metadata-latency-ms", type=int, help="latency for metadata workloads (default 50)")
    p.add_argument("--read-latency-ms", type=int, help="latency for read workloads (default 20)")
    p.add_argument("--bandwidth", type=int, help="emulator bandwidth cap, bytes per second (default none)")
    p.add_argument("--repeats", type=int, help="repeats per workload (default 3, --quick 1)")
    p.add_argument("--out", type=Path, default=REPO / "bench-results", help="output directory (default bench-results/)")
    p.add_argument("--only", nargs="+", choices=WORKLOAD_NAMES + OPT_IN_NAMES, metavar="WORKLOAD",
                   help="run only these workloads: " + ", ".join(WORKLOAD_NAMES) + "; and these, which "
                        "run only when named: " + ", ".join(OPT_IN_NAMES))
    p.add_argument("--fio-runtime", type=int, help="seconds per fio run (default 15, --quick 3)")
    p.add_argument("--step-timeout", type=float, help="seconds before one command counts as hung (default 900, --quick 120)")
    p.add_argument("--fixtures", type=Path, default=REPO / "bench" / ".fixtures",
                   help="fixture cache directory (default bench/.fixtures)")
    p.add_argument("--mount-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for dbx-mount, e.g. --mount-arg=--ttl=600 (repeatable)")
    p.add_argument("--bin-dir", type=Path, help="use prebuilt dbx-mount and dbx-emulator from here; skip the build")
    p.add_argument("--no-build", action="store_true", help="skip swift build; use the existing release binaries")
    args = p.parse_args(argv)
    if args.latency_ms is not None:
        args.metadata_latency_ms = args.metadata_latency_ms if args.metadata_latency_ms is not None else args.latency_ms
        args.read_latency_ms = args.read_latency_ms if args.read_latency_ms is not None else args.latency_ms
    args.metadata_latency_ms = 50 if args.metadata_latency_ms is None else args.metadata_latency_ms
    args.read_latency_ms = 20 if args.read_latency_ms is None else args.read_latency_ms
    args.repeats = args.repeats or (1 if args.quick else 3)
    args.fio_runtime = args.fio_runtime or (3 if args.quick else 15)
    args.step_timeout = args.step_timeout or (120 if args.quick else 900)
    if args.repeats < 1:
        p.error("--repeats must be at least 1")
    return args


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.only:
        selected = [w for w in WORKLOADS + OPT_IN_WORKLOADS if w["name"] in args.only]
    else:
        selected = list(WORKLOADS)
    # The shared fixtures and emulator serve every row but those with a fixture of their own.
    shared = [w for w in selected if not w.get("fixture")]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    atexit.register(cleanup)
    started = time.monotonic()
    workdir = None
    try:
        check_environment(need_fio=any(w["name"].startswith("fio") for w in selected))
        if args.bin_dir:
            bins = args.bin_dir
        else:
            bins = build(skip=args.no_build)
        workdir = Path(tempfile.mkdtemp(prefix="dbx-bench-"))
        # A private copy of the binaries: a rebuild by someone else mid-run cannot change them.
        (workdir / "bin").mkdir()
        for binary in ("dbx-mount", "dbx-emulator"):
            if not (bins / binary).exists():
                raise BenchError(f"{bins / binary} is missing (build with swift build -c release)")
            shutil.copy2(bins / binary, workdir / "bin" / binary)
        bins = workdir / "bin"
        version = subprocess.run([str(bins / "dbx-mount"), "--version"], stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True).stdout.strip()
        spec_name = "quick" if args.quick else "full"
        spec = SPECS[spec_name]
        root = generate_fixtures(args.fixtures.resolve() / spec_name, spec) if shared else None
        args.out.mkdir(parents=True, exist_ok=True)
        logdir = args.out / "logs"
        if logdir.exists():
            shutil.rmtree(logdir)
        logdir.mkdir()
        emulator = None
        if shared:
            emulator = Emulator(bins / "dbx-emulator", root, args.metadata_latency_ms, args.bandwidth, logdir)
            log(f"emulator at {emulator.url} serving {root}; warming the server side")
            emulator.warm_up(root, fixture_layout(spec))
        a, b, c = spec["deep_fanout"]
        results = {
            "schema": 1,
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": machine_info(),
            "git_commit": git_commit(),
            "dbx_mount_version": version,
            "config": {
                "quick": args.quick, "repeats": args.repeats,
                "metadata_latency_ms": args.metadata_latency_ms, "read_latency_ms": args.read_latency_ms,
                "bandwidth": args.bandwidth, "fio_runtime_s": args.fio_runtime, "mount_args": args.mount_arg,
                "fixtures": dict(spec, deep_folders=a * b * c + a * b + a, deep_entries=a * b * c * (spec["deep_files"] + 1) + a * b + a),
                "command": "python3 bench/run.py " + " ".join(sys.argv[1:] if argv is None else argv),
            },
            "workloads": [],
        }
        if emulator:
            results["config"]["emulator_knobs"] = emulator._call("GET", "/__admin/knobs")
        if any(w.get("fixture") == "million" for w in selected):
            folders, files, _, _ = million_shape(MILLION)
            results["config"]["million_fixture"] = dict(MILLION, folders=folders, files=files)
        runner = Runner(args, bins, root, spec, emulator, workdir, logdir)
        failed = []
        for workload in selected:
            own = bool(workload.get("fixture"))     # its own emulator, started and stopped by the row
            if not own and not runner.emulator.alive():
                log(f"dbx-emulator exited with status {runner.emulator.process.returncode}; starting a new one")
                results.setdefault("emulator_restarts", []).append(
                    {"before": workload["name"], "exit_status": runner.emulator.process.returncode})
                runner.emulator.stop()
                runner.emulator = runner.ctx.emulator = Emulator(bins / "dbx-emulator", root, args.metadata_latency_ms,
                                                                 args.bandwidth, logdir)
                runner.emulator.warm_up(root, fixture_layout(spec))
            log(f"{workload['name']}: {workload['what']} (latency {runner.latency_for(workload)} ms"
                f"{', TLS' if workload.get('tls') else ''}{', HTTP/2' if workload.get('http2') else ''})")
            try:
                results["workloads"].append(runner.run_workload(workload))
            except BenchError as error:
                if not own and not runner.emulator.alive():
                    error = BenchError(f"{error} [dbx-emulator exited with status {runner.emulator.process.returncode} during this workload]")
                log(f"  {workload['name']} failed: {error}")
                failed.append(workload["name"])
                results["workloads"].append({"name": workload["name"], "kind": workload["kind"],
                                             "metric": workload["metric"], "error": str(error)})
            write_outputs(args.out, results)     # partial results survive a later failure
        runner.close()
        results["elapsed_s"] = round(time.monotonic() - started, 1)
        write_outputs(args.out, results)
        sys.stdout.write(results_markdown(results))
        log(f"wrote {args.out}/results.json, results.md, ratios.svg in {results['elapsed_s']} s")
        if failed:
            raise BenchError(f"workloads failed: {', '.join(failed)} (see {args.out}/results.json and {logdir})")
        return 0
    except BenchError as error:
        print(f"bench: {error}", file=sys.stderr)
        return 1
    except SystemExit as stop:
        print(f"bench: stopped by signal {stop.code - 128 if isinstance(stop.code, int) and stop.code > 128 else ''}",
              file=sys.stderr)
        return stop.code if isinstance(stop.code, int) else 1
    finally:
        cleanup()
        if workdir is not None:
            shutil.rmtree(workdir, ignore_errors=True)
