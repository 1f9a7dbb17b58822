import DropboxClient
import Foundation
import Synchronization

/// Runs at most one fetch per key at a time: callers who arrive while a fetch for their key is
/// under way wait for it and share its result, so two `ls` of one cold folder make one list chain.
final class SingleFlight<Key: Hashable & Sendable, Value: Sendable>: Sendable {
    // A call is created by the leader, and its `result` is written once, under `condition`.
    private final class Call: @unchecked Sendable {
        let condition = NSCondition()
        var result: Result<Value, FSError>?
    }

    private let inFlight = Mutex<[Key: Call]>([:])

    func run(_ key: Key, _ fetch: () throws(FSError) -> Value) throws(FSError) -> Value {
        let (call, isLeader) = inFlight.withLock { calls -> (Call, Bool) in
            if let existing = calls[key] { return (existing, false) }
            let call = Call()
            calls[key] = call
            return (call, true)
        }
        if isLeader {
            let result: Result<Value, FSError>
            // Shared: an interrupt of the leader's request must not cancel what the others wait for.
            do { result = .success(try CallCancellation.shared(fetch)) } catch { result = .failure(error) }
            inFlight.withLock { _ = $0.removeValue(forKey: key) }
            call.condition.lock()
            call.result = result
            call.condition.broadcast()
            call.condition.unlock()
            return try result.get()
        }
        call.condition.lock()
        while call.result == nil { call.condition.wait() }
        let result = call.result!
        call.condition.unlock()
        return try result.get()
    }
}
