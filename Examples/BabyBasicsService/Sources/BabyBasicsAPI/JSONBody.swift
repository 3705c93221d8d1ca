import BabyBasicsStore
import Foundation
import Hummingbird
import NIOCore

/// JSON in and out: snake_case keys as the dashboard spec names them, timestamps as ISO 8601
/// with microseconds (`2026-11-25T07:15:03.123456Z`).
enum JSONBody {
    static let encoder: JSONEncoder = {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(ExportCoding.format(date))
        }
        return encoder
    }()

    static let decoder: JSONDecoder = {
        let decoder = JSONDecoder()
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = ExportCoding.parse(text) else {
                throw DecodingError.dataCorruptedError(in: container, debugDescription: "must be an ISO 8601 timestamp such as 2026-11-25T07:15:00Z")
            }
            return date
        }
        return decoder
    }()

    static func response(_ status: HTTPResponse.Status, _ value: some Encodable) -> Response {
        let data = (try? encoder.encode(value)) ?? Data(#"{"error":"internal","message":"the response could not be encoded"}"#.utf8)
        return Response(status: status, headers: [.contentType: "application/json; charset=utf-8"], body: .init(byteBuffer: ByteBuffer(bytes: data)))
    }

    /// The request's JSON body as `T` (at most 1 MB); a body that does not fit is a
    /// `DecodingError`, which the error middleware answers with 422 naming the field.
    static func decode<T: Decodable>(_ type: T.Type, from request: Request) async throws -> T {
        let buffer = try await request.body.collect(upTo: 1 << 20)
        return try decoder.decode(T.self, from: Data(buffer: buffer))
    }
}

/// A coding key made from a string: the spec's field names, written where they are used.
struct JSONKey: CodingKey {
    var stringValue: String
    var intValue: Int? { nil }
    init(_ name: String) { stringValue = name }
    init?(stringValue: String) { self.stringValue = stringValue }
    init?(intValue: Int) { nil }
}

extension KeyedEncodingContainer where K == JSONKey {
    /// Writes `value`, and `null` when it is nil (the spec's clients read `"active_sleep": null`).
    mutating func put<T: Encodable>(_ value: T?, _ name: String) throws {
        try encode(value, forKey: JSONKey(name))
    }
}
