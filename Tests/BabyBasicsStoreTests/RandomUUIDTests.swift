@testable import BabyBasicsStore
import Foundation
import Testing

/// The store's own random UUIDs (Foundation's `UUID()` opens `/dev/urandom` for each one).
@Suite struct RandomUUIDTests {
    /// Version 4 and the RFC variant in every one, as text shows them (the 13th hex digit is
    /// the version, the 17th one of 8, 9, a, b); no two alike; every bit of the rest used.
    @Test func versionFourTheRFCVariantAndNoRepeats() {
        let count = 20_000
        var seen = Set<UUID>()
        var ones = [Int](repeating: 0, count: 128)
        for _ in 0..<count {
            let id = UUID.version4()
            let text = id.uuidString.lowercased().replacingOccurrences(of: "-", with: "")
            #expect(Array(text)[12] == "4")
            #expect("89ab".contains(Array(text)[16]))
            seen.insert(id)
            withUnsafeBytes(of: id.uuid) { bytes in
                for bit in 0..<128 where bytes[bit / 8] & (0x80 >> (bit % 8)) != 0 { ones[bit] += 1 }
            }
        }
        #expect(seen.count == count)
        // The six fixed bits (48–51: version; 64, 65: variant) are fixed; each other bit is set
        // in about half the ids (a bit stuck at 0 or 1 is far outside 40–60%).
        let fixed: Set<Int> = [48, 49, 50, 51, 64, 65]
        for bit in 0..<128 where !fixed.contains(bit) {
            #expect(Double(ones[bit]) / Double(count) > 0.4 && Double(ones[bit]) / Double(count) < 0.6, "bit \(bit)")
        }
        #expect(ones[48] == 0 && ones[49] == count && ones[50] == 0 && ones[51] == 0)
        #expect(ones[64] == count && ones[65] == 0)
    }

    /// A draft made without an id gets such a UUID, a new one each time.
    @Test func aDraftWithoutAnIdGetsANewOne() {
        let start = EventTimestamp(utc: Date(), timeZone: "UTC", offsetSeconds: 0)
        let a = EventDraft(childID: UUID.version4(), payload: .diaper(.wet), start: start)
        let b = EventDraft(childID: a.childID, payload: .diaper(.wet), start: start)
        #expect(a.id != b.id)
        #expect(a.id.uuidString.lowercased().dropFirst(14).first == "4")
    }
}
