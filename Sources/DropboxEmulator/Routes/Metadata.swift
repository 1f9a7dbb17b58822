// files/get_metadata.

import NIOCore
import NIOHTTP1

#if canImport(Glibc)
import Glibc
#endif

extension Router {

    func getMetadata(arg: JSON, request: EmulatorRequest, route: String) -> Reply {
        do {
            let path = try pathArg(arg, route: route, readPath: true).get()
            let includeDeleted = try boolArg(arg, "include_deleted", default: false, route: route).get()
            _ = try boolArg(arg, "include_media_info", default: false, route: route).get()
            _ = try boolArg(arg, "include_has_explicit_shared_members", default: false, route: route).get()
            let base = try pathBase(request, route: route).get()
            switch resolve(path, base: base) {
            case .success(.root):
                return .badInput(route, "request body: path: The root folder is unsupported.")
            case .success(.entry(let e)):
                return .json(metadata(index.withHashes([e])[0], base: base.count))
            case .failure(let failure):
                if includeDeleted, path.hasPrefix("/"), case .json(.conflict, _, _) = failure.reply {
                    let rel = path.dropFirst().split(separator: "/").map(String.init)
                    if let name = rel.last, index.wasDeleted(lower: (base + rel.map { $0.dropboxLowercased })) {
                        let real = (base.isEmpty ? [] : [configuration.teamHomeFolder]) + rel
                        return .json(metadata(EntrySnapshot(kind: .deleted, name: name, components: real), base: base.count))
                    }
                }
                return failure.reply
            }
        } catch {
            return error.reply
        }
    }
}
