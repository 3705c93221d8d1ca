@testable import BabyBasicsStore
import Foundation
import Postgres
import PostgresTestKit
import Testing

@Suite struct FlatJSONTests {
    func parse(_ text: String) -> [String: FlatJSON.Value]? {
        Array(text.utf8).withUnsafeBytes { FlatJSON.parse($0) }
    }

    @Test func readsFlatObjectsExactly() {
        let members = parse(#" { "category" : "Vitamin \"D\" \\ \/ 👶 \u00e9 \ud83d\udc76\n", "both_sides": true, "amount_ml": 118.5, "x": null, "n": -1e2 } "#)
        #expect(members?["category"] == .string("Vitamin \"D\" \\ / 👶 é 👶\n"))
        #expect(members?["both_sides"] == .bool(true) && members?["amount_ml"] == .number(118.5))
        #expect(members?["x"] == .null && members?["n"] == .number(-100))
        #expect(parse("{}")?.isEmpty == true)
    }

    @Test func refusesWhatIsNotAFlatObject() {
        for text in [#"{"a": {"b": 1}}"#, #"{"a": [1]}"#, #"{"a": 1"#, #"{"a" 1}"#, "[]", #"{"a": 1} x"#, #"{"a": "unterminated}"#] {
            #expect(parse(text) == nil, "\(text)")
        }
    }

    @Test func eventDataFromMembersMatchesTheCodablePath() throws {
        let text = #"{"kind":"bottle","amount_prepared_ml":150,"amount_remaining_ml":20.5,"feeding_started_at":"2026-11-20T08:20:00.123Z"}"#
        let fast = try #require(eventData(text))
        let slow = try JSONDecoder().decode(EventData.self, from: Data(text.utf8))
        #expect(fast == slow)
        #expect(eventData(#"{"contents":"soggy"}"#) == nil)
        #expect(eventData(#"{"contents":"wet","x":[1]}"#) == nil)
        #expect(eventData(#"{"amount_ml":"120"}"#) == nil)
        #expect(eventData(#"{"both_sides":1}"#) == nil)
        #expect(eventData(#"{"started_side":"middle"}"#) == nil)
        #expect(eventData(#"{"contents":"wet","note_from_a_later_version":1}"#) == EventData(.diaper(.wet)))
        #expect(eventData(#"{"kind":null,"category":"vitamin"}"#) == EventData(.note(category: "vitamin")))
    }

    func eventData(_ text: String) -> EventData? {
        Array(text.utf8).withUnsafeBytes { EventData(flatJSON: $0) }
    }

    /// The document as the insert sends it: jsonb's version byte, then the JSON text.
    func written(_ data: EventData) throws -> [UInt8] {
        var buffer: [UInt8] = [7]
        try data.encode(into: &buffer)
        #expect(buffer.prefix(2) == [7, 1], "the writer appends to what the buffer holds, after jsonb's version byte")
        return Array(buffer.dropFirst(2))
    }

    /// The insert's documents were written by `JSONEncoder` (sorted keys); the writer must give
    /// the same bytes, so that what is stored (and what a DBA or an export reads) is unchanged.
    @Test func theWriterWritesWhatJSONEncoderWrote() throws {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        var random = SeededGenerator(seed: 20261129)
        let pieces = ["a", "é", "👶", "\"", "\\", "/", "\n", "\r", "\t", "\u{08}", "\u{0C}", "\u{01}", "\u{1F}", "\u{7F}", " ", "0", "Vitamin D"]
        func text() -> String? {
            guard Bool.random(using: &random) else { return nil }
            return (0..<Int.random(in: 0...6, using: &random)).map { _ in pieces.randomElement(using: &random) ?? "" }.joined()
        }
        func number() -> Double? {
            switch Int.random(in: 0..<6, using: &random) {
            case 0: return nil
            case 1: return Double(Int.random(in: 0...2000, using: &random))
            case 2: return Double(Int.random(in: 0...20000, using: &random)) / 10
            case 3: return Double.random(in: 0...2000, using: &random)
            case 4: return [0.1, -0.0, 1e21, 1e-7, .leastNonzeroMagnitude, .greatestFiniteMagnitude, 0x1.ac53a7df93d6ap+66, 29.5735].randomElement(using: &random)
            default: return -Double.random(in: 0...1e6, using: &random)
            }
        }
        func flag() -> Bool? { [nil, true, false].randomElement(using: &random) ?? nil }
        var samples: [EventData] = [
            EventData(.feeding(.breast(startedSide: .left, bothSides: true))),
            EventData(.feeding(.bottle(amountMl: 120, preparedMl: 150, remainingMl: 30, feedingStartedAt: Date(timeIntervalSince1970: 1_764_000_000.25), refrigerated: true))),
            EventData(.diaper(.both)), EventData(.sleep), EventData(.note(category: "vitamin/\"D\"")),
        ]
        for _ in 0..<500 {
            var data = EventData(.sleep)
            data.kind = text()
            data.startedSide = [nil, .left, .right].randomElement(using: &random) ?? nil
            data.bothSides = flag()
            data.amountMl = number()
            data.amountPreparedMl = number()
            data.amountRemainingMl = number()
            data.feedingStartedAt = text()
            data.refrigerated = flag()
            data.contents = [nil, .wet, .dirty, .both].randomElement(using: &random) ?? nil
            data.category = text()
            samples.append(data)
        }
        for data in samples {
            let ours = try written(data)
            let foundation = Array(try encoder.encode(data))
            #expect(ours == foundation, "\(String(decoding: ours, as: UTF8.self)) ≠ \(String(decoding: foundation, as: UTF8.self))")
            let back = ours.withUnsafeBytes { EventData(flatJSON: $0) }
            #expect(back == data, "read back: \(String(decoding: ours, as: UTF8.self))")
        }
    }

    @Test func aNumberJSONCannotHoldIsRefusedNamingTheField() throws {
        for bad in [Double.nan, .infinity, -.infinity] {
            var data = EventData(.sleep)
            data.amountRemainingMl = bad
            var buffer: [UInt8] = []
            #expect {
                try data.encode(into: &buffer)
            } throws: { error in
                guard let error = error as? PostgresError else { return false }
                return error.kind == .invalidParameter && error.message.contains("amount_remaining_ml")
            }
        }
        var fine = EventData(.sleep)
        fine.amountRemainingMl = 0
        #expect(try written(fine) == Array(#"{"amount_remaining_ml":0}"#.utf8))
    }
}
