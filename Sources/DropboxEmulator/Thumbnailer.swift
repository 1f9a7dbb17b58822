// Thumbnails made the way Dropbox describes them (docs/dropbox-api.md §9): the image is decoded
// with libgd from its bytes, whatever its extension says, scaled down into the asked box by the
// asked mode (never up), flattened onto white unless get_thumbnail_v2 asks to keep transparency,
// and encoded as JPEG, PNG or WebP. JPEG EXIF orientation is ignored: a photo stored on its side
// with an orientation tag comes out on its side.
//
// Every libgd image and buffer has one owner (`GDImage`, `encoded`) that frees it, so no error
// path can leak one. Everything here runs on the server's blocking thread pool.

import CGD

#if canImport(Glibc)
import Glibc
#endif

/// `ThumbnailFormat`.
enum ThumbnailFormat: String, Sendable, CaseIterable {
    case jpeg, png, webp
}

/// `ThumbnailSize`: the box, `w<width>h<height>`.
enum ThumbnailSize: String, Sendable, CaseIterable {
    case w32h32, w64h64, w128h128, w256h256, w480h320, w640h480, w960h640, w1024h768, w2048h1536

    var box: (width: Int, height: Int) {
        switch self {
        case .w32h32: (32, 32)
        case .w64h64: (64, 64)
        case .w128h128: (128, 128)
        case .w256h256: (256, 256)
        case .w480h320: (480, 320)
        case .w640h480: (640, 480)
        case .w960h640: (960, 640)
        case .w1024h768: (1024, 768)
        case .w2048h1536: (2048, 1536)
        }
    }
}

/// `ThumbnailMode`.
enum ThumbnailMode: String, Sendable, CaseIterable {
    case strict, bestfit
    case fitoneBestfit = "fitone_bestfit"
    case original
}

/// Why an image got no thumbnail: `ThumbnailError`'s tags that are about the bytes.
enum ThumbnailFailure: String, Error, Sendable {
    case unsupportedImage = "unsupported_image"
    case conversionError = "conversion_error"
}

/// What one thumbnail is asked to be.
struct ThumbnailSpec: Sendable {
    var format: ThumbnailFormat = .jpeg
    var size: ThumbnailSize = .w64h64
    var mode: ThumbnailMode = .strict
    var jpegQuality: Int32 = 80
    /// ThumbnailV2Arg.preserve_transparency; otherwise transparent pixels are flattened onto white.
    var preserveTransparency = false
}

/// One libgd image, destroyed with its owner. The corresponding C function is `gdImageDestroy`.
struct GDImage: ~Copyable {
    let pointer: gdImagePtr

    init?(_ pointer: gdImagePtr?) {
        guard let pointer else { return nil }
        self.pointer = pointer
    }

    /// A truecolor image; nil when libgd refuses the size.
    init?(trueColorWidth width: Int, height: Int) {
        guard width > 0, height > 0, width <= Int(Int32.max), height <= Int(Int32.max) else { return nil }
        self.init(gdImageCreateTrueColor(Int32(width), Int32(height)))
    }

    var width: Int { Int(pointer.pointee.sx) }
    var height: Int { Int(pointer.pointee.sy) }

    deinit { gdImageDestroy(pointer) }
}

/// Copies a buffer libgd allocated, then frees it (`gdFree`); nil when libgd produced nothing.
func encoded(_ produce: (UnsafeMutablePointer<Int32>) -> UnsafeMutableRawPointer?) -> [UInt8]? {
    var size: Int32 = 0
    guard let buffer = produce(&size) else { return nil }
    defer { gdFree(buffer) }
    guard size > 0 else { return nil }
    return Array(UnsafeRawBufferPointer(start: buffer, count: Int(size)))
}

/// `gdTrueColorAlpha`, a macro Swift cannot import.
@inline(__always) func gdColor(_ r: Int, _ g: Int, _ b: Int, alpha: Int = 0) -> Int32 {
    Int32(alpha << 24 | r << 16 | g << 8 | b)
}

enum Thumbnailer {
    /// Dropbox's documented extensions (case-insensitive); anything else is
    /// `unsupported_extension` without looking at the bytes.
    static let extensions: Set<String> = ["jpg", "jpeg", "png", "tiff", "tif", "gif", "webp", "ppm", "bmp"]
    /// "Photos that are larger than 20MB in size won't be converted to a thumbnail."
    static let maxBytes = 20 * 1024 * 1024

    static func hasSupportedExtension(_ name: String) -> Bool {
        guard let dot = name.lastIndex(of: "."), dot != name.startIndex else { return false }
        return extensions.contains(name[name.index(after: dot)...].lowercased())
    }

    /// The thumbnail's size for an image of `width` x `height`.
    static func fittedSize(width: Int, height: Int, size: ThumbnailSize, mode: ThumbnailMode) -> (width: Int, height: Int) {
        let (bw, bh) = (Double(size.box.width), Double(size.box.height))
        let (w, h) = (Double(width), Double(height))
        let scale: Double
        switch mode {
        case .original: scale = 1
        case .strict: scale = min(bw / w, bh / h)
        case .bestfit: scale = max(min(bw / w, bh / h), min(bh / w, bw / h))
        // The smaller image that still covers the box or its transpose.
        case .fitoneBestfit: scale = min(max(bw / w, bh / h), max(bh / w, bw / h))
        }
        guard scale < 1 else { return (width, height) }  // never scaled up
        return (max(1, Int((w * scale).rounded())), max(1, Int((h * scale).rounded())))
    }

    /// The thumbnail of the image in `bytes`, encoded as `spec.format`.
    static func thumbnail(of bytes: [UInt8], _ spec: ThumbnailSpec) -> Result<[UInt8], ThumbnailFailure> {
        guard let source = decode(bytes) else { return .failure(.unsupportedImage) }
        let (width, height) = fittedSize(width: source.width, height: source.height, size: spec.size, mode: spec.mode)
        guard let target = GDImage(trueColorWidth: width, height: height) else { return .failure(.conversionError) }
        // Copy alpha as it is; flattening below decides what transparency becomes.
        gdImageAlphaBlending(target.pointer, 0)
        gdImageCopyResampled(target.pointer, source.pointer, 0, 0, 0, 0, Int32(width), Int32(height),
                             Int32(source.width), Int32(source.height))
        let keepAlpha = spec.preserveTransparency && spec.format != .jpeg
        if keepAlpha {
            gdImageSaveAlpha(target.pointer, 1)
        } else {
            flattenOntoWhite(target)
        }
        let out: [UInt8]? = switch spec.format {
        case .jpeg: encoded { gdImageJpegPtr(target.pointer, $0, spec.jpegQuality) }
        // zlib level 1: photos compress little at any level, and level 6 costs several times the time.
        case .png: encoded { gdImagePngPtrEx(target.pointer, $0, 1) }
        case .webp: encoded { gdImageWebpPtr(target.pointer, $0) }
        }
        guard let out else { return .failure(.conversionError) }
        return .success(out)
    }

    /// Decodes by the bytes' signature, not the name: Dropbox thumbnails a PNG named `.jpg`.
    static func decode(_ bytes: [UInt8]) -> GDImage? {
        _ = silenceLibgd
        guard bytes.count >= 12, bytes.count <= Int(Int32.max) else { return nil }
        func starts(_ prefix: [UInt8], at offset: Int = 0) -> Bool {
            bytes.count >= offset + prefix.count && Array(bytes[offset..<offset + prefix.count]) == prefix
        }
        if starts([0x50, 0x36]) { return decodeP6(bytes) }  // "P6"
        let decoded = bytes.withUnsafeBytes { raw -> gdImagePtr? in
            let data = UnsafeMutableRawPointer(mutating: raw.baseAddress!)
            let size = Int32(raw.count)
            if starts([0xFF, 0xD8, 0xFF]) {
                // libjpeg fills a truncated file with grey and only warns; a cut photo is not one.
                guard jpegHasEnd(bytes) else { return nil }
                return gdImageCreateFromJpegPtrEx(size, data, 1)
            }
            if starts([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]) { return gdImageCreateFromPngPtr(size, data) }
            if starts(Array("GIF87a".utf8)) || starts(Array("GIF89a".utf8)) { return gdImageCreateFromGifPtr(size, data) }
            if starts(Array("RIFF".utf8)), starts(Array("WEBP".utf8), at: 8) { return gdImageCreateFromWebpPtr(size, data) }
            if starts([0x49, 0x49, 0x2A, 0x00]) || starts([0x4D, 0x4D, 0x00, 0x2A]) { return gdImageCreateFromTiffPtr(size, data) }
            if starts(Array("BM".utf8)) { return gdImageCreateFromBmpPtr(size, data) }
            return nil
        }
        return GDImage(decoded)
    }

    /// libgd reports every bad image on stderr through one process-wide hook; here a bad image
    /// is an answer (`unsupported_image`), not a log line. Set once, before the first decode.
    private static let silenceLibgd: Void = {
        gdSetErrorMethod { _, _, _ in }
    }()

    /// Whether a JPEG's first scan is followed by its end marker (EOI). Markers before the first
    /// scan are skipped by their lengths, since an EXIF preview inside APP1 has an EOI of its own;
    /// inside scan data 0xFF is always followed by 0x00 or a marker, never by a stray 0xD9.
    static func jpegHasEnd(_ bytes: [UInt8]) -> Bool {
        var i = 2
        while i + 3 < bytes.count {
            guard bytes[i] == 0xFF else { return false }
            let marker = bytes[i + 1]
            if marker == 0xFF { i += 1; continue }  // fill byte
            if marker == 0xDA { break }  // start of scan
            if marker == 0xD9 { return false }  // ends before any image data
            i += 2 + (Int(bytes[i + 2]) << 8 | Int(bytes[i + 3]))
        }
        guard i + 1 < bytes.count else { return false }
        var j = i + 2
        while j + 1 < bytes.count {
            if bytes[j] == 0xFF, bytes[j + 1] == 0xD9 { return true }
            j += 1
        }
        return false
    }

    /// Binary PPM (P6), which libgd does not read: `P6 <w> <h> <maxval>`, one whitespace byte,
    /// then RGB samples of one byte (maxval < 256) or two, big-endian.
    static func decodeP6(_ bytes: [UInt8]) -> GDImage? {
        var i = 2
        func isSpace(_ b: UInt8) -> Bool { b == 0x20 || (0x09...0x0D).contains(b) }
        func number() -> Int? {
            while i < bytes.count {
                if isSpace(bytes[i]) { i += 1 } else if bytes[i] == UInt8(ascii: "#") {
                    while i < bytes.count, bytes[i] != 0x0A { i += 1 }
                } else { break }
            }
            var value = 0
            let start = i
            while i < bytes.count, (0x30...0x39).contains(bytes[i]), value < 1 << 20 {
                value = value * 10 + Int(bytes[i] - 0x30)
                i += 1
            }
            return i > start ? value : nil
        }
        guard let width = number(), let height = number(), let maxval = number(),
              width > 0, height > 0, (1...65535).contains(maxval),
              i < bytes.count, isSpace(bytes[i]) else { return nil }
        i += 1
        let sample = maxval < 256 ? 1 : 2
        guard bytes.count - i >= width * height * 3 * sample,
              let image = GDImage(trueColorWidth: width, height: height),
              let rows = image.pointer.pointee.tpixels else { return nil }
        func channel(_ at: Int) -> Int {
            let raw = sample == 1 ? Int(bytes[at]) : Int(bytes[at]) << 8 | Int(bytes[at + 1])
            return raw * 255 / maxval
        }
        for y in 0..<height {
            let row = rows[y]!
            for x in 0..<width {
                let at = i + (y * width + x) * 3 * sample
                row[x] = gdColor(channel(at), channel(at + sample), channel(at + 2 * sample))
            }
        }
        return image
    }

    /// Composites every pixel over opaque white. libgd's alpha runs from 0 (opaque) to 127.
    static func flattenOntoWhite(_ image: borrowing GDImage) {
        guard let rows = image.pointer.pointee.tpixels else { return }
        for y in 0..<image.height {
            let row = rows[y]!
            for x in 0..<image.width {
                let c = Int(row[x])
                let alpha = (c >> 24) & 0x7F
                guard alpha != 0 else { continue }
                func over(_ v: Int) -> Int { (v * (127 - alpha) + 255 * alpha) / 127 }
                row[x] = gdColor(over((c >> 16) & 0xFF), over((c >> 8) & 0xFF), over(c & 0xFF))
            }
        }
    }
}
