import Foundation
import FuzzSupport
import Postgres

/// numeric (binary and text) as PostgresNumeric, Decimal and String; floats and integers.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzNumeric(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let input = FuzzInput(data, size) else { return 0 }
    switch input.selector & 0x0F {
    case 0: roundTrip(PostgresNumeric.self, input.cell(.numeric, .binary), binaryType: .numeric)
    case 1: roundTrip(PostgresNumeric.self, input.cell(.numeric, .text), binaryType: .numeric)
    case 2: attempt { try Decimal(from: input.cell(.numeric, .binary)) }
    case 3: attempt { try Decimal(from: input.cell(.numeric, .text)) }
    case 4: attempt { try String(from: input.cell(.numeric, .binary)) }
    case 5: attempt { try Double(from: input.cell(.float8, .text)) }
    case 6: attempt { try Float(from: input.cell(.float4, .binary)) }
    case 7: attempt { try Int16(from: input.cell(.int8, .binary)) }
    case 8: attempt { try Int(from: input.cell(.int8, .text)) }
    case 9: attempt { try Int32(from: input.cell(.oid, .binary)) }
    case 10:
        if let numeric = PostgresNumeric(String(decoding: input.payload, as: UTF8.self)) {
            var buffer: [UInt8] = []
            attempt { try numeric.encode(into: &buffer) }
            _ = numeric.decimal
        }
    default: break
    }
    return 0
}

@_cdecl("FuzzNumeric_main")
public func main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzNumeric)
}
