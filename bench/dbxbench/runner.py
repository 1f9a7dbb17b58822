"""Measuring: repeats of baseline, cold and warm runs, the counters around each, and the medians
and ratios that go into results.json."""
import json
import os
import sqlite3
import statistics
import subprocess
import time

from .common import BenchError, GiB, METADATA, READ, log
from .processes import children_cpu_seconds, cpu_seconds, evict_page_cache, run_tool
from .fixtures import MILLION, PINS, fixture_layout, generate_million, generate_pins, million_shape
from .emulator import Emulator, HTTP2Front, make_tls
from .mounts import Mount
from .baselines import b_pin_files, remote_reference
from .workloads import Context, w_find_all, w_find_deep
from .formatting import fmt_bytes


def saved_cursor(database):
    """Whether the mount's cache file holds a saved tree (its cursor), read as another process."""
    try:
        with sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=5) as connection:
            row = connection.execute("SELECT cursor IS NOT NULL FROM meta").fetchone()
            return bool(row and row[0])
    except sqlite3.Error:
        return False    # not created yet, or being written


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def api_calls(stats):
    return {route: n for route, n in sorted(stats.get("requests", {}).items()) if n}


def summarize(samples, metric):
    """Median figures over repeats; API calls and bytes are medians per route."""
    if not samples:
        return None
    out = {"runs": samples, "median_seconds": median([s["seconds"] for s in samples])}
    if metric == "throughput" or any("bytes" in s for s in samples):
        out["median_bytes_returned"] = median([s.get("bytes") for s in samples])
    if metric == "throughput":
        out["median_mb_per_s"] = median([s["bytes"] / s["seconds"] / 1e6 for s in samples])
    if metric == "iops":
        out["median_iops"] = median([s["iops"] for s in samples])
        out["median_mb_per_s"] = median([s["bytes"] / s["seconds"] / 1e6 for s in samples])
    if any("api_calls" in s for s in samples):
        routes = sorted({r for s in samples for r in s.get("api_calls", {})})
        out["api_calls"] = {r: median([s.get("api_calls", {}).get(r, 0) for s in samples]) for r in routes}
        out["api_calls_total"] = median([sum(s.get("api_calls", {}).values()) for s in samples])
        out["bytes_downloaded"] = median([s.get("bytes_downloaded") for s in samples])
        out["connections"] = median([s.get("connections") for s in samples])
        if metric in ("throughput", "iops") or any("bytes" in s for s in samples):
            amps = [s["bytes_downloaded"] / s["bytes"] for s in samples if s.get("bytes")]
            out["read_amplification"] = median(amps)
    if any(s.get("peak_rss_bytes") for s in samples):
        out["peak_rss_bytes"] = max(s["peak_rss_bytes"] for s in samples if s.get("peak_rss_bytes"))
    return out


def cpu_per_gib(samples):
    """Median CPU-seconds per GiB returned, by process (reader, emulator, mount), for rows that
    read bytes; None for the others."""
    usable = [s for s in samples if s.get("bytes") and s.get("cpu_seconds")]
    if not usable:
        return None
    keys = sorted({k for s in usable for k in s["cpu_seconds"]})
    return {k: round(median([s["cpu_seconds"].get(k, 0) / (s["bytes"] / GiB) for s in usable]), 3) for k in keys}


def ratio(mount, baseline, metric):
    """Time ratio, mount / baseline: 1.0 is as fast as the baseline, 3.0 three times slower."""
    if not mount or not baseline:
        return None
    if metric == "throughput":
        m, b = mount.get("median_mb_per_s"), baseline.get("median_mb_per_s")
        return b / m if m and b else None
    if metric == "iops":
        m, b = mount.get("median_iops"), baseline.get("median_iops")
        return b / m if m and b else None
    m, b = mount.get("median_seconds"), baseline.get("median_seconds")
    return m / b if m and b else None


class Runner:
    def __init__(self, args, bins, root, spec, emulator, workdir, logdir):
        self.args, self.bins, self.root, self.spec = args, bins, root, spec
        self.emulator, self.workdir, self.logdir = emulator, workdir, logdir
        self.ctx = Context(args, spec, root, emulator, args.step_timeout)
        self.mount_count = 0
        self.tls = None     # (emulator, context) of the TLS rows, started by the first of them
        self.http2 = None   # (front, context) of the HTTP/2 rows, started by the first of them

    def latency_for(self, workload_or_kind):
        """A row's own latency (the TLS rows model a real link at 50 or 100 ms, whatever
        --latency-ms says), else the runner's latency for its kind."""
        if isinstance(workload_or_kind, dict):
            if "latency_ms" in workload_or_kind:
                return workload_or_kind["latency_ms"]
            workload_or_kind = workload_or_kind["kind"]
        return self.args.metadata_latency_ms if workload_or_kind == METADATA else self.args.read_latency_ms

    def tls_emulator(self):
        """A second emulator over the same fixtures, serving HTTPS with a throw-away CA."""
        if self.tls is None or not self.tls[0].alive():
            if self.tls is not None:
                self.tls[0].stop()
            certificates = make_tls(self.workdir / "tls")
            emulator = Emulator(self.bins / "dbx-emulator", self.root, self.args.read_latency_ms, None, self.logdir,
                                name="emulator-tls", tls=certificates)
            emulator.warm_up(self.root, fixture_layout(self.spec))
            self.tls = (emulator, Context(self.args, self.spec, self.root, emulator, self.args.step_timeout))
        return self.tls

    def http2_front(self):
        """An HTTP/2 front (nghttpx, TLS with the throw-away CA) to the runner's own emulator."""
        if self.http2 is None or self.http2[0].backend is not self.emulator or not self.http2[0].alive():
            if self.http2 is not None:
                self.http2[0].stop()
            certificates = make_tls(self.workdir / "tls-http2")
            front = HTTP2Front(self.emulator, certificates, self.logdir)
            self.http2 = (front, Context(self.args, self.spec, self.root, front, self.args.step_timeout))
        return self.http2

    def close(self):
        if self.http2 is not None:
            self.http2[0].stop()
        if self.tls is not None:
            self.tls[0].stop()
        if self.emulator:
            self.emulator.stop()

    @staticmethod
    def cpu_now(emulator, mount):
        return (children_cpu_seconds(), cpu_seconds(emulator.process.pid),
                cpu_seconds(mount.process.pid) if mount is not None else 0.0)

    @staticmethod
    def cpu_since(before, emulator, mount):
        """CPU-seconds of the reader (dd, find, curl: the children reaped meanwhile), the
        emulator and the mount over one measured run, from /proc and getrusage."""
        after = Runner.cpu_now(emulator, mount)
        cpu = {"reader": after[0] - before[0], "emulator": after[1] - before[1]}
        if mount is not None:
            cpu["mount"] = after[2] - before[2]
        return {k: round(v, 3) for k, v in cpu.items()}

    def measured(self, fn, mount=None, emulator=None):
        """One measured run: emulator counters reset before and read after."""
        emulator = emulator or self.emulator
        if mount is not None:
            mount.reset_peak_rss()
        emulator.reset_stats()
        before = self.cpu_now(emulator, mount)
        sample = fn()
        sample["cpu_seconds"] = self.cpu_since(before, emulator, mount)
        stats = emulator.stats()
        sample["api_calls"] = api_calls(stats)
        sample["bytes_downloaded"] = stats.get("download_bytes", 0)
        sample["connections"] = stats.get("connections", 0)
        if mount is not None:
            sample["peak_rss_bytes"] = mount.peak_rss()
        return sample

    def run_workload(self, workload):
        if workload.get("fixture") == "million":
            return self.run_list_million(workload)
        if workload.get("fixture") == "pins":
            return self.run_pin(workload)
        name, metric = workload["name"], workload["metric"]
        emulator, ctx, mount_args = self.emulator, self.ctx, list(self.args.mount_arg) + workload.get("mount_args", [])
        if workload.get("http2"):
            emulator, ctx = self.http2_front()
            mount_args += ["--ca-bundle", str(emulator.tls["ca"])]
        elif workload.get("tls"):
            emulator, ctx = self.tls_emulator()
            mount_args += ["--ca-bundle", str(emulator.tls["ca"])]
        if "link" in workload:
            # SOURCE is a shared link of that served folder (the root: the rows' paths stay the same).
            mount_args.append(emulator.publish_link(workload["link"]))
        emulator.set_latency(self.latency_for(workload))
        emulator.set_bandwidth(workload.get("bandwidth", self.args.bandwidth))
        # Read workloads time the read engine: they start once the mount has listed the account
        # (the metadata workloads time that listing), unless the workload is about a fresh mount.
        # A metadata workload that times the change feed starts there too.
        settle = workload.get("settle", workload["kind"] == READ)
        cold, warm, baseline = [], [], []
        front_before = emulator.protocols() if workload.get("http2") else {}
        for repeat in range(self.args.repeats):
            # The baseline first, interleaved with the mount's runs so that noise hits both.
            if workload["baseline"] == "local":
                baseline.append(self.measured(lambda: workload["run"](ctx, self.root), emulator=emulator))
            else:
                baseline.append(self.measured(lambda: workload["baseline"](ctx), emulator=emulator))
            cache_home = self.workdir / f"cache-{self.mount_count + 1}"
            repeat_args = list(mount_args)
            if workload.get("prime"):
                self.prime(cache_home, name)
            if workload.get("block_cache"):
                repeat_args += ["--block-cache-dir", str(cache_home / "blocks"), "--block-cache-size", "2048"]
                self.prime_blocks(emulator, cache_home, name, workload, repeat_args)
            self.mount_count += 1
            mountpoint = self.workdir / f"mnt-{self.mount_count}"
            emulator.reset_stats()      # the cold run's counts include mounting
            mount = Mount(self.bins / "dbx-mount", emulator, mountpoint, repeat_args,
                          self.logdir / f"mount-{name}.log", cache_home)
            try:
                if settle:
                    emulator.wait_for_longpoll(self.args.step_timeout)
                    emulator.reset_stats()
                if workload.get("prepare"):
                    workload["prepare"](ctx, mountpoint)     # not measured: what the row runs after
                    emulator.reset_stats()
                t0 = time.monotonic()
                before = self.cpu_now(emulator, mount)
                sample = workload["run"](ctx, mountpoint)
                sample["cpu_seconds"] = self.cpu_since(before, emulator, mount)
                stats = emulator.stats()
                sample["api_calls"] = api_calls(stats)
                sample["bytes_downloaded"] = stats.get("download_bytes", 0)
                sample["connections"] = stats.get("connections", 0)
                sample["peak_rss_bytes"] = mount.peak_rss()
                cold.append(sample)
                warm.append(self.measured(lambda: workload["run"](ctx, mountpoint), mount, emulator))
                log(f"  {name} #{repeat + 1}: baseline {self.describe(baseline[-1], metric)}, "
                    f"cold {self.describe(cold[-1], metric)}, warm {self.describe(warm[-1], metric)}"
                    f" ({time.monotonic() - t0:.1f} s)")
            finally:
                mount.close()
        result = self.result(workload, baseline, cold, warm, settle)
        result["scheme"] = emulator.url.split(":", 1)[0]     # https for the TLS rows, as measured
        if workload.get("http2"):
            # What the front passed on for this row (the mounts' and curl's requests), by protocol.
            result["front_requests_by_protocol"] = {
                protocol: count - front_before.get(protocol, 0)
                for protocol, count in emulator.protocols().items() if count > front_before.get(protocol, 0)}
        if "block" in workload:
            result["remote_reference"] = remote_reference(ctx, workload["block"], self.args.fio_runtime)
        return result

    def result(self, workload, baseline, cold, warm, settle):
        """A workload's entry in results.json: medians, ratios, and whether the outputs agree."""
        name, metric = workload["name"], workload["metric"]
        checks = {"baseline": baseline[0].get("check"),
                  "cold": [s.get("check") for s in cold], "warm": [s.get("check") for s in warm]}
        correct = all(c == checks["baseline"] for c in checks["cold"] + checks["warm"])
        for group in (cold, warm, baseline):
            for s in group:
                s.pop("check", None)
        result = {
            "name": name, "kind": workload["kind"], "metric": metric,
            "what": workload["what"], "baseline_what": workload["baseline_what"],
            "latency_ms": self.latency_for(workload),
            "tls": bool(workload.get("tls")),
            "http2": bool(workload.get("http2")),
            "mount_args": workload.get("mount_args", []),
            "bandwidth": workload.get("bandwidth", self.args.bandwidth),
            "settled": settle,
            "output_matches_baseline": correct,
            "baseline": summarize(baseline, metric),
            "cold": summarize(cold, metric),
            "warm": summarize(warm, metric),
        }
        for group, samples in (("baseline", baseline), ("cold", cold), ("warm", warm)):
            per_gib = cpu_per_gib(samples)
            if per_gib and result[group]:
                result[group]["cpu_s_per_gib"] = per_gib
        result["cold"]["ratio"] = ratio(result["cold"], result["baseline"], metric)
        result["warm"]["ratio"] = ratio(result["warm"], result["baseline"], metric)
        if not correct:
            log(f"  WARNING: {name}: the mount's output differs from the baseline's ({checks})")
        return result

    def run_list_million(self, workload):
        """list-million: its own emulator serves the million-entry tree; each repeat runs find over
        that directory (baseline), times a fresh mount's cold full listing, then runs find over
        the listed mount (warm). The emulator goes when the row is done: it holds the tree in
        memory, and the other rows' emulator stays as it was."""
        name = workload["name"]
        root = generate_million(self.args.fixtures.resolve() / "million", MILLION)
        # Indexing and hashing a million files took 141 s on the 2-core development machine
        # (the README says where it goes): give it room on a busier one.
        emulator = Emulator(self.bins / "dbx-emulator", root, self.latency_for(workload["kind"]), self.args.bandwidth,
                            self.logdir, name=f"emulator-{name}", start_timeout=max(600, self.args.step_timeout))
        log(f"  its emulator indexed {MILLION['entries']:,} entries in {emulator.start_seconds:.1f} s "
            f"(peak RSS {fmt_bytes(emulator.rss_at_start)})")
        ctx = Context(self.args, self.spec, root, emulator, self.args.step_timeout)
        cold, warm, baseline, saved, remounts = [], [], [], [], []
        try:
            run_tool(["find", str(root)], self.args.step_timeout)    # the baseline's dentries, cached for all
            for repeat in range(self.args.repeats):
                baseline.append(self.measured(lambda: w_find_all(ctx, root), emulator=emulator))
                sample, mount = self.cold_listing(emulator, name)
                try:
                    warm.append(self.measured(lambda: w_find_all(ctx, mount.mountpoint), mount, emulator))
                    saved.append(self.wait_for_saved_tree(mount))
                finally:
                    mount.close()
                sample["check"] = warm[-1]["check"]     # what the listing brought, as find sees it
                cold.append(sample)
                remounts.append(self.remount_from_saved_tree(emulator, mount, name))
                log(f"  {name} #{repeat + 1}: baseline {self.describe(baseline[-1], 'time')}, cold listing "
                    f"{self.describe(sample, 'time')} (peak RSS {fmt_bytes(sample['peak_rss_bytes'])}), then find "
                    f"{self.describe(warm[-1], 'time')}: {warm[-1]['check']:,} lines of {baseline[-1]['check']:,}; "
                    f"saved after {saved[-1]['seconds']:.1f} s (peak RSS {fmt_bytes(saved[-1]['peak_rss_bytes'])}); "
                    f"remount from it live in {remounts[-1]['seconds']:.2f} s (peak RSS "
                    f"{fmt_bytes(remounts[-1]['peak_rss_bytes'])})")
            served = {"start_seconds": round(emulator.start_seconds, 1), "rss_at_start_bytes": emulator.rss_at_start,
                      "peak_rss_bytes": emulator.peak_rss()}
        finally:
            emulator.stop()
        result = self.result(workload, baseline, cold, warm, settle=False)
        folders, files, _, _ = million_shape(MILLION)
        result["fixture"] = dict(MILLION, folders=folders, files=files)
        result["emulator"] = served
        result["saved_tree"] = {
            "peak_rss_bytes": median([s["peak_rss_bytes"] for s in saved]),
            "remount_seconds": round(median([s["seconds"] for s in remounts]), 2),
            "remount_peak_rss_bytes": median([s["peak_rss_bytes"] for s in remounts]),
            "remount_api_calls": remounts[len(remounts) // 2]["api_calls"],
        }
        return result

    def wait_for_saved_tree(self, mount):
        """Waits until the mount has saved its tree (the cache file holds a cursor): the whole
        tree walked into SQLite, which a mount of a million entries does once the listing is in.
        Returns the seconds waited and the mount's peak RSS since the warm find began (`measured`
        resets it), save included."""
        started = time.monotonic()
        while True:
            database = next(iter((mount.cache_home / "dbx-mount").glob("*.sqlite")), None)
            if database is not None and saved_cursor(database):
                return {"seconds": time.monotonic() - started, "peak_rss_bytes": mount.peak_rss()}
            if time.monotonic() - started > self.args.step_timeout:
                raise BenchError(f"the mount saved no tree within {self.args.step_timeout:.0f} s")
            time.sleep(0.2)

    def remount_from_saved_tree(self, emulator, earlier, name):
        """A mount with the earlier one's cache: from its start until its change feed, caught up
        from the saved tree's cursor, goes on to longpoll. Its peak RSS includes loading the tree."""
        self.mount_count += 1
        mountpoint = self.workdir / f"mnt-{self.mount_count}"
        emulator.reset_stats()
        started = time.monotonic()
        mount = Mount(self.bins / "dbx-mount", emulator, mountpoint, self.args.mount_arg,
                      self.logdir / f"mount-{name}-remount.log", earlier.cache_home)
        try:
            emulator.wait_for_longpoll(self.args.step_timeout)
            seconds = time.monotonic() - started
            return {"seconds": seconds, "api_calls": api_calls(emulator.stats()), "peak_rss_bytes": mount.peak_rss()}
        finally:
            mount.close()

    def run_pin(self, workload):
        """pin-1g: its own emulator over the pin fixture at the row's latency. Each repeat: curl
        of the folder's files one after another (baseline); a fresh mount with a block cache,
        settled, then `dbx-mount pin` timed until `status` says complete (cold); unpin and pin
        again, everything cached (warm)."""
        name = workload["name"]
        root = generate_pins(self.args.fixtures.resolve() / "pins", PINS)
        emulator = Emulator(self.bins / "dbx-emulator", root, self.latency_for(workload), None, self.logdir,
                            name=f"emulator-{name}")
        # The mount's control socket, and the status and pin commands that find it, live here.
        runtime = self.workdir / "runtime"
        runtime.mkdir(mode=0o700, exist_ok=True)
        os.environ["XDG_RUNTIME_DIR"] = str(runtime)
        ctx = Context(self.args, self.spec, root, emulator, self.args.step_timeout)
        cold, warm, baseline = [], [], []
        try:
            for repeat in range(self.args.repeats):
                baseline.append(self.measured(lambda: b_pin_files(emulator, root, "Pinned", self.args.step_timeout),
                                              emulator=emulator))
                self.mount_count += 1
                cache_home = self.workdir / f"cache-{self.mount_count}"
                mountpoint = self.workdir / f"mnt-{self.mount_count}"
                emulator.reset_stats()
                mount = Mount(self.bins / "dbx-mount", emulator, mountpoint,
                              [*self.args.mount_arg, "--block-cache-dir", str(cache_home / "blocks"),
                               "--block-cache-size", "2048"],
                              self.logdir / f"mount-{name}.log", cache_home)
                try:
                    emulator.wait_for_longpoll(self.args.step_timeout)
                    cold.append(self.measured(lambda: self.pin_until_complete(mount, ctx), mount, emulator))
                    run_tool([str(self.bins / "dbx-mount"), "unpin", str(mount.mountpoint / "Pinned")], self.args.step_timeout)
                    warm.append(self.measured(lambda: self.pin_until_complete(mount, ctx), mount, emulator))
                finally:
                    mount.close()
                log(f"  {name} #{repeat + 1}: baseline {self.describe(baseline[-1], 'time')}, "
                    f"cold {self.describe(cold[-1], 'time')} (peak RSS {fmt_bytes(cold[-1]['peak_rss_bytes'])}), "
                    f"warm {self.describe(warm[-1], 'time')}")
        finally:
            emulator.stop()
        result = self.result(workload, baseline, cold, warm, settle=True)
        result["fixture"] = dict(PINS)
        return result

    def pin_until_complete(self, mount, ctx):
        """`dbx-mount pin` of the fixture's folder, then `status --json` until the pin is complete."""
        binary = str(self.bins / "dbx-mount")
        started = time.monotonic()
        run_tool([binary, "pin", str(mount.mountpoint / "Pinned")], self.args.step_timeout)
        while True:
            _, out, _ = run_tool([binary, "status", "--json", str(mount.mountpoint)], 30, stdout=subprocess.PIPE)
            pins = json.loads(out).get("pins") or []
            if pins and all(p["complete"] for p in pins):
                seconds = time.monotonic() - started
                return {"seconds": seconds, "bytes": pins[0]["bytes_done"], "check": pins[0]["bytes_total"]}
            if time.monotonic() - started > self.args.step_timeout:
                raise BenchError(f"the pin did not complete within {self.args.step_timeout:.0f} s: {pins}")
            time.sleep(0.1)

    def cold_listing(self, emulator, name):
        """Starts a fresh mount (empty cache) and waits for its first full listing. Returns the
        sample (mount start to the feed's first longpoll, the calls meanwhile, VmHWM) and the
        mount, still mounted, or raises with the mount gone."""
        cache_home = self.workdir / f"cache-{self.mount_count + 1}"
        self.mount_count += 1
        mountpoint = self.workdir / f"mnt-{self.mount_count}"
        emulator.reset_stats()
        started = time.monotonic()
        mount = Mount(self.bins / "dbx-mount", emulator, mountpoint, self.args.mount_arg,
                      self.logdir / f"mount-{name}.log", cache_home)
        try:
            emulator.wait_for_longpoll(self.args.step_timeout)
            seconds = time.monotonic() - started
            stats = emulator.stats()
            sample = {"seconds": seconds, "api_calls": api_calls(stats), "bytes_downloaded": stats.get("download_bytes", 0),
                      "connections": stats.get("connections", 0), "peak_rss_bytes": mount.peak_rss()}
        except BaseException:
            mount.close()
            raise
        return sample, mount

    def prime(self, cache_home, name):
        """An earlier mount with the same cache directory: it lists everything (the change feed
        reaches longpoll only once the whole tree is in), runs find, and is unmounted."""
        self.mount_count += 1
        mountpoint = self.workdir / f"mnt-{self.mount_count}"
        self.emulator.reset_stats()
        mount = Mount(self.bins / "dbx-mount", self.emulator, mountpoint, self.args.mount_arg,
                      self.logdir / f"mount-{name}.log", cache_home)
        try:
            w_find_deep(self.ctx, mountpoint)
            self.emulator.wait_for_longpoll(self.args.step_timeout)
            time.sleep(1)
        finally:
            mount.close()

    def prime_blocks(self, emulator, cache_home, name, workload, mount_args):
        """An earlier mount with the same block cache reads the row's files once, so that the
        measured mount finds every block on disk; the blocks' pages are then dropped from the page
        cache, so that its reads come from the disk as the baseline's do."""
        self.mount_count += 1
        mountpoint = self.workdir / f"mnt-{self.mount_count}"
        mount = Mount(self.bins / "dbx-mount", emulator, mountpoint, mount_args,
                      self.logdir / f"mount-{name}.log", cache_home)
        try:
            workload["run"](self.ctx, mountpoint)
        finally:
            mount.close()       # unmounting waits for the parts in flight, and keeps their blocks
        evict_page_cache(cache_home / "blocks")

    @staticmethod
    def describe(sample, metric):
        if metric == "throughput":
            return f"{sample['bytes'] / sample['seconds'] / 1e6:.1f} MB/s"
        if metric == "iops":
            return f"{sample['iops']:.0f} IOPS"
        return f"{sample['seconds']:.3f} s"
