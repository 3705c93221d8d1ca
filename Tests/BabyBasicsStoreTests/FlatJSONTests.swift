@testable import BabyBasicsStore
import Foundation
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
        let members = try #require(parse(text))
        let fast = try #require(EventData(members: members))
        let slow = try JSONDecoder().decode(EventData.self, from: Data(text.utf8))
        #expect(fast == slow)
        let soggy = try #require(parse(#"{"contents":"soggy"}"#))
        #expect(EventData(members: soggy) == nil)
    }
}
