import Foundation
import FuzzSupport
import Postgres

/// Arrays of every element type, binary and text.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzArray(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let input = FuzzInput(data, size) else { return 0 }
    let format: PostgresFormat = input.selector & 0x10 == 0 ? .binary : .text
    switch input.selector & 0x0F {
    case 0: roundTrip([Int32?].self, input.cell(.int4Array, format), binaryType: .int4Array)
    case 1: roundTrip([String?].self, input.cell(.textArray, format), binaryType: .textArray)
    case 2: roundTrip([UUID].self, input.cell(.uuidArray, format), binaryType: .uuidArray)
    case 3: attempt { try [Date?](from: input.cell(.timestamptzArray, format)) }
    case 4: roundTrip([PostgresDate].self, input.cell(.dateArray, format), binaryType: .dateArray)
    case 5: roundTrip([PostgresNumeric?].self, input.cell(.numericArray, format), binaryType: .numericArray)
    case 6: roundTrip([Bool].self, input.cell(.boolArray, format), binaryType: .boolArray)
    case 7: attempt { try [Double].self.init(from: input.cell(.float8Array, format)) }
    case 8: roundTrip([Data?].self, input.cell(.byteaArray, format), binaryType: .byteaArray)
    case 9: roundTrip([Int64].self, input.cell(.int8Array, format), binaryType: .int8Array)
    case 10: roundTrip([PostgresInterval].self, input.cell(.intervalArray, format), binaryType: .intervalArray)
    case 11: attempt { try [PostgresJSON<[String: Int]>].self.init(from: input.cell(.jsonbArray, format)) }
    default: break
    }
    return 0
}

@_cdecl("FuzzArray_main")
public func main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzArray)
}
