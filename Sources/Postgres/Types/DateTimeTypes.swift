public import Foundation

/// Microseconds from PostgreSQL's epoch (2000-01-01 UTC) to Foundation's reference date
/// (2001-01-01 UTC): 366 days.
private let referenceDateMicrosSincePostgresEpoch: Int64 = 31_622_400_000_000

// MARK: timestamptz <-> Date

extension Date: PostgresEncodable, PostgresDecodable {
    /// Sent as `timestamptz`, rounded to the microsecond (PostgreSQL's precision).
    public static var postgresType: PostgresType { .timestamptz }

    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        guard let micros = TimestampRange.postgresMicroseconds(of: self) else {
            // Not `\(self)`: Foundation's description of a NaN date traps.
            throw PostgresError(
                kind: .invalidParameter,
                message: "the date \(timeIntervalSinceReferenceDate) s from 2001-01-01 is outside PostgreSQL's timestamptz range (4713 BC to 294276 AD)")
        }
        buffer.appendBigEndian(micros)
    }

    /// Decodes `timestamptz`, and `timestamp` (taken as UTC). `±infinity` is refused.
    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(Date.self)
        let micros: Int64
        switch cell.format {
        case .binary:
            guard cell.type == .timestamptz || cell.type == .timestamp, let raw = bytes.readBigEndian(Int64.self, at: 0) else {
                throw cell.mismatch(Date.self, expected: "timestamptz or timestamp (decode date as PostgresDate)")
            }
            guard raw != .max, raw != .min else {
                throw cell.failure(Date.self, "the value is \(raw == .max ? "" : "-")infinity, which Date cannot hold")
            }
            micros = raw
        case .text:
            let text = String(decoding: bytes, as: UTF8.self)
            guard let parsed = TimestampText.parse(text) else {
                throw cell.failure(Date.self, "\"\(text)\" is not an ISO timestamp")
            }
            micros = parsed
        }
        self = TimestampRange.date(fromPostgresMicroseconds: micros)
    }
}

/// PostgreSQL's timestamp range and the conversion to `Date`.
enum TimestampRange {
    /// 4713-11-24 BC 00:00 to 294276-12-31 23:59:59.999999, in microseconds since 2000-01-01.
    static let microseconds: ClosedRange<Int64> = -211_813_488_000_000_000...9_223_371_331_199_999_999

    /// One exact integer subtraction and one correctly rounded division, relative to `Date`'s own
    /// reference date: every microsecond survives decode → encode within about 136 years of
    /// 2001 (1865–2137); farther out a `Double` of seconds cannot hold every microsecond, and
    /// the value moves by at most a microsecond or so. Never traps.
    static func date(fromPostgresMicroseconds micros: Int64) -> Date {
        let (relative, overflow) = micros.subtractingReportingOverflow(referenceDateMicrosSincePostgresEpoch)
        if !overflow { return Date(timeIntervalSinceReferenceDate: Double(relative) / 1_000_000) }
        return Date(timeIntervalSinceReferenceDate: Double(micros) / 1_000_000 - Double(referenceDateMicrosSincePostgresEpoch / 1_000_000))
    }

    /// `date` in PostgreSQL's microseconds, rounded to the microsecond; nil outside the range
    /// (or for a NaN date).
    static func postgresMicroseconds(of date: Date) -> Int64? {
        let micros = (date.timeIntervalSinceReferenceDate * 1_000_000).rounded()
        guard micros.isFinite, let relative = Int64(exactly: micros) else { return nil }
        let (value, overflow) = relative.addingReportingOverflow(referenceDateMicrosSincePostgresEpoch)
        guard !overflow else { return nil }
        // At the far ends a Double of seconds is coarser than a millisecond: a date decoded from
        // the very first or last timestamp may round just past it. Within that slack, the end.
        let slack: Int64 = 10_000
        if value > microseconds.upperBound && value - microseconds.upperBound <= slack { return microseconds.upperBound }
        if value < microseconds.lowerBound && microseconds.lowerBound - value <= slack { return microseconds.lowerBound }
        return microseconds.contains(value) ? value : nil
    }
}

/// Parses `DateStyle = ISO` timestamps: `2024-03-10 02:30:00.123456+05:30`.
enum TimestampText {
    static func parse(_ text: String) -> Int64? {
        var scanner = Substring(text)
        var bc = false
        if scanner.hasSuffix(" BC") { bc = true; scanner = scanner.dropLast(3) }
        let parts = scanner.split(separator: " ", maxSplits: 1)
        guard parts.count == 2, let date = PostgresDate(isoText: String(parts[0])) else { return nil }
        var clock = parts[1]
        var offsetSeconds: Int64 = 0
        if let signIndex = clock.lastIndex(where: { $0 == "+" || $0 == "-" }) {
            // At most ±HH:MM:SS with two digits each (PostgreSQL zones stay within ±16 hours).
            let zone = clock[clock.index(after: signIndex)...].split(separator: ":", omittingEmptySubsequences: false)
            guard (1...3).contains(zone.count), zone.allSatisfy({ $0.count == 2 && $0.allSatisfy(\.isASCII) }) else { return nil }
            let values = zone.compactMap { Int64($0) }
            guard values.count == zone.count, values[0] <= 23, values.dropFirst().allSatisfy({ $0 <= 59 }) else { return nil }
            offsetSeconds = values[0] * 3600 + (values.count > 1 ? values[1] * 60 : 0) + (values.count > 2 ? values[2] : 0)
            if clock[signIndex] == "-" { offsetSeconds = -offsetSeconds }
            clock = clock[..<signIndex]
        }
        guard let time = PostgresTime(isoText: String(clock)) else { return nil }
        let year = bc ? 1 - date.year : date.year
        let days = Int64(PostgresDate(year: year, month: date.month, day: date.day).daysSince2000)
        let (dayMicros, o1) = days.multipliedReportingOverflow(by: 86_400_000_000)
        let (local, o2) = dayMicros.addingReportingOverflow(time.microsecondsSinceMidnight)
        let (micros, o3) = local.subtractingReportingOverflow(offsetSeconds * 1_000_000)
        guard !(o1 || o2 || o3), TimestampRange.microseconds.contains(micros) else { return nil }
        return micros
    }
}

// MARK: date

/// A calendar date with no time and no time zone: PostgreSQL's `date`.
///
/// A birth date is a day on the calendar, not an instant, so it is never a `Date` at
/// midnight UTC (which shows as the day before in America).
///
/// ```swift
/// let birth = PostgresDate(year: 2026, month: 3, day: 8)
/// try await connection.execute("UPDATE children SET birth_date = \(birth) WHERE id = \(id)")
/// print(birth)   // 2026-03-08
/// ```
public struct PostgresDate: Hashable, Comparable, Sendable, Codable, CustomStringConvertible, PostgresEncodable, PostgresDecodable {
    public var year: Int
    public var month: Int
    public var day: Int

    public init(year: Int, month: Int, day: Int) {
        self.year = year
        self.month = month
        self.day = day
    }

    /// Parses `YYYY-MM-DD`; `nil` if it is not a real calendar day within PostgreSQL's range
    /// (years -4712 to 5874897, that is 4713 BC to 5874897 AD).
    public init?(isoText text: String) {
        var negative = false
        var body = Substring(text)
        if body.first == "-" { negative = true; body = body.dropFirst() }
        let fields = body.split(separator: "-", omittingEmptySubsequences: false)
        guard fields.count == 3, fields[0].count <= 7, fields[1].count <= 2, fields[2].count <= 2,
              let y = Int(fields[0]), let m = Int(fields[1]), let d = Int(fields[2]),
              (1...12).contains(m), (1...31).contains(d) else { return nil }
        self.init(year: negative ? -y : y, month: m, day: d)
        guard isValid else { return nil }
    }

    /// PostgreSQL's `date` range, in years (astronomical numbering: 0 is 1 BC).
    public static let validYears = -4712...5_874_897

    /// A real calendar day (no February 30th) within PostgreSQL's range.
    public var isValid: Bool {
        Self.validYears.contains(year) && (1...12).contains(month) && (1...31).contains(day)
            && PostgresDate(daysSince2000: daysSince2000) == self
    }

    /// The calendar date (proleptic Gregorian, as PostgreSQL's) in `timeZone` at the instant
    /// `date`.
    ///
    /// ```swift
    /// let today = PostgresDate(Date(), in: TimeZone(identifier: "Asia/Kathmandu") ?? .gmt)
    /// ```
    ///
    /// A `Date` far from 2001 holds fewer digits than a microsecond (about 8 µs in year 140):
    /// for an instant read from PostgreSQL, ``init(microseconds:in:)`` is exact.
    public init(_ date: Date, in timeZone: TimeZone) {
        self.init(microseconds: ProlepticGregorian.microseconds(of: date) ?? 0, in: timeZone)
    }

    /// The calendar date in `timeZone` at the instant `micros` microseconds after 1970-01-01
    /// 00:00 UTC: what PostgreSQL's `(t AT TIME ZONE zone)::date` says.
    ///
    /// ```swift
    /// let day = PostgresDate(microseconds: -500_000, in: .gmt) // 1969-12-31 (23:59:59.5)
    /// ```
    public init(microseconds micros: Int64, in timeZone: TimeZone) {
        // Whole seconds rounded down, also before 1970: truncating toward zero put
        // 23:59:59.5 of a day before 1970 on the next day.
        let (q, r) = micros.quotientAndRemainder(dividingBy: 1_000_000)
        let seconds = r < 0 ? q - 1 : q
        let offset = timeZone.secondsFromGMT(for: ProlepticGregorian.date(microseconds: seconds &* 1_000_000))
        let local = seconds &+ Int64(offset)
        let (days, rest) = local.quotientAndRemainder(dividingBy: 86_400)
        let (year, month, day) = ProlepticGregorian.civil(days: rest < 0 ? days - 1 : days)
        self.init(year: Int(clamping: year), month: Int(month), day: Int(day))
    }

    /// Days since 2000-01-01 (PostgreSQL's binary form), proleptic Gregorian calendar. Exact
    /// for every date `isValid` accepts; for absurd years it wraps rather than trapping.
    public var daysSince2000: Int {
        Int(truncatingIfNeeded: ProlepticGregorian.days(year: Int64(year), month: Int64(month.clamped(to: -1_000...1_000)),
                                                       day: Int64(day.clamped(to: -1_000...1_000))) &- 10_957)
    }

    /// The date `days` days after 2000-01-01 (wrapping, never trapping, far outside any calendar).
    public init(daysSince2000 days: Int) {
        let (year, month, day) = ProlepticGregorian.civil(days: Int64(days) &+ 10_957)
        self.init(year: Int(truncatingIfNeeded: year), month: Int(month), day: Int(day))
    }

    /// The next (or previous, for negative `days`) calendar day.
    public func adding(days: Int) -> PostgresDate { PostgresDate(daysSince2000: daysSince2000 &+ days) }

    /// `YYYY-MM-DD` (a negative year for BC, astronomical numbering).
    public var description: String {
        let digits = String(year.magnitude)
        let y = (year < 0 ? "-" : "") + String(repeating: "0", count: max(0, 4 - digits.count)) + digits
        return "\(y)-\(pad(month, 2))-\(pad(day, 2))"
    }

    public static func < (lhs: PostgresDate, rhs: PostgresDate) -> Bool { lhs.daysSince2000 < rhs.daysSince2000 }

    public static var postgresType: PostgresType { .date }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        guard isValid, let days = Int32(exactly: daysSince2000) else {
            throw PostgresError(kind: .invalidParameter, message: "the date \(self) is not a calendar day within PostgreSQL's date range (4713 BC to 5874897 AD)")
        }
        buffer.appendBigEndian(days)
    }

    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(PostgresDate.self)
        switch cell.format {
        case .binary:
            guard cell.type == .date, let days = bytes.readBigEndian(Int32.self, at: 0) else {
                throw cell.mismatch(PostgresDate.self, expected: "date")
            }
            guard days != .max, days != .min else { throw cell.failure(PostgresDate.self, "the value is infinity") }
            self.init(daysSince2000: Int(days))
        case .text:
            let text = String(decoding: bytes, as: UTF8.self)
            if text.hasSuffix(" BC"), let date = PostgresDate(isoText: String(text.dropLast(3))) {
                self.init(year: 1 - date.year, month: date.month, day: date.day)
            } else if let date = PostgresDate(isoText: text) {
                self = date
            } else {
                throw cell.failure(PostgresDate.self, "\"\(text)\" is not an ISO date")
            }
        }
    }

    /// Encoded as `"YYYY-MM-DD"` in JSON.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let date = PostgresDate(isoText: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "\"\(text)\" is not YYYY-MM-DD"))
        }
        self = date
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

// MARK: time

/// A time of day with no date and no zone: PostgreSQL's `time`, to the microsecond.
///
/// ```swift
/// let dayStart = PostgresTime(hour: 6, minute: 0)
/// print(dayStart)   // 06:00:00
/// ```
public struct PostgresTime: Hashable, Comparable, Sendable, Codable, CustomStringConvertible, PostgresEncodable, PostgresDecodable {
    /// Microseconds since midnight, `0..<86_400_000_000` (24:00:00 is allowed, as in PostgreSQL).
    public var microsecondsSinceMidnight: Int64

    public init(microsecondsSinceMidnight: Int64) { self.microsecondsSinceMidnight = microsecondsSinceMidnight }

    /// Out-of-range parts give a time that `isValid` refuses (and `encode` throws for); they
    /// never trap.
    public init(hour: Int, minute: Int, second: Int = 0, microsecond: Int = 0) {
        let parts = [hour, minute, second, microsecond]
        guard parts.allSatisfy({ $0.magnitude < 100_000_000 }) else {
            microsecondsSinceMidnight = -1
            return
        }
        microsecondsSinceMidnight = ((Int64(hour) * 60 + Int64(minute)) * 60 + Int64(second)) * 1_000_000 + Int64(microsecond)
    }

    /// Within 00:00:00 … 24:00:00.
    public var isValid: Bool { (0...86_400_000_000).contains(microsecondsSinceMidnight) }

    /// Parses `HH:MM[:SS[.ffffff]]`.
    public init?(isoText text: String) {
        let fields = text.split(separator: ":", omittingEmptySubsequences: false)
        guard fields.count == 2 || fields.count == 3, fields.allSatisfy({ $0.count <= 16 }), let h = Int(fields[0]), let m = Int(fields[1]),
              (0...24).contains(h), (0...59).contains(m) else { return nil }
        var seconds = 0
        var micros = 0
        if fields.count == 3 {
            let secondParts = fields[2].split(separator: ".", omittingEmptySubsequences: false)
            guard secondParts.count <= 2, let s = Int(secondParts[0]), (0...60).contains(s) else { return nil }
            seconds = s
            if secondParts.count == 2 {
                let fraction = secondParts[1].prefix(6)
                guard !fraction.isEmpty, fraction.allSatisfy(\.isASCII), let f = Int(fraction), f >= 0 else { return nil }
                micros = f * Int(pow(10, Double(6 - fraction.count)))
            }
        }
        self.init(hour: h, minute: m, second: seconds, microsecond: micros)
        guard microsecondsSinceMidnight <= 86_400_000_000 else { return nil }
    }

    public var hour: Int { Int(microsecondsSinceMidnight / 3_600_000_000) }
    public var minute: Int { Int(microsecondsSinceMidnight / 60_000_000 % 60) }
    public var second: Int { Int(microsecondsSinceMidnight / 1_000_000 % 60) }
    public var microsecond: Int { Int(microsecondsSinceMidnight % 1_000_000) }

    /// `HH:MM:SS`, with `.ffffff` when there are microseconds.
    public var description: String {
        let base = "\(pad(hour, 2)):\(pad(minute, 2)):\(pad(second, 2))"
        return microsecond == 0 ? base : base + "." + pad(microsecond, 6)
    }

    public static func < (lhs: PostgresTime, rhs: PostgresTime) -> Bool {
        lhs.microsecondsSinceMidnight < rhs.microsecondsSinceMidnight
    }

    public static var postgresType: PostgresType { .time }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        guard isValid else {
            throw PostgresError(kind: .invalidParameter, message: "\(microsecondsSinceMidnight) µs is not a time of day (00:00:00 to 24:00:00)")
        }
        buffer.appendBigEndian(microsecondsSinceMidnight)
    }

    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(PostgresTime.self)
        switch cell.format {
        case .binary:
            guard cell.type == .time, bytes.count == 8, let micros = bytes.readBigEndian(Int64.self, at: 0) else {
                throw cell.mismatch(PostgresTime.self, expected: "time")
            }
            guard (0...86_400_000_000).contains(micros) else { throw cell.failure(PostgresTime.self, "\(micros) µs is not a time of day") }
            self.init(microsecondsSinceMidnight: micros)
        case .text:
            let text = String(decoding: bytes, as: UTF8.self)
            guard let time = PostgresTime(isoText: text) else { throw cell.failure(PostgresTime.self, "\"\(text)\" is not a time") }
            self = time
        }
    }

    /// Encoded as `"HH:MM:SS"` in JSON.
    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let time = PostgresTime(isoText: text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "\"\(text)\" is not HH:MM:SS"))
        }
        self = time
    }

    public func encode(to encoder: any Encoder) throws {
        var container = encoder.singleValueContainer()
        try container.encode(description)
    }
}

// MARK: interval

/// PostgreSQL's `interval`: months, days and microseconds kept apart, as the server does
/// (a month is not a fixed number of days; a day is not 24 hours across a DST switch).
///
/// ```swift
/// let week = PostgresInterval(days: 7)
/// let rows = try await connection.query("SELECT now() - \(week)")
/// ```
public struct PostgresInterval: Hashable, Sendable, Codable, CustomStringConvertible, PostgresEncodable, PostgresDecodable {
    public var months: Int32
    public var days: Int32
    public var microseconds: Int64

    public init(months: Int32 = 0, days: Int32 = 0, microseconds: Int64 = 0) {
        self.months = months
        self.days = days
        self.microseconds = microseconds
    }

    /// An interval of `seconds`, rounded to the microsecond; nil when `seconds` is not finite or
    /// does not fit (about ±292,000 years).
    public init?(seconds: Double) {
        let micros = (seconds * 1_000_000).rounded()
        guard micros.isFinite, let exact = Int64(exactly: micros) else { return nil }
        self.init(microseconds: exact)
    }

    /// `1 mon 2 days 03:04:05.000006` style.
    public var description: String {
        var parts: [String] = []
        if months != 0 { parts.append("\(months) mon\(months.magnitude == 1 ? "" : "s")") }
        if days != 0 { parts.append("\(days) day\(days.magnitude == 1 ? "" : "s")") }
        if microseconds != 0 || parts.isEmpty {
            let sign = microseconds < 0 ? "-" : ""
            let m = microseconds.magnitude
            let clock = "\(pad(Int(m / 3_600_000_000), 2)):\(pad(Int(m / 60_000_000 % 60), 2)):\(pad(Int(m / 1_000_000 % 60), 2))"
            parts.append(sign + clock + (m % 1_000_000 == 0 ? "" : "." + pad(Int(m % 1_000_000), 6)))
        }
        return parts.joined(separator: " ")
    }

    public static var postgresType: PostgresType { .interval }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        buffer.appendBigEndian(microseconds)
        buffer.appendBigEndian(days)
        buffer.appendBigEndian(months)
    }

    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(PostgresInterval.self)
        switch cell.format {
        case .binary:
            guard cell.type == .interval, bytes.count == 16, let micros = bytes.readBigEndian(Int64.self, at: 0),
                  let days = bytes.readBigEndian(Int32.self, at: 8), let months = bytes.readBigEndian(Int32.self, at: 12) else {
                throw cell.mismatch(PostgresInterval.self, expected: "interval")
            }
            self.init(months: months, days: days, microseconds: micros)
        case .text:
            let text = String(decoding: bytes, as: UTF8.self)
            guard let value = PostgresInterval(postgresText: text) else {
                throw cell.failure(PostgresInterval.self, "\"\(text)\" is not an interval in IntervalStyle postgres")
            }
            self = value
        }
    }

    /// Parses the `IntervalStyle = postgres` output (which the connection pins):
    /// `1 year 2 mons -3 days 04:05:06.7`. Any value that does not fit is nil, never a trap.
    init?(postgresText text: String) {
        var months: Int64 = 0
        var days: Int64 = 0
        var micros: Int64 = 0
        let tokens = text.split(separator: " ")
        var index = 0
        /// `a * b + c`, nil on overflow.
        func fused(_ a: Int64, _ b: Int64, _ c: Int64) -> Int64? {
            let (product, o1) = a.multipliedReportingOverflow(by: b)
            let (sum, o2) = product.addingReportingOverflow(c)
            return o1 || o2 ? nil : sum
        }
        while index < tokens.count {
            let token = tokens[index]
            if token.contains(":") {
                var clock = token
                var negative = false
                if clock.first == "-" { negative = true; clock = clock.dropFirst() } else if clock.first == "+" { clock = clock.dropFirst() }
                let fields = clock.split(separator: ":", omittingEmptySubsequences: false)
                guard fields.count == 3, let h = Int64(fields[0]), let m = Int64(fields[1]), h >= 0, (0...59).contains(m) else { return nil }
                let secondParts = fields[2].split(separator: ".", omittingEmptySubsequences: false)
                guard secondParts.count <= 2, let s = Int64(secondParts[0]), (0...59).contains(s) else { return nil }
                var fraction: Int64 = 0
                if secondParts.count == 2 {
                    let digits = secondParts[1].prefix(6)
                    guard !digits.isEmpty, digits.allSatisfy({ $0.isASCII && $0.isNumber }), let f = Int64(digits) else { return nil }
                    fraction = f * Int64(pow(10, Double(6 - digits.count)))
                }
                guard let minutes = fused(h, 60, m), let seconds = fused(minutes, 60, s), let value = fused(seconds, 1_000_000, fraction),
                      let total = fused(negative ? -1 : 1, value, micros) else { return nil }
                micros = total
                index += 1
                continue
            }
            guard let number = Int64(token), index + 1 < tokens.count else { return nil }
            let unit = tokens[index + 1]
            switch unit {
            case "year", "years": guard let total = fused(number, 12, months) else { return nil }; months = total
            case "mon", "mons": guard let total = fused(number, 1, months) else { return nil }; months = total
            case "day", "days": guard let total = fused(number, 1, days) else { return nil }; days = total
            default: return nil
            }
            index += 2
        }
        guard let m = Int32(exactly: months), let d = Int32(exactly: days) else { return nil }
        self.init(months: m, days: d, microseconds: micros)
    }
}

/// Zero-pads a non-negative number.
func pad(_ value: Int, _ width: Int) -> String {
    let text = String(value)
    return text.count >= width ? text : String(repeating: "0", count: width - text.count) + text
}

extension Comparable {
    func clamped(to range: ClosedRange<Self>) -> Self { min(max(self, range.lowerBound), range.upperBound) }
}
