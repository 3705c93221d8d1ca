import Foundation
import FuzzSupport
import Migrator

/// Migration files: strict UTF-8 reading, and cutting into statements.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzSQLScript(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    guard let data else { return 0 }
    let bytes = Data(bytes: data, count: size)
    if let file = try? MigrationFile(version: 1, name: "fuzz", url: URL(fileURLWithPath: "/fuzz.sql"), contents: bytes) {
        if let statements = try? file.statements() {
            for statement in statements {
                _ = statement.concurrentIndexName
                _ = statement.lineAndColumn(ofCharacter: statement.text.unicodeScalars.count / 2 + 1)
            }
        }
    }
    return 0
}

@_cdecl("FuzzSQLScript_main")
public func main(_ argc: CInt, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?) -> CInt {
    runFuzzer(argc, argv, fuzzSQLScript)
}
