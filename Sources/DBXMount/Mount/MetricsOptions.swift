import ArgumentParser

/// Prometheus metrics (issue 17): where `/metrics` is served, if anywhere. The `-o` form for fstab
/// is `metrics_addr=HOST:PORT`; the flag wins over it.
struct MetricsOptions: ParsableArguments {
    @Option(help: ArgumentHelp("Serve Prometheus metrics at http://HOST:PORT/metrics (':PORT' is loopback; default: none).",
                               valueName: "host:port"))
    var metricsAddr: String?

    func address(_ list: MountOptionList) -> String? {
        metricsAddr ?? list.settings["metrics_addr"]
    }
}
