// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "BabyBasics",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "Postgres", targets: ["Postgres"]),
        .library(name: "EmbeddedPostgres", targets: ["EmbeddedPostgres"]),
        // What tests of code built on the wrapper need: a throw-away cluster and a fresh
        // database per test, a streaming replica, PgBouncer, a proxy that misbehaves, logs.
        .library(name: "PostgresTestKit", targets: ["PostgresTestKit"]),
        .library(name: "Migrator", targets: ["Migrator"]),
        .library(name: "BabyBasicsStore", targets: ["BabyBasicsStore"]),
        .executable(name: "bbmigrate", targets: ["bbmigrate"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.0"..<"5.0.0"),
        .package(url: "https://github.com/x-sheep/swift-property-based", from: "2.0.1"),
        // The server ecosystem's logging, metrics, tracing and service lifecycle (see README, "Operating it").
        .package(url: "https://github.com/apple/swift-log", from: "1.16.0"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing", from: "1.7.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        // `swift package generate-documentation` for the DocC catalogs (make docs, make test).
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.4.0"),
    ],
    targets: [
        // libpq, found through pkg-config.
        .systemLibrary(
            name: "CLibPQ",
            pkgConfig: "libpq",
            providers: [.apt(["libpq-dev"]), .brew(["libpq"])]
        ),
        // epoll (Linux) / kqueue (macOS) readiness for the wrapper's I/O threads.
        .target(name: "CEventLoop"),
        // The Swift wrapper of libpq: connections, safe SQL, binary types, rows, errors, pool.
        .target(name: "Postgres", dependencies: [
            "CLibPQ", "CEventLoop",
            .product(name: "Logging", package: "swift-log"),
            .product(name: "Metrics", package: "swift-metrics"),
            .product(name: "Tracing", package: "swift-distributed-tracing"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
        ]),
        // initdb/pg_ctl driven throw-away or development clusters, and test databases.
        .target(name: "EmbeddedPostgres", dependencies: ["Postgres", .product(name: "Logging", package: "swift-log")]),
        // The test kit: TestPostgres, TestReplication, PgBouncer, FaultProxy, LogCapture.
        .target(name: "PostgresTestKit", dependencies: ["Postgres", "EmbeddedPostgres", "CLibPQ", .product(name: "Logging", package: "swift-log")]),
        // The migration engine: files, checksums, history, lock, drift check.
        .target(name: "Migrator", dependencies: [
            "Postgres", .product(name: "Crypto", package: "swift-crypto"), .product(name: "Logging", package: "swift-log"),
        ]),
        // Typed repositories for backend services.
        .target(name: "BabyBasicsStore", dependencies: ["Postgres", .product(name: "Logging", package: "swift-log"), .product(name: "Metrics", package: "swift-metrics")]),
        // The thin command-line front end.
        .executableTarget(
            name: "bbmigrate",
            dependencies: [
                "Postgres",
                "EmbeddedPostgres",
                "Migrator",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ]
        ),
        .testTarget(name: "PostgresTests", dependencies: [
            "PostgresTestKit",
            "Postgres", "EmbeddedPostgres", .product(name: "PropertyBased", package: "swift-property-based"),
            .product(name: "Logging", package: "swift-log"),
            .product(name: "MetricsTestKit", package: "swift-metrics"),
            .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
            .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
        ]),
        .testTarget(name: "EmbeddedPostgresTests", dependencies: [
            "PostgresTestKit", "EmbeddedPostgres", "Postgres"]),
        .testTarget(name: "SchemaTests", dependencies: [
            "PostgresTestKit", "Postgres", "EmbeddedPostgres", "Migrator"]),
        .testTarget(name: "MigratorTests", dependencies: [
            "PostgresTestKit", "Migrator", "Postgres", "EmbeddedPostgres", "bbmigrate"]),
        .testTarget(name: "BabyBasicsStoreTests", dependencies: [
            "PostgresTestKit",
            "BabyBasicsStore", "Migrator", "Postgres", "EmbeddedPostgres", .product(name: "PropertyBased", package: "swift-property-based"),
            .product(name: "Logging", package: "swift-log"), .product(name: "MetricsTestKit", package: "swift-metrics"),
        ]),
    ],
    swiftLanguageModes: [.v6]
)

// Imports are internal unless a file says `public import`: a module's public API shows only
// the modules its types really leak (as Hummingbird does).
for target in package.targets where target.type != .system {
    target.swiftSettings = (target.swiftSettings ?? []) + [.enableUpcomingFeature("InternalImportsByDefault")]
}
