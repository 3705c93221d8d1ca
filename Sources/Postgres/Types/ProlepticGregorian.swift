public import Foundation

/// The calendar PostgreSQL uses: the Gregorian calendar extended backwards before its 1582
/// adoption (proleptic), with a year 0 (1 BC). Foundation's Gregorian calendar switches to the
/// Julian one before 1582-10-15, so a date parsed or printed with it lands ten days (or more)
/// away from the one PostgreSQL stores; every conversion of ours between instants and calendar
/// dates goes through here instead. Pure integer arithmetic (Howard Hinnant's algorithms):
/// exact for every date, no allocation, no locale.
///
/// ```swift
/// ProlepticGregorian.days(year: 2000, month: 1, day: 1)   // 10957 (days since 1970-01-01)
/// ProlepticGregorian.civil(days: -719162)                 // (1, 1, 1)
/// ```
public enum ProlepticGregorian {
    /// Days from 1970-01-01 to the given date. Exact for any real date; wrapping, never
    /// trapping, for absurd input.
    public static func days(year: Int64, month: Int64, day: Int64) -> Int64 {
        let y = month <= 2 ? year &- 1 : year
        let era = (y >= 0 ? y : y &- 399) / 400
        let yoe = y &- era &* 400
        let mp = (month % 12 &+ 21) % 12
        let doy = (153 &* mp &+ 2) / 5 &+ day &- 1
        let doe = yoe &* 365 &+ yoe / 4 &- yoe / 100 &+ doy
        return era &* 146_097 &+ doe &- 719_468
    }

    /// The date `days` after 1970-01-01 (wrapping, never trapping, far outside any calendar).
    public static func civil(days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days &+ 719_468
        let era = (z >= 0 ? z : z &- 146_096) / 146_097
        let doe = z &- era &* 146_097
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yoe &+ era &* 400 &+ (month <= 2 ? 1 : 0), month, day)
    }

    /// Whether `year` (proleptic, year 0 = 1 BC) has a February 29th.
    public static func isLeap(_ year: Int64) -> Bool { year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) }

    /// Days in `month` of `year`.
    public static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: isLeap(year) ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Microseconds from 1970-01-01 00:00 UTC to `date`, rounded to the microsecond; nil for
    /// a date no `Int64` of microseconds holds (NaN, infinite, beyond ±292,000 years).
    public static func microseconds(of date: Date) -> Int64? {
        // From 2001 (Date's own reference), as `date(microseconds:)`: going through
        // `timeIntervalSince1970` first adds 978,307,200 s in floating point and can move the
        // result by a microsecond.
        let micros = (date.timeIntervalSinceReferenceDate * 1_000_000).rounded()
        guard micros.isFinite, abs(micros) < 9.2e18 else { return nil }
        let (value, overflow) = Int64(micros).addingReportingOverflow(978_307_200_000_000)
        return overflow ? nil : value
    }

    /// The `Date` `micros` microseconds after 1970-01-01 00:00 UTC, as exactly as `Date` holds it.
    public static func date(microseconds micros: Int64) -> Date {
        // From 2001 (Date's own reference), so dates near today keep every microsecond.
        let (relative, overflow) = micros.subtractingReportingOverflow(978_307_200_000_000)
        return overflow ? Date(timeIntervalSinceReferenceDate: Double(micros) / 1_000_000 - 978_307_200)
            : Date(timeIntervalSinceReferenceDate: Double(relative) / 1_000_000)
    }
}
