// The mount's Prometheus metrics and its status, without a mount: a filesystem over the in-memory
// fake, its calls metered, what the exposition and the status object say after some traffic.

import DropboxClient
@testable import DropboxFS
import Foundation
@testable import MountRuntime
import TestSupport
import Testing

@Suite("Metrics and status")
struct MetricsTests {
    func makeMount(metrics: MountMetrics?) throws -> (Mount, DropboxFilesystem) {
        let dropbox = FakeDropbox()
        dropbox.addFolder("/Docs")
        dropbox.addFile("/Docs/a.bin", Array(repeating: 1, count: 10_000))
        let meter = APIMeter(observer: metrics)
        var options = FilesystemOptions()
        options.followsChanges = false   // nothing runs in the background of these checks
        let fs = DropboxFilesystem(api: MeteredDropboxAPI(dropbox, meter: meter), options: options,
                                   folderModified: 0)
        let docs = try fs.lookup(parent: .root, name: "Docs").inode
        let handle = try fs.open(try fs.lookup(parent: docs, name: "a.bin").inode).handle
        _ = try fs.read(handle, offset: 0, size: 10_000)
        fs.release(handle)
        meter.addRateLimited()
        return (Mount(filesystem: fs, logger: .init(label: "test"), meter: meter), fs)
    }

    @Test func theExpositionHasTheMountsSeriesInPrometheusForm() throws {
        let metrics = MountMetrics(mountpoint: "/mnt/dropbox")
        let (mount, _) = try makeMount(metrics: metrics)
        metrics.operationEnded("read", seconds: 0.002, failed: false)
        metrics.operationEnded("getxattr", seconds: 0.0001, failed: true)
        // A streamed download's duration is recorded when its call returns, which may be just after
        // the read that consumed its bytes has been answered: wait for it rather than race it.
        let downloadSeries = #"dbxmount_dropbox_request_duration_seconds_count{mount="/mnt/dropbox",route="files/download"} 1"#
        var text = ""
        for _ in 0..<500 {
            text = String(decoding: metrics.exposition(of: mount), as: UTF8.self)
            if text.contains(downloadSeries) { break }
            Thread.sleep(forTimeInterval: 0.01)
        }
        #expect(text.contains(#"dbxmount_download_bytes_total{mount="/mnt/dropbox"} 10000"#), "\(text)")
        #expect(text.contains(#"dbxmount_dropbox_rate_limited_total{mount="/mnt/dropbox"} 1"#))
        #expect(text.contains(#"dbxmount_dropbox_requests_total{mount="/mnt/dropbox",route="files/list_folder"}"#))
        #expect(text.contains(downloadSeries))
        #expect(text.contains(#"dbxmount_fuse_operation_errors_total{mount="/mnt/dropbox",operation="getxattr"} 1"#))
        #expect(text.contains("# TYPE dbxmount_fuse_operation_duration_seconds histogram"))
        // A second scrape adds nothing that did not happen.
        let again = String(decoding: metrics.exposition(of: mount), as: UTF8.self)
        #expect(again.contains(#"dbxmount_download_bytes_total{mount="/mnt/dropbox"} 10000"#))
    }

    @Test func theStatusRoundTripsThroughJSON() throws {
        let (mount, _) = try makeMount(metrics: nil)
        let identity = MountIdentity(mountpoint: "/mnt/dropbox", account: "Ann <ann@example.com>", source: "/")
        let status = MountStatus(of: mount, identity: identity)
        #expect(status.dropbox?.bytesDownloaded == 10_000 && status.dropbox?.rateLimited == 1)
        #expect(status.changeFeed.state == "none", "a mount that follows no changes (as a shared link) says so")
        let decoded = try #require(status.jsonObject().flatMap(MountStatus.init(jsonObject:)))
        #expect(decoded.mountpoint == status.mountpoint && decoded.dropbox == status.dropbox && decoded.cache == status.cache)
        let json = status.json()
        #expect(json.contains(#""rate_limited":1"#) && json.contains(#""bytes_downloaded":10000"#), "\(json)")
    }

    @Test func systemdsStatusLineSaysHowTheTreeStandsInOneLine() throws {
        let (mount, _) = try makeMount(metrics: nil)
        var status = MountStatus(of: mount, identity: MountIdentity(mountpoint: "/m", account: "", source: "/"))
        #expect(status.summary.hasPrefix("shared link: folders are listed again after --ttl; "))
        status.changeFeed = .init(state: "starting")
        status.firstListing = .init(done: false, entries: 12_345, folders: 230, listingsDone: 9, listingsStarted: 20,
                                    seconds: 3, fraction: 0.45)
        status.cache.entries = 12_345
        status.reads.openFiles = 2
        #expect(status.summary == "listing Dropbox: 45% (12345 entries, 230 folders); 12345 entries, 2 open files")
        status.firstListing?.done = true
        status.changeFeed.state = "live"
        #expect(status.summary == "live: following changes; 12345 entries, 2 open files")
        status.changeFeed = .init(state: "down", error: "cannot connect\nto api.dropboxapi.com")
        #expect(status.summary == "change feed down: cannot connect to api.dropboxapi.com; retrying; 12345 entries, 2 open files",
                "one line, whatever the error says")
        status.changeFeed = .init(state: "offline")
        status.pins = [PinStatus(path: "/A", listed: true, files: 1, bytesTotal: 5, bytesDone: 5),
                       PinStatus(path: "/B", listed: true, files: 1, bytesTotal: 5, bytesDone: 1)].map(MountStatus.Pin.init)
        #expect(status.summary.hasPrefix("offline: "))
        #expect(status.summary.hasSuffix("; 1 of 2 pinned folders complete"))
    }

    @Test func theWatchdogIsTheUnitsOnlyForThisProcess() {
        #expect(SystemdReporter.watchdogInterval(environment: [:], pid: 7) == nil)
        #expect(SystemdReporter.watchdogInterval(environment: ["WATCHDOG_USEC": "30000000"], pid: 7) == .seconds(30))
        #expect(SystemdReporter.watchdogInterval(environment: ["WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "7"], pid: 7) == .seconds(30))
        #expect(SystemdReporter.watchdogInterval(environment: ["WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "8"], pid: 7) == nil,
                "set for the process that started this one")
        #expect(SystemdReporter.watchdogInterval(environment: ["WATCHDOG_USEC": "0"], pid: 7) == nil)
        #expect(SystemdReporter.watchdogInterval(environment: ["WATCHDOG_USEC": "soon"], pid: 7) == nil)
    }
}
