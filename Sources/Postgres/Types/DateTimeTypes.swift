import Foundation

/// Microseconds between 1970-01-01 and PostgreSQL's epoch, 2000-01-01 (UTC).
private let postgresEpochMicrosFromUnix: Int64 = 946_684_800_000_000

// MARK: timestamptz <-> Date

extension Date: PostgresEncodable, PostgresDecodable {
    /// Sent as `timestamptz`, rounded to the microsecond (PostgreSQL's precision).
    public static var postgresType: PostgresType { .timestamptz }

    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        let micros = (timeIntervalSince1970 * 1_000_000).rounded()
        guard let unixMicros = Int64(exactly: micros) else {
            throw PostgresError(kind: .invalidParameter, message: "the date \(self) is outside PostgreSQL's timestamptz range")
        }
        buffer.appendBigEndian(unixMicros - postgresEpochMicrosFromUnix)
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
        // One exact integer subtraction, one correctly rounded division: microseconds survive.
        self = Date(timeIntervalSince1970: Double(micros + postgresEpochMicrosFromUnix) / 1_000_000)
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
        var offsetSeconds = 0
        if let signIndex = clock.lastIndex(where: { $0 == "+" || $0 == "-" }) {
            let zone = clock[clock.index(after: signIndex)...].split(separator: ":").map { Int($0) }
            guard !zone.isEmpty, zone.allSatisfy({ $0 != nil }) else { return nil }
            let values = zone.compactMap { $0 }
            offsetSeconds = values[0] * 3600 + (values.count > 1 ? values[1] * 60 : 0) + (values.count > 2 ? values[2] : 0)
            if clock[signIndex] == "-" { offsetSeconds = -offsetSeconds }
            clock = clock[..<signIndex]
        }
        guard let time = PostgresTime(isoText: String(clock)) else { return nil }
        let year = bc ? 1 - date.year : date.year
        let days = Int64(PostgresDate(year: year, month: date.month, day: date.day).daysSince2000)
        return days * 86_400_000_000 + time.microsecondsSinceMidnight - Int64(offsetSeconds) * 1_000_000
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

    /// Parses `YYYY-MM-DD`; `nil` if it is not a real calendar day.
    public init?(isoText text: String) {
        var negative = false
        var body = Substring(text)
        if body.first == "-" { negative = true; body = body.dropFirst() }
        let fields = body.split(separator: "-")
        guard fields.count == 3, let y = Int(fields[0]), let m = Int(fields[1]), let d = Int(fields[2]),
              (1...12).contains(m), (1...31).contains(d) else { return nil }
        self.init(year: negative ? -y : y, month: m, day: d)
        guard PostgresDate(daysSince2000: daysSince2000) == self else { return nil }
    }

    /// The calendar date in `timeZone` at the instant `date`.
    public init(_ date: Date, in timeZone: TimeZone) {
        var calendar = Calendar(identifier: .gregorian)
        calendar.timeZone = timeZone
        let parts = calendar.dateComponents([.year, .month, .day], from: date)
        self.init(year: parts.year ?? 1970, month: parts.month ?? 1, day: parts.day ?? 1)
    }

    /// Days since 2000-01-01 (PostgreSQL's binary form), proleptic Gregorian calendar.
    public var daysSince2000: Int {
        // Howard Hinnant's days_from_civil.
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = (month + 9) % 12
        let doy = (153 * mp + 2) / 5 + day - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468 - 10_957
    }

    /// The date `days` days after 2000-01-01.
    public init(daysSince2000 days: Int) {
        let z = days + 10_957 + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let d = doy - (153 * mp + 2) / 5 + 1
        let m = mp < 10 ? mp + 3 : mp - 9
        self.init(year: yoe + era * 400 + (m <= 2 ? 1 : 0), month: m, day: d)
    }

    /// The next (or previous, for negative `days`) calendar day.
    public func adding(days: Int) -> PostgresDate { PostgresDate(daysSince2000: daysSince2000 + days) }

    /// `YYYY-MM-DD`.
    public var description: String {
        let y = year < 0 ? "-" + pad(-year, 4) : pad(year, 4)
        return "\(y)-\(pad(month, 2))-\(pad(day, 2))"
    }

    public static func < (lhs: PostgresDate, rhs: PostgresDate) -> Bool { lhs.daysSince2000 < rhs.daysSince2000 }

    public static var postgresType: PostgresType { .date }
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) {
        guard let days = Int32(exactly: daysSince2000) else {
            throw PostgresError(kind: .invalidParameter, message: "the date \(self) is outside PostgreSQL's date range")
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

    public init(hour: Int, minute: Int, second: Int = 0, microsecond: Int = 0) {
        microsecondsSinceMidnight = ((Int64(hour) * 60 + Int64(minute)) * 60 + Int64(second)) * 1_000_000 + Int64(microsecond)
    }

    /// Parses `HH:MM[:SS[.ffffff]]`.
    public init?(isoText text: String) {
        let fields = text.split(separator: ":", omittingEmptySubsequences: false)
        guard fields.count == 2 || fields.count == 3, let h = Int(fields[0]), let m = Int(fields[1]),
              (0...24).contains(h), (0...59).contains(m) else { return nil }
        var seconds = 0
        var micros = 0
        if fields.count == 3 {
            let secondParts = fields[2].split(separator: ".", omittingEmptySubsequences: false)
            guard let s = Int(secondParts[0]), (0...60).contains(s), secondParts.count <= 2 else { return nil }
            seconds = s
            if secondParts.count == 2 {
                let fraction = secondParts[1].prefix(6)
                guard !fraction.isEmpty, let f = Int(fraction) else { return nil }
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
    public func encode(into buffer: inout [UInt8]) throws(PostgresError) { buffer.appendBigEndian(microsecondsSinceMidnight) }

    public init(from cell: PostgresCell) throws {
        let bytes = try cell.nonNull(PostgresTime.self)
        switch cell.format {
        case .binary:
            guard cell.type == .time, let micros = bytes.readBigEndian(Int64.self, at: 0) else {
                throw cell.mismatch(PostgresTime.self, expected: "time")
            }
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

    /// An interval of whole seconds, rounded to the microsecond.
    public init(seconds: Double) { self.init(microseconds: Int64((seconds * 1_000_000).rounded())) }

    /// `1 mon 2 days 03:04:05.000006` style.
    public var description: String {
        var parts: [String] = []
        if months != 0 { parts.append("\(months) mon\(abs(months) == 1 ? "" : "s")") }
        if days != 0 { parts.append("\(days) day\(abs(days) == 1 ? "" : "s")") }
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

    /// Parses the default `IntervalStyle = postgres` output: `1 year 2 mons -3 days 04:05:06.7`.
    init?(postgresText text: String) {
        var months: Int64 = 0
        var days: Int64 = 0
        var micros: Int64 = 0
        let tokens = text.split(separator: " ")
        var index = 0
        while index < tokens.count {
            let token = tokens[index]
            if token.contains(":") {
                var clock = token
                var negative = false
                if clock.first == "-" { negative = true; clock = clock.dropFirst() } else if clock.first == "+" { clock = clock.dropFirst() }
                let fields = clock.split(separator: ":")
                guard fields.count == 3, let h = Int64(fields[0]), let m = Int64(fields[1]) else { return nil }
                let secondParts = fields[2].split(separator: ".")
                guard let s = Int64(secondParts[0]) else { return nil }
                var fraction: Int64 = 0
                if secondParts.count == 2 {
                    let digits = secondParts[1].prefix(6)
                    guard let f = Int64(digits) else { return nil }
                    fraction = f * Int64(pow(10, Double(6 - digits.count)))
                }
                let value = ((h * 60 + m) * 60 + s) * 1_000_000 + fraction
                micros += negative ? -value : value
                index += 1
                continue
            }
            guard let number = Int64(token), index + 1 < tokens.count else { return nil }
            let unit = tokens[index + 1]
            switch unit {
            case "year", "years": months += number * 12
            case "mon", "mons": months += number
            case "day", "days": days += number
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
