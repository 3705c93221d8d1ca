import Foundation
import Postgres

/// Hands control to libFuzzer's driver with `test` as the function under test.
///
/// Each fuzz target defines `LLVMFuzzerTestOneInput` and a `<Target>_main` that calls this.
public func runFuzzer(
    _ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?,
    _ test: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt {
    var argc = argc
    var argv = argv
    return LLVMFuzzerRunDriver(&argc, &argv, test)
}

@_silgen_name("LLVMFuzzerRunDriver")
func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<CInt>,
    _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt
) -> CInt

/// The fuzzer's bytes: the first selects a variant, the rest are the value.
public struct FuzzInput {
    public let selector: UInt8
    public let payload: UnsafeRawBufferPointer

    public init?(_ data: UnsafePointer<UInt8>?, _ size: Int) {
        guard let data, size >= 1 else { return nil }
        selector = data[0]
        payload = UnsafeRawBufferPointer(start: data + 1, count: size - 1)
    }

    /// A cell of `type` in `format` holding the payload (NULL when the selector's high bit is set
    /// and the payload is empty).
    public func cell(_ type: PostgresType, _ format: PostgresFormat) -> PostgresCell {
        PostgresCell(bytes: payload.isEmpty && selector & 0x80 != 0 ? nil : payload, type: type, format: format, columnName: "fuzz", columnIndex: 0)
    }

    /// The payload read as a sequence of integers, for building values the way a caller would.
    public func integers() -> [Int64] {
        stride(from: 0, to: payload.count - 7, by: 8).map { payload.loadUnaligned(fromByteOffset: $0, as: Int64.self) }
    }
}

/// Decodes `T` from `cell`; when that succeeds, encodes the value and decodes it again, which
/// must give the same value (a failure here is a bug, so it stops the fuzzer).
public func roundTrip<T: PostgresDecodable & PostgresEncodable & Equatable>(_ type: T.Type, _ cell: PostgresCell, binaryType: PostgresType) {
    guard let value = try? T(from: cell) else { return }
    var buffer: [UInt8] = []
    guard (try? value.encode(into: &buffer)) != nil else { return } // a value the server could never have sent back
    let again = buffer.withUnsafeBytes { bytes in
        try? T(from: PostgresCell(bytes: bytes, type: binaryType, format: .binary, columnName: "again", columnIndex: 0))
    }
    guard again == value else {
        fatalError("round trip changed \(T.self): \(value) → \(String(describing: again))")
    }
}

/// Runs `decode` and ignores what it throws: only a trap is a finding.
@inline(__always)
public func attempt<T>(_ decode: () throws -> T) {
    _ = try? decode()
}
