/// Strict UTF-8 checking that says where the first bad byte is (Swift's own decoding would
/// silently replace it with U+FFFD).
enum UTF8Validation {
    struct Problem: Equatable {
        /// 0-based offset of the first byte that is not valid UTF-8, or a NUL.
        let offset: Int
    }

    /// The first invalid (or NUL) byte, or nil when `bytes` is valid, NUL-free UTF-8.
    static func firstProblem(in bytes: [UInt8]) -> Problem? {
        var index = 0
        func continuation(_ offset: Int, _ range: ClosedRange<UInt8> = 0x80...0xBF) -> Bool {
            offset < bytes.count && range.contains(bytes[offset])
        }
        while index < bytes.count {
            let lead = bytes[index]
            let length: Int
            switch lead {
            case 0x00: return Problem(offset: index)
            case 0x01...0x7F: length = 1
            case 0xC2...0xDF: length = continuation(index + 1) ? 2 : 0
            case 0xE0: length = continuation(index + 1, 0xA0...0xBF) && continuation(index + 2) ? 3 : 0
            case 0xE1...0xEC, 0xEE...0xEF: length = continuation(index + 1) && continuation(index + 2) ? 3 : 0
            case 0xED: length = continuation(index + 1, 0x80...0x9F) && continuation(index + 2) ? 3 : 0
            case 0xF0: length = continuation(index + 1, 0x90...0xBF) && continuation(index + 2) && continuation(index + 3) ? 4 : 0
            case 0xF1...0xF3: length = continuation(index + 1) && continuation(index + 2) && continuation(index + 3) ? 4 : 0
            case 0xF4: length = continuation(index + 1, 0x80...0x8F) && continuation(index + 2) && continuation(index + 3) ? 4 : 0
            default: length = 0
            }
            guard length > 0 else { return Problem(offset: index) }
            index += length
        }
        return nil
    }
}
