/// The name a document Dropbox cannot download is shown under: its own name with the extension
/// replaced by the export format's ("Notes.paper" exported as html is "Notes.html").
enum ExportName {
    static func visibleName(_ name: String, exportAs format: String) -> String {
        let ext = format == "markdown" ? "md" : format
        let stem = name.lastIndex(of: ".").map { name[..<$0] }.flatMap { $0.isEmpty ? nil : String($0) } ?? name
        return stem + "." + ext
    }
}
