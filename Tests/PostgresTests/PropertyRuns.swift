import Foundation

/// How many random cases a state machine's property test tries: `standard` in the suite, or
/// `BB_PROPERTY_RUNS` for a long search (`BB_PROPERTY_RUNS=100000 swift test --filter Property`).
func propertyRuns(_ standard: Int) -> Int {
    ProcessInfo.processInfo.environment["BB_PROPERTY_RUNS"].flatMap { Int($0) }.map { max(1, $0) } ?? standard
}
