/// Where the change feed stands. While it is live, a complete folder is trusted without a TTL:
/// every change reaches the tree through `list_folder/continue`.
struct FeedStatus {
    var live = false
    /// Last time the feed heard from Dropbox (monotonic seconds).
    var lastContact = -Double.infinity
    /// A tree loaded from the persistent cache is being brought up to date with `continue`.
    var catchingUp = false
    var cursor: String?
    /// The tree changed (a fill, or a batch with entries) since it was last saved; an idle feed
    /// therefore never rewrites the whole saved tree.
    var unsaved = false
}
