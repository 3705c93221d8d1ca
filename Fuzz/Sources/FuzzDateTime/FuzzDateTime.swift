import Foundation
import FuzzSupport
import Postgres

/// timestamptz / timestamp / date / time / interval, binary and text, and JSON dates.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzDateTime(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let input = FuzzInput(data, size) else { return 0 }
    switch input.selector & 0x0F {
    case 0:
        if let date = try? Date(from: input.cell(.timestamptz, .binary)) {
            var buffer: [UInt8] = []
            if (try? date.encode(into: &buffer)) != nil, input.payload.count == 8 {
                // Exact where Date can hold every microsecond (within about 126 years of 2001).
                let original = input.payload.loadUnaligned(as: Int64.self).bigEndian
                let again = buffer.withUnsafeBytes { $0.loadUnaligned(as: Int64.self).bigEndian }
                if abs(date.timeIntervalSinceReferenceDate) < 4.0e9, original != again { fatalError("timestamptz \(original) came back as \(again)") }
            }
        }
    case 1: attempt { try Date(from: input.cell(.timestamptz, .text)) }
    case 2: attempt { try Date(from: input.cell(.timestamp, .binary)) }
    case 3: roundTrip(PostgresDate.self, input.cell(.date, .binary), binaryType: .date)
    case 4: roundTrip(PostgresDate.self, input.cell(.date, .text), binaryType: .date)
    case 5: roundTrip(PostgresTime.self, input.cell(.time, .binary), binaryType: .time)
    case 6: roundTrip(PostgresTime.self, input.cell(.time, .text), binaryType: .time)
    case 7: roundTrip(PostgresInterval.self, input.cell(.interval, .binary), binaryType: .interval)
    case 8: roundTrip(PostgresInterval.self, input.cell(.interval, .text), binaryType: .interval)
    case 9:
        struct Box: Codable, Sendable { var at: Date }
        attempt { try PostgresJSON<Box>(from: input.cell(.json, .text)) }
    default: break
    }
    return 0
}

@_cdecl("FuzzDateTime_main")
public func main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzDateTime)
}
