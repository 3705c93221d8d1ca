import Foundation
import FuzzSupport
import Postgres

/// bool, uuid, bytea, text, json and jsonb, binary and text.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzScalars(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let input = FuzzInput(data, size) else { return 0 }
    let format: PostgresFormat = input.selector & 0x10 == 0 ? .binary : .text
    switch input.selector & 0x0F {
    case 0: roundTrip(Bool.self, input.cell(.bool, format), binaryType: .bool)
    case 1: roundTrip(UUID.self, input.cell(.uuid, format), binaryType: .uuid)
    case 2: roundTrip(Data.self, input.cell(.bytea, format), binaryType: .bytea)
    case 3: attempt { try String(from: input.cell(.jsonb, format)) }
    case 4: attempt { try String(from: input.cell(.uuid, format)) }
    case 5: attempt { try PostgresJSON<[String: [Double?]]>(from: input.cell(.jsonb, format)) }
    case 6: attempt { try PostgresJSON<String>(from: input.cell(.json, format)) }
    case 7: roundTrip(String.self, input.cell(.text, format), binaryType: .text)
    case 8:
        enum Mood: String, PostgresEnum { case calm, fussy }
        attempt { try Mood(from: input.cell(.unspecified, format)) }
    default: break
    }
    return 0
}

@_cdecl("FuzzScalars_main")
public func main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzScalars)
}
