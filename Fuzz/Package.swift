// swift-tools-version:6.0
// libFuzzer targets for every decoder and text parser of the wrapper, and for the migration
// file scanner. Built with -sanitize=fuzzer,address by `make fuzz` (and briefly by `make test`);
// a plain `swift build` of this package is not meant to work (libFuzzer provides the driver).
import Foundation
import PackageDescription

// A path dependency is known by its folder's name, whatever the checkout is called.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent.lowercased()

let targets = ["FuzzDateTime", "FuzzNumeric", "FuzzArray", "FuzzScalars", "FuzzRangeComposite", "FuzzSQLScript", "FuzzEncoders"]

let package = Package(
    name: "BabyBasicsFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [.package(path: "..")],
    targets: [
        .target(name: "FuzzSupport", dependencies: [.product(name: "Postgres", package: root)]),
    ] + targets.map { name in
        .executableTarget(
            name: name,
            dependencies: [
                "FuzzSupport",
                .product(name: "Postgres", package: root),
                .product(name: "Migrator", package: root),
            ],
            swiftSettings: [.unsafeFlags(["-parse-as-library"])])
    },
    swiftLanguageModes: [.v6]
)
