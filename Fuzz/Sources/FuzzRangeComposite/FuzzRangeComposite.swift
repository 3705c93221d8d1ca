import Foundation
import FuzzSupport
import Postgres

/// Ranges and composite (row) values, binary and text.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzRangeComposite(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let input = FuzzInput(data, size) else { return 0 }
    let format: PostgresFormat = input.selector & 0x10 == 0 ? .binary : .text
    switch input.selector & 0x0F {
    case 0: attempt { try PostgresRange<Date>(from: input.cell(.tstzrange, format)) }
    case 1: roundTrip(PostgresRange<PostgresDate>.self, input.cell(.daterange, format), binaryType: .daterange)
    case 2: roundTrip(PostgresRange<Int32>.self, input.cell(.int4range, format), binaryType: .int4range)
    case 3: roundTrip(PostgresRange<Int64>.self, input.cell(.int8range, format), binaryType: .int8range)
    case 4:
        attempt {
            var reader = try PostgresCompositeReader(input.cell(.unspecified, format))
            for _ in 0..<min(reader.count, 64) { _ = try? reader.next(String?.self) }
            _ = try? reader.next(Int32.self)
        }
    default: break
    }
    return 0
}

@_cdecl("FuzzRangeComposite_main")
public func main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzRangeComposite)
}
