// swift-tools-version:6.0
// A reference backend service: the dashboard spec's API (seed 000) served from the repository
// module with Hummingbird 2. Its own package, like Benchmarks/, so the library's users never
// build a web framework they do not use; `make test` builds and tests it.
import Foundation
import PackageDescription

// A path dependency is known by its folder's name, whatever the checkout is called.
let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().lastPathComponent.lowercased()

let package = Package(
    name: "BabyBasicsService",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "bb-service", targets: ["bb-service"]),
        .library(name: "BabyBasicsAPI", targets: ["BabyBasicsAPI"]),
    ],
    dependencies: [
        .package(path: "../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.7.1"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        .target(
            name: "BabyBasicsAPI",
            dependencies: [
                .product(name: "BabyBasicsStore", package: root),
                .product(name: "Postgres", package: root),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .executableTarget(
            name: "bb-service",
            dependencies: [
                "BabyBasicsAPI",
                .product(name: "EmbeddedPostgres", package: root),
                .product(name: "Migrator", package: root),
            ]
        ),
        .testTarget(
            name: "BabyBasicsAPITests",
            dependencies: [
                "BabyBasicsAPI",
                .product(name: "EmbeddedPostgres", package: root),
                .product(name: "PostgresTestKit", package: root),
                .product(name: "Migrator", package: root),
                .product(name: "AsyncHTTPClient", package: "async-http-client"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ]
        ),
    ],
    swiftLanguageModes: [.v6]
)
