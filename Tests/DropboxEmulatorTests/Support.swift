import DropboxEmulator
import Foundation
import Testing

/// One HTTP exchange, as curl saw it.
struct HTTPResult {
    var status: Int
    var headers: [(String, String)]
    var body: Data
    var curlExit: Int32

    func header(_ name: String) -> String? {
        headers.last(where: { $0.0.lowercased() == name.lowercased() })?.1
    }
    var text: String { String(decoding: body, as: UTF8.self) }
    var json: [String: Any] { (try? JSONSerialization.jsonObject(with: body, options: [.fragmentsAllowed])) as? [String: Any] ?? [:] }
    var isNullBody: Bool { text == "null" }
}

/// A running emulator over a fresh temporary directory; `close()` stops it and deletes the dir.
final class Fixture: @unchecked Sendable {
    // @unchecked: each test owns its fixture and uses it from one task at a time.
    let dir: String
    let server: DropboxEmulatorServer
    var url: String { server.baseURL }
    var caFile: String?

    init(files: [String: String] = [:], _ configure: (inout EmulatorConfiguration) -> Void = { _ in }) throws {
        dir = FileManager.default.temporaryDirectory.appendingPathComponent("dbx-emu-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for (path, content) in files { try Fixture.write(dir + "/" + path, content) }
        var c = EmulatorConfiguration(root: dir)
        configure(&c)
        server = try DropboxEmulatorServer.start(c)
    }

    static func write(_ path: String, _ content: String) throws {
        try FileManager.default.createDirectory(atPath: (path as NSString).deletingLastPathComponent, withIntermediateDirectories: true)
        try Data(content.utf8).write(to: URL(fileURLWithPath: path))
    }

    func write(_ rel: String, _ content: String) throws { try Fixture.write(dir + "/" + rel, content) }

    func close() {
        server.stop()
        try? FileManager.default.removeItem(atPath: dir)
    }

    /// Runs curl; `args` come after the URL.
    func curl(_ path: String, _ args: [String] = [], timeout: Int = 20) -> HTTPResult {
        let headerFile = NSTemporaryDirectory() + "h-\(UUID().uuidString)"
        let bodyFile = NSTemporaryDirectory() + "b-\(UUID().uuidString)"
        defer { try? FileManager.default.removeItem(atPath: headerFile); try? FileManager.default.removeItem(atPath: bodyFile) }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/curl")
        var all = ["-s", "--noproxy", "*", "--max-time", String(timeout), "-D", headerFile, "-o", bodyFile]
        if let caFile { all += ["--cacert", caFile] }
        p.arguments = all + [url + path] + args
        try? p.run()
        p.waitUntilExit()
        var result = HTTPResult(status: 0, headers: [], body: (try? Data(contentsOf: URL(fileURLWithPath: bodyFile))) ?? Data(), curlExit: p.terminationStatus)
        let raw = (try? String(contentsOfFile: headerFile, encoding: .isoLatin1)) ?? ""
        // With redirects or 100-continue there can be several header blocks: keep the last.
        let block = raw.components(separatedBy: "\r\n\r\n").filter { !$0.isEmpty }.last ?? ""
        for (i, line) in block.components(separatedBy: "\r\n").enumerated() {
            if i == 0 {
                result.status = Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0
            } else if let colon = line.firstIndex(of: ":") {
                result.headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
            }
        }
        return result
    }

    static let auth = ["-H", "Authorization: Bearer emulator-token"]

    /// POST an RPC route with a JSON body.
    func rpc(_ route: String, _ body: String?, token: String? = "emulator-token", headers: [String] = []) -> HTTPResult {
        var args = ["-X", "POST"]
        if let token { args += ["-H", "Authorization: Bearer \(token)"] }
        if let body { args += ["-H", "Content-Type: application/json", "--data-binary", body] }
        for h in headers { args += ["-H", h] }
        return curl("/2/" + route, args)
    }

    func download(_ arg: String, route: String = "files/download", headers: [String] = []) -> HTTPResult {
        var args = ["-X", "POST", "-H", "Authorization: Bearer emulator-token", "-H", "Dropbox-API-Arg: \(arg)"]
        for h in headers { args += ["-H", h] }
        return curl("/2/" + route, args)
    }

    /// All entries of a listing, following `continue`.
    func listAll(_ arg: String) -> (entries: [[String: Any]], cursor: String, pages: Int) {
        var r = rpc("files/list_folder", arg)
        var entries: [[String: Any]] = []
        var pages = 0
        while true {
            pages += 1
            let j = r.json
            entries += j["entries"] as? [[String: Any]] ?? []
            guard j["has_more"] as? Bool == true, let cursor = j["cursor"] as? String else {
                return (entries, j["cursor"] as? String ?? "", pages)
            }
            r = rpc("files/list_folder/continue", #"{"cursor":"\#(cursor)"}"#)
        }
    }

    func cont(_ cursor: String) -> HTTPResult { rpc("files/list_folder/continue", #"{"cursor":"\#(cursor)"}"#) }
}

func withFixture(files: [String: String] = [:], _ configure: (inout EmulatorConfiguration) -> Void = { _ in },
                 _ body: (Fixture) throws -> Void) throws {
    let f = try Fixture(files: files, configure)
    defer { f.close() }
    try body(f)
}

func errorTags(_ r: HTTPResult) -> [String] {
    var tags: [String] = []
    var node = r.json["error"] as? [String: Any]
    while let n = node, let tag = n[".tag"] as? String {
        tags.append(tag)
        node = n[tag] as? [String: Any]
    }
    return tags
}
