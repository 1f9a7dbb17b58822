// The HTTP side: one listener serves every Dropbox host role (api, content, notify), OAuth and
// the `/__` admin routes. Event loops only parse, route and write; anything that touches the
// disk runs on the blocking thread pool. Downloads go out through sendfile (a FileRegion) when
// nothing needs to see the bytes; TLS, the bandwidth cap and truncation stream pread chunks
// instead, one chunk in flight per connection so a slow reader holds back the disk, not memory.

import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import Synchronization

#if canImport(Glibc)
import Glibc
#endif

public final class DropboxEmulatorServer: Sendable {
    private let group: MultiThreadedEventLoopGroup
    private let threadPool: NIOThreadPool
    private let listener: Channel
    private let index: FileIndex
    private let connections: ConnectionSet
    private let stopped = Mutex(false)
    /// "http://127.0.0.1:PORT", or https when TLS is configured.
    public let baseURL: String
    public let port: Int
    private let router: Router
    /// URLs of the links `EmulatorConfiguration.sharedLinks` published, in its order.
    public let sharedLinkURLs: [String]

    public static func start(_ configuration: EmulatorConfiguration) throws -> DropboxEmulatorServer {
        try DropboxEmulatorServer(configuration)
    }

    private init(_ configuration: EmulatorConfiguration) throws {
        var sslContext: NIOSSLContext?
        if configuration.tlsCertificatePath != nil || configuration.tlsKeyPath != nil {
            guard let certPath = configuration.tlsCertificatePath, let keyPath = configuration.tlsKeyPath else {
                throw EmulatorError.tls("both a certificate and a key are needed")
            }
            do {
                let chain = try NIOSSLCertificate.fromPEMFile(certPath)
                let key = try NIOSSLPrivateKey(file: keyPath, format: .pem)
                let tls = TLSConfiguration.makeServerConfiguration(certificateChain: chain.map { .certificate($0) }, privateKey: .privateKey(key))
                sslContext = try NIOSSLContext(configuration: tls)
            } catch {
                throw EmulatorError.tls("cannot load \(certPath) / \(keyPath): \(error)")
            }
        }
        let index = try FileIndex(rootPath: configuration.root)
        if !configuration.lazyContentHashes { index.precomputeHashes() }
        let group = MultiThreadedEventLoopGroup(numberOfThreads: max(2, min(System.coreCount, 8)))
        let pool = NIOThreadPool(numberOfThreads: max(8, System.coreCount * 2))
        pool.start()
        let state = ServerState(configuration: configuration)
        let router = Router(index: index, auth: AuthStore(configuration: configuration), server: state, configuration: configuration)
        var linkURLs: [String] = []
        for link in configuration.sharedLinks {
            do {
                linkURLs.append(try router.sharedLinks.publish(path: link.path, password: link.password, expires: nil, index: index))
            } catch {
                index.stop()
                throw EmulatorError.sharedLink("\(error)")
            }
        }
        let app = App(
            router: router,
            state: state, threadPool: pool, usesTLS: sslContext != nil
        )
        let connections = ConnectionSet()
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.backlog, value: 1024)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.socketOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                connections.insert(channel)
                state.countConnection()
                return channel.eventLoop.makeCompletedFuture {
                    if let sslContext {
                        try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: sslContext))
                    }
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(withErrorHandling: true)
                    try channel.pipeline.syncOperations.addHandler(HTTPHandler(app: app))
                }
            }
        let listener: Channel
        do {
            listener = try bootstrap.bind(host: configuration.host, port: configuration.port).wait()
        } catch {
            try? pool.syncShutdownGracefully()
            try? group.syncShutdownGracefully()
            index.stop()
            throw error
        }
        index.startWatching()
        self.group = group
        self.threadPool = pool
        self.listener = listener
        self.index = index
        self.router = router
        self.sharedLinkURLs = linkURLs
        self.connections = connections
        self.port = listener.localAddress?.port ?? configuration.port
        let host = configuration.host.contains(":") ? "[\(configuration.host)]" : configuration.host
        self.baseURL = "\(sslContext == nil ? "http" : "https")://\(host):\(port)"
    }

    /// Publishes a served path as a shared link (see `POST /__admin/shared_links`) and returns its URL.
    public func publishSharedLink(path: String, password: String? = nil, expires: Int? = nil) throws -> String {
        try router.sharedLinks.publish(path: path, password: password, expires: expires, index: index)
    }

    /// Closes the listener and every connection, then joins all threads. Idempotent.
    public func stop() {
        let already = stopped.withLock { s in let was = s; s = true; return was }
        guard !already else { return }
        try? listener.close().wait()
        for channel in connections.all() { try? channel.close().wait() }
        // Wakes pending longpolls, whose promises complete on the (still running) event loops.
        index.stop()
        try? threadPool.syncShutdownGracefully()
        try? group.syncShutdownGracefully()
    }

    deinit { stop() }
}

/// Open connections, so `stop()` can close them.
final class ConnectionSet: Sendable {
    private let channels = Mutex<[ObjectIdentifier: Channel]>([:])

    func insert(_ channel: Channel) {
        let key = ObjectIdentifier(channel)
        channels.withLock { $0[key] = channel }
        channel.closeFuture.whenComplete { [weak self] _ in self?.channels.withLock { $0[key] = nil } }
    }

    func all() -> [Channel] { channels.withLock { Array($0.values) } }
}

/// What every connection's handler needs.
struct App: Sendable {
    let router: Router
    let state: ServerState
    let threadPool: NIOThreadPool
    let usesTLS: Bool
}

final class HTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let app: App
    private var head: HTTPRequestHead?
    private var body: [UInt8] = []
    private var bodyTooLarge = false
    /// When this connection may send its next body bytes under `connection_bandwidth`.
    private var connectionFreeAt = NIODeadline.uptimeNanoseconds(0)
    static let maxBody = 16 * 1024 * 1024

    init(app: App) { self.app = app }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h):
            head = h
            body = []
            bodyTooLarge = false
        case .body(var buffer):
            if body.count + buffer.readableBytes > HTTPHandler.maxBody {
                bodyTooLarge = true
            } else {
                body += buffer.readBytes(length: buffer.readableBytes) ?? []
            }
        case .end:
            guard let head else { return }
            self.head = nil
            let keepAlive = head.isKeepAlive
            if bodyTooLarge {
                respond(context: context, reply: .text(.payloadTooLarge, "Request body too large", [:]), keepAlive: false, download: false)
                return
            }
            let (path, query) = HTTPHandler.split(uri: head.uri)
            let request = EmulatorRequest(method: head.method, path: path, query: query, headers: head.headers, body: body)
            body = []
            dispatch(context: context, request: request, keepAlive: keepAlive)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: Error) {
        context.close(promise: nil)
    }

    static func split(uri: String) -> (String, [String: String]) {
        guard let q = uri.firstIndex(of: "?") else { return (percentDecode(Substring(uri), plusIsSpace: false), [:]) }
        return (percentDecode(uri[..<q], plusIsSpace: false), parseForm(uri[uri.index(after: q)...]))
    }

    private func dispatch(context: ChannelHandlerContext, request: EmulatorRequest, keepAlive: Bool) {
        if request.path.hasPrefix("/__") {
            respond(context: context, reply: Admin.handle(request, app: app), keepAlive: keepAlive, download: false, admin: true)
            return
        }
        let route: String
        if request.path.hasPrefix("/2/") {
            route = String(request.path.dropFirst(3))
        } else if request.path == "/oauth2/token" || request.path == "/oauth2/authorize" {
            route = String(request.path.dropFirst())
        } else {
            respond(context: context, reply: .text(.notFound, "Not found: \(request.path)", [:]), keepAlive: keepAlive, download: false)
            return
        }
        app.state.countRequest(route)
        let isDownload = route == "files/download" || route == "files/export" || route == "sharing/get_shared_link_file"
        let proceed = { [app] in
            if !app.state.admitRequest() {
                self.respond(context: context, reply: .rateLimited(), keepAlive: keepAlive, download: false)
                return
            }
            if request.path.hasPrefix("/2/"), let fault = app.state.drawFault() {
                let reply: Reply = switch fault {
                case .status500: .text(.internalServerError, "Internal Server Error (injected)", [:])
                case .status503: .text(.serviceUnavailable, "Service Unavailable (injected)", ["Retry-After": "1"])
                case .status429: .rateLimited()
                }
                self.respond(context: context, reply: reply, keepAlive: keepAlive, download: false)
                return
            }
            let loop = context.eventLoop
            let work = app.threadPool.runIfActive(eventLoop: loop) { () -> Reply in
                if route.hasPrefix("oauth2/") { return OAuth.handle(route: route, request: request, router: app.router) }
                return app.router.handleAPI(route: route, request: request, eventLoop: loop)
            }
            work.assumeIsolated().whenComplete { result in
                switch result {
                case .success(let reply): self.respond(context: context, reply: reply, keepAlive: keepAlive, download: isDownload)
                case .failure(let error): self.respond(context: context, reply: .text(.serviceUnavailable, "server stopping: \(error)", [:]), keepAlive: false, download: false)
                }
            }
        }
        let latency = app.state.currentKnobs.latency
        if latency > .zero {
            let nanos = latency.components.seconds * 1_000_000_000 + latency.components.attoseconds / 1_000_000_000
            context.eventLoop.assumeIsolated().scheduleTask(in: .nanoseconds(nanos), proceed)
        } else {
            proceed()
        }
    }

    private static func requestID() -> String {
        var out = ""
        for _ in 0..<2 { let v = UInt64.random(in: 0...UInt64.max); let s = String(v, radix: 16); out += String(repeating: "0", count: 16 - s.count) + s }
        return out
    }

    private func baseHeaders(_ extra: HTTPHeaders, keepAlive: Bool) -> HTTPHeaders {
        var headers = extra
        headers.replaceOrAdd(name: "X-Dropbox-Request-Id", value: HTTPHandler.requestID())
        headers.replaceOrAdd(name: "Date", value: httpDate(time(nil)))
        if !keepAlive { headers.replaceOrAdd(name: "Connection", value: "close") }
        return headers
    }

    private func finish(context: ChannelHandlerContext, keepAlive: Bool) -> EventLoopPromise<Void> {
        let promise = context.eventLoop.makePromise(of: Void.self)
        if !keepAlive {
            promise.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
        }
        return promise
    }

    func respond(context: ChannelHandlerContext, reply: Reply, keepAlive: Bool, download: Bool, admin: Bool = false) {
        switch reply {
        case .later(let future):
            future.hop(to: context.eventLoop).assumeIsolated().whenComplete { result in
                let r: Reply = (try? result.get()) ?? .text(.internalServerError, "internal error", [:])
                self.respond(context: context, reply: r, keepAlive: keepAlive, download: download, admin: admin)
            }
        case .json(let status, let value, let extra):
            var headers = extra
            headers.replaceOrAdd(name: "Content-Type", value: "application/json")
            sendBuffered(context: context, status: status, headers: headers, body: value.serializedBytes(), keepAlive: keepAlive, admin: admin)
        case .text(let status, let text, let extra):
            var headers = extra
            headers.replaceOrAdd(name: "Content-Type", value: "text/plain; charset=utf-8")
            sendBuffered(context: context, status: status, headers: headers, body: Array(text.utf8), keepAlive: keepAlive, admin: admin)
        case .empty(let status, let extra):
            var headers = baseHeaders(extra, keepAlive: keepAlive)
            if status != .notModified { headers.replaceOrAdd(name: "Content-Length", value: "0") }
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: finish(context: context, keepAlive: keepAlive))
        case .file(let status, let extra, let file):
            sendFile(context: context, status: status, extra: extra, file: file, keepAlive: keepAlive)
        case .bytes(let status, let extra, let body):
            // A download-style body, so the truncation dice apply as they do to files.
            let cut = app.state.drawTruncation(length: Int64(body.count)).map { Int($0) }
            sendBuffered(context: context, status: status, headers: extra, body: body, keepAlive: keepAlive, admin: admin, cut: cut)
        }
    }

    /// - Parameter cut: send only this many bytes of `body`, then close the connection.
    private func sendBuffered(context: ChannelHandlerContext, status: HTTPResponseStatus, headers extra: HTTPHeaders, body: [UInt8], keepAlive: Bool, admin: Bool, cut: Int? = nil) {
        var headers = baseHeaders(extra, keepAlive: keepAlive && cut == nil)
        headers.replaceOrAdd(name: "Content-Length", value: String(body.count))
        let write = { [app] in
            let sent = cut ?? body.count
            var buffer = context.channel.allocator.buffer(capacity: sent)
            buffer.writeBytes(body[..<sent])
            context.write(self.wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
            if cut != nil {
                let written = context.eventLoop.makePromise(of: Void.self)
                context.writeAndFlush(self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: written)
                written.futureResult.assumeIsolated().whenComplete { _ in context.close(promise: nil) }
            } else {
                context.write(self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: nil)
                context.writeAndFlush(self.wrapOutboundOut(.end(nil)), promise: self.finish(context: context, keepAlive: keepAlive))
            }
            if !admin { app.state.countBytes(sent, download: false) }
        }
        let delay = admin ? .zero : bodyDelay(body.count)
        if delay > .zero {
            context.eventLoop.assumeIsolated().scheduleTask(in: delay, write)
        } else {
            write()
        }
    }

    private func sendFile(context: ChannelHandlerContext, status: HTTPResponseStatus, extra: HTTPHeaders, file: FileBody, keepAlive: Bool) {
        var headers = baseHeaders(extra, keepAlive: keepAlive)
        headers.replaceOrAdd(name: "Content-Length", value: String(file.length))
        let cut = app.state.drawTruncation(length: file.length)
        let knobs = app.state.currentKnobs
        let capped = knobs.bandwidthBytesPerSecond != nil || knobs.connectionBandwidthBytesPerSecond != nil
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: status, headers: headers))), promise: nil)
        let inFlight = DownloadInFlight(app.state)
        if !app.usesTLS, !capped, cut == nil {
            // sendfile(2): the bytes never enter user space.
            let handle = NIOFileHandle(_deprecatedTakingOwnershipOfDescriptor: file.fd)
            if file.length > 0 {
                let region = FileRegion(fileHandle: handle, readerIndex: Int(file.offset), endIndex: Int(file.offset + file.length))
                context.write(wrapOutboundOut(.body(.fileRegion(region))), promise: nil)
            }
            let done = finish(context: context, keepAlive: keepAlive)
            let state = app.state
            done.futureResult.whenComplete { result in
                inFlight.end()
                try? handle.close()
                if case .success = result { state.countBytes(Int(file.length), download: true) }
            }
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: done)
            return
        }
        context.flush()
        if !app.usesTLS, cut == nil {
            // Capped: paced chunks, still by sendfile(2). Copying them through user space would
            // make the emulator, not the link it models, cost the machine's CPU, which the client
            // under test shares on a small machine.
            let handle = NIOFileHandle(_deprecatedTakingOwnershipOfDescriptor: file.fd)
            pumpRegions(context: context, handle: handle, file: file, sent: 0, keepAlive: keepAlive, inFlight: inFlight)
            return
        }
        pump(context: context, file: file, sent: 0, limit: cut ?? file.length, keepAlive: keepAlive, inFlight: inFlight)
    }

    /// The bytes one paced step sends: 256 KiB, or a twentieth of a second at a lower cap (the
    /// link's or the connection's, whichever is lower).
    private static func chunkSize(_ knobs: Knobs) -> Int64 {
        let chunk = Int64(256 * 1024)
        let rates = [knobs.bandwidthBytesPerSecond, knobs.connectionBandwidthBytesPerSecond].compactMap { $0 }
        guard let rate = rates.min() else { return chunk }
        return min(chunk, Int64(max(1024, rate / 20)))
    }

    /// How long to wait before sending `bytes` of a body: the link's cap, shared by all
    /// connections, and this connection's own.
    private func bodyDelay(_ bytes: Int) -> TimeAmount {
        let link = app.state.reserveBandwidth(bytes)
        guard let rate = app.state.currentKnobs.connectionBandwidthBytesPerSecond, rate > 0 else { return link }
        let now = NIODeadline.now()
        let start = max(connectionFreeAt, now)
        connectionFreeAt = start + .nanoseconds(Int64(Double(bytes) / Double(rate) * 1e9))
        return max(link, start - now)
    }

    /// Sends one paced chunk of a plain-HTTP capped download as a file region, then the next once
    /// it is written.
    private func pumpRegions(context: ChannelHandlerContext, handle: NIOFileHandle, file: FileBody, sent: Int64, keepAlive: Bool,
                             inFlight: DownloadInFlight) {
        let state = app.state
        if sent >= file.length {
            inFlight.end()
            try? handle.close()
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: finish(context: context, keepAlive: keepAlive))
            return
        }
        let size = min(Self.chunkSize(state.currentKnobs), file.length - sent)
        let send = {
            let start = Int(file.offset + sent)
            let region = FileRegion(fileHandle: handle, readerIndex: start, endIndex: start + Int(size))
            let written = context.eventLoop.makePromise(of: Void.self)
            context.writeAndFlush(self.wrapOutboundOut(.body(.fileRegion(region))), promise: written)
            written.futureResult.assumeIsolated().whenComplete { result in
                guard case .success = result else { try? handle.close(); return }
                state.countBytes(Int(size), download: true)
                self.pumpRegions(context: context, handle: handle, file: file, sent: sent + size, keepAlive: keepAlive, inFlight: inFlight)
            }
        }
        let delay = self.bodyDelay(Int(size))
        if delay > .zero { context.eventLoop.assumeIsolated().scheduleTask(in: delay, send) } else { send() }
    }

    /// Streams one chunk, then the next once the previous one is written.
    private func pump(context: ChannelHandlerContext, file: FileBody, sent: Int64, limit: Int64, keepAlive: Bool,
                      inFlight: DownloadInFlight) {
        let state = app.state
        if sent >= limit {
            inFlight.end()
            close(file.fd)
            if limit < file.length {
                // Injected truncation: the client sees a short body and a closed connection.
                context.close(promise: nil)
            } else {
                context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: finish(context: context, keepAlive: keepAlive))
            }
            return
        }
        let size = Int(min(Self.chunkSize(state.currentKnobs), limit - sent))
        let offset = file.offset + sent
        let read = app.threadPool.runIfActive(eventLoop: context.eventLoop) { () -> ByteBuffer in
            var buffer = ByteBufferAllocator().buffer(capacity: size)
            let n = buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: size) { raw in
                max(0, pread(file.fd, raw.baseAddress, size, off_t(offset)))
            }
            if n == 0 { throw IOError(errnoCode: EIO, reason: "short read") }
            return buffer
        }
        read.assumeIsolated().whenComplete { result in
            guard case .success(let buffer) = result else {
                close(file.fd)
                context.close(promise: nil)
                return
            }
            let n = buffer.readableBytes
            let send = {
                let written = context.eventLoop.makePromise(of: Void.self)
                context.writeAndFlush(self.wrapOutboundOut(.body(.byteBuffer(buffer))), promise: written)
                written.futureResult.assumeIsolated().whenComplete { result in
                    guard case .success = result else { close(file.fd); return }
                    state.countBytes(n, download: true)
                    self.pump(context: context, file: file, sent: sent + Int64(n), limit: limit, keepAlive: keepAlive, inFlight: inFlight)
                }
            }
            let delay = self.bodyDelay(n)
            if delay > .zero { context.eventLoop.assumeIsolated().scheduleTask(in: delay, send) } else { send() }
        }
    }
}

/// One download body being sent, counted in the emulator's `download_peak`. It ends when its last
/// byte is written or, if the connection failed first, when the last step holding it is gone.
final class DownloadInFlight: Sendable {
    private let state: ServerState
    private let ended = Atomic(false)

    init(_ state: ServerState) {
        self.state = state
        state.downloadStarted()
    }

    func end() {
        if !ended.exchange(true, ordering: .relaxed) { state.downloadEnded() }
    }

    deinit { end() }
}
