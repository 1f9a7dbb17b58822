// Real photos for the demo tree and the tests, drawn with libgd: a sky gradient, a sun, hills,
// a few translucent shapes and the photo's number in large seven-segment digits, so each one
// looks different in a file manager and its thumbnails can be told apart. Photo N depends only on
// the seed and N, so `--count 10` and `--count 20` share their first ten files.

import CGD

#if canImport(Glibc)
import Glibc
#endif

public struct SamplePhotoError: Error, CustomStringConvertible {
    public let description: String
}

public enum SamplePhotos {
    /// Encodings the drawings can be written in; `make-photos` writes JPEG and PNG, the tests
    /// the others too.
    enum Encoding: String, CaseIterable { case jpeg, png, webp, gif, bmp, tiff }

    /// Landscape sizes from VGA to a 6-megapixel camera; a third of the photos are turned
    /// portrait.
    static let sizes: [(Int, Int)] = [(640, 480), (800, 600), (1024, 768), (1280, 960), (1600, 1200), (1920, 1080),
                                      (2048, 1536), (3000, 2000)]

    /// Writes `count` photos into `directory` (created if missing), named `IMG_0001.jpg`,
    /// `IMG_0002.png`, ...; returns the names in order.
    public static func write(count: Int, seed: UInt64, into directory: String) throws(SamplePhotoError) -> [String] {
        guard count >= 0, count <= 9999 else { throw SamplePhotoError(description: "count must be 0-9999, not \(count)") }
        try makeDirectory(directory)
        var names: [String] = []
        for number in stride(from: 1, through: count, by: 1) {
            var rng = SeededGenerator(seed: seed &+ UInt64(number) &* 0x9E37_79B9_7F4A_7C15)
            var (width, height) = sizes[Int(rng.next() % UInt64(sizes.count))]
            if rng.next() % 3 == 0 { swap(&width, &height) }
            let encoding: Encoding = rng.next() % 3 == 0 ? .png : .jpeg
            let name = "IMG_" + String(repeating: "0", count: max(0, 4 - String(number).count)) + String(number)
                + (encoding == .png ? ".png" : ".jpg")
            guard let bytes = photo(number: number, width: width, height: height, encoding: encoding, rng: &rng) else {
                throw SamplePhotoError(description: "libgd could not encode \(name)")
            }
            try writeFile(directory + "/" + name, bytes)
            names.append(name)
        }
        return names
    }

    /// One photo, encoded; nil if libgd fails.
    static func photo(number: Int, width: Int, height: Int, encoding: Encoding, seed: UInt64 = 1) -> [UInt8]? {
        var rng = SeededGenerator(seed: seed)
        return photo(number: number, width: width, height: height, encoding: encoding, rng: &rng)
    }

    static func photo(number: Int, width: Int, height: Int, encoding: Encoding, rng: inout SeededGenerator) -> [UInt8]? {
        guard let image = draw(number: number, width: width, height: height, rng: &rng) else { return nil }
        let im = image.pointer
        return switch encoding {
        case .jpeg: encoded { gdImageJpegPtr(im, $0, 88) }
        case .png: encoded { gdImagePngPtr(im, $0) }
        case .webp: encoded { gdImageWebpPtr(im, $0) }
        case .gif: encoded { gdImageGifPtr(im, $0) }
        case .bmp: encoded { gdImageBmpPtr(im, $0, 0) }
        case .tiff: encoded { gdImageTiffPtr(im, $0) }
        }
    }

    static func draw(number: Int, width: Int, height: Int, rng: inout SeededGenerator) -> GDImage? {
        guard let image = GDImage(trueColorWidth: width, height: height) else { return nil }
        let im = image.pointer
        func channel() -> Int { Int(rng.next() % 256) }
        func mix(_ a: Int, _ b: Int, _ t: Double) -> Int { Int(Double(a) + (Double(b) - Double(a)) * t) }
        func random(_ range: ClosedRange<Int>) -> Int { range.lowerBound + Int(rng.next() % UInt64(range.count)) }
        let short = min(width, height)

        // Sky: one line per row from a random top colour to a random horizon colour.
        let top = (channel(), channel(), channel())
        let horizon = (channel(), channel(), channel())
        for y in 0..<height {
            let t = Double(y) / Double(max(1, height - 1))
            let c = gdColor(mix(top.0, horizon.0, t), mix(top.1, horizon.1, t), mix(top.2, horizon.2, t))
            gdImageLine(im, 0, Int32(y), Int32(width - 1), Int32(y), c)
        }

        // Sun with a translucent halo.
        let sunX = Int32(random(short / 8...width - short / 8)), sunY = Int32(random(short / 8...height / 2))
        let radius = Int32(random(short / 12...short / 6))
        gdImageFilledEllipse(im, sunX, sunY, radius * 4, radius * 4, gdColor(255, 240, 200, alpha: 100))
        gdImageFilledEllipse(im, sunX, sunY, radius * 2, radius * 2, gdColor(255, random(170...230), random(40...120)))

        // Two or three ranges of hills, each lower and darker than the one behind it.
        let ranges = random(2...3)
        for r in 0..<ranges {
            let base = height * (55 + r * 12) / 100
            var points: [gdPoint] = [gdPoint(x: 0, y: Int32(height))]
            let steps = random(4...9)
            for s in 0...steps {
                let x = width * s / steps
                points.append(gdPoint(x: Int32(x), y: Int32(base - random(0...max(1, height / 6)))))
            }
            points.append(gdPoint(x: Int32(width), y: Int32(height)))
            let shade = 40 + r * 25
            let color = gdColor(max(0, horizon.0 / 3 - shade / 2), min(255, shade + random(20...90)), max(0, horizon.2 / 4))
            gdImageFilledPolygon(im, &points, Int32(points.count), color)
        }

        // Translucent shapes.
        for _ in 0..<random(3...7) {
            let x = Int32(random(0...width)), y = Int32(random(0...height))
            let w = Int32(random(short / 10...short / 3)), h = Int32(random(short / 10...short / 3))
            let color = gdColor(channel(), channel(), channel(), alpha: random(40...90))
            if rng.next() % 2 == 0 {
                gdImageFilledEllipse(im, x, y, w, h, color)
            } else {
                gdImageFilledRectangle(im, x, y, x + w, y + h, color)
            }
        }

        // The number, a third of the short side tall, with a shadow.
        let digitHeight = max(12, short / 3)
        let digits = Array(String(number))
        let digitWidth = digitHeight * 11 / 20
        let gap = digitHeight / 8
        let total = digits.count * digitWidth + (digits.count - 1) * gap
        let originX = (width - total) / 2, originY = (height - digitHeight) / 2
        for (shadow, color) in [(max(2, digitHeight / 30), gdColor(0, 0, 0, alpha: 60)), (0, gdColor(255, 255, 255))] {
            for (i, digit) in digits.enumerated() {
                sevenSegment(im, digit: digit, x: originX + i * (digitWidth + gap) + shadow, y: originY + shadow,
                             width: digitWidth, height: digitHeight, color: color)
            }
        }
        // A thin frame, as a print would have.
        gdImageRectangle(im, 0, 0, Int32(width - 1), Int32(height - 1), gdColor(255, 255, 255))
        return image
    }

    /// Segments a...g clockwise from the top, g in the middle.
    static func sevenSegment(_ im: gdImagePtr, digit: Character, x: Int, y: Int, width: Int, height: Int, color: Int32) {
        let lit: [Character: String] = ["0": "abcdef", "1": "bc", "2": "abged", "3": "abgcd", "4": "fgbc", "5": "afgcd",
                                        "6": "afgedc", "7": "abc", "8": "abcdefg", "9": "abcdfg"]
        let t = max(2, height / 7), mid = height / 2
        let boxes: [Character: (Int, Int, Int, Int)] = [
            "a": (t, 0, width - t, t), "d": (t, height - t, width - t, height), "g": (t, mid - t / 2, width - t, mid + t / 2),
            "f": (0, t, t, mid), "b": (width - t, t, width, mid), "e": (0, mid, t, height - t), "c": (width - t, mid, width, height - t),
        ]
        for segment in lit[digit] ?? "" {
            guard let (x1, y1, x2, y2) = boxes[segment] else { continue }
            gdImageFilledRectangle(im, Int32(x + x1), Int32(y + y1), Int32(x + x2 - 1), Int32(y + y2 - 1), color)
        }
    }

    static func makeDirectory(_ path: String) throws(SamplePhotoError) {
        var prefix = path.hasPrefix("/") ? "/" : ""
        for part in path.split(separator: "/") {
            prefix += part + "/"
            if mkdir(prefix, 0o755) != 0, errno != EEXIST {
                throw SamplePhotoError(description: "cannot create \(prefix): \(String(cString: strerror(errno)))")
            }
        }
        var st = stat()
        guard stat(path, &st) == 0, st.st_mode & S_IFMT == S_IFDIR else {
            throw SamplePhotoError(description: "\(path) is not a directory")
        }
    }

    static func writeFile(_ path: String, _ bytes: [UInt8]) throws(SamplePhotoError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw SamplePhotoError(description: "cannot write \(path): \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        var done = 0
        while done < bytes.count {
            let n = bytes.withUnsafeBytes { raw in Glibc.write(fd, raw.baseAddress! + done, raw.count - done) }
            if n < 0, errno == EINTR { continue }
            guard n > 0 else { throw SamplePhotoError(description: "cannot write \(path): \(String(cString: strerror(errno)))") }
            done += n
        }
    }
}
