import Foundation
import FuzzSupport
import Postgres

/// Values a caller can build, from arbitrary numbers: encoding may refuse (throw), never trap.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzEncoders(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let input = FuzzInput(data, size) else { return 0 }
    let n = input.integers() + [0, 0, 0, 0]
    var buffer: [UInt8] = []
    switch input.selector & 0x0F {
    case 0: attempt { try Date(timeIntervalSince1970: Double(bitPattern: UInt64(bitPattern: n[0]))).encode(into: &buffer) }
    case 1:
        let date = PostgresDate(year: Int(n[0]), month: Int(n[1]), day: Int(n[2]))
        attempt { try date.encode(into: &buffer) }
        _ = date.description
        _ = date.adding(days: Int(n[3]))
        _ = date < PostgresDate(daysSince2000: Int(n[3]))
    case 2:
        let time = PostgresTime(hour: Int(n[0]), minute: Int(n[1]), second: Int(n[2]), microsecond: Int(n[3]))
        attempt { try time.encode(into: &buffer) }
        _ = time.description
        _ = PostgresTime(microsecondsSinceMidnight: n[0]).description
    case 3:
        _ = PostgresInterval(seconds: Double(bitPattern: UInt64(bitPattern: n[0])))
        let interval = PostgresInterval(months: Int32(truncatingIfNeeded: n[0]), days: Int32(truncatingIfNeeded: n[1]), microseconds: n[2])
        attempt { try interval.encode(into: &buffer) }
        _ = interval.description
    case 4:
        let decimal = Decimal(sign: n[0] < 0 ? .minus : .plus, exponent: Int(Int8(truncatingIfNeeded: n[1])), significand: Decimal(n[2]))
        attempt { try decimal.encode(into: &buffer) }
    case 5:
        let range = PostgresRange<Int64>(lower: n[0] == 0 ? nil : n[1], upper: n[2] == 0 ? nil : n[3])
        attempt { try range.encode(into: &buffer) }
        _ = range.contains(n[1] &+ n[3])
    case 6:
        let text = String(decoding: input.payload, as: UTF8.self)
        attempt { try text.encode(into: &buffer) }
        attempt { try [text, nil].encode(into: &buffer) }
    default: break
    }
    return 0
}

@_cdecl("FuzzEncoders_main")
public func main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzEncoders)
}
