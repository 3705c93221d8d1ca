// swift-tools-version:6.0
// The benchmarks live in their own package so that `make test` and CI never build the peers.
import Foundation
import PackageDescription

// A path dependency is known by its folder's name, whatever the checkout is called.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().lastPathComponent.lowercased()

let package = Package(
    name: "BabyBasicsBenchmarks",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(path: ".."),
        .package(url: "https://github.com/vapor/postgres-nio", from: "1.33.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.0"),
        // The reference service, for the HTTP group (served in-process, loaded with wrk).
        .package(path: "../Examples/BabyBasicsService"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        .executableTarget(
            name: "bb-bench",
            dependencies: [
                .product(name: "Postgres", package: root),
                .product(name: "EmbeddedPostgres", package: root),
                .product(name: "PostgresTestKit", package: root),
                .product(name: "Migrator", package: root),
                .product(name: "BabyBasicsStore", package: root),
                .product(name: "PostgresNIO", package: "postgres-nio"),
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "BabyBasicsAPI", package: "babybasicsservice"),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
