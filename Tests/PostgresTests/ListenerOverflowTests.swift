@testable import Postgres
import Testing

/// A consumer that falls behind the listener's buffer is told so: never a silent gap.
@Suite struct ListenerOverflowTests {
    private func notification(_ n: Int) -> PostgresListener.Event {
        .notification(PostgresNotification(channel: "c", payload: "\(n)", senderPID: 1))
    }

    @Test func aDroppedEventIsReportedBeforeAnythingNewer() async {
        let (stream, raw) = AsyncStream<PostgresListener.Event>.makeStream(bufferingPolicy: .bufferingOldest(3))
        let continuation = GapReportingContinuation(raw)
        for n in 1...5 { continuation.yield(notification(n)) }     // 4 and 5 find no room
        var iterator = stream.makeAsyncIterator()
        var heard: [PostgresListener.Event] = []
        for _ in 1...3 { if let event = await iterator.next() { heard.append(event) } }
        #expect(heard == [notification(1), notification(2), notification(3)])

        continuation.yield(notification(6))                         // room again: the gap first
        continuation.finish()
        var rest: [PostgresListener.Event] = []
        while let event = await iterator.next() { rest.append(event) }
        #expect(rest == [.overflowed, notification(6)])
    }

    @Test func aConsumerThatKeepsUpSeesNoGap() async {
        let (stream, raw) = AsyncStream<PostgresListener.Event>.makeStream(bufferingPolicy: .bufferingOldest(3))
        let continuation = GapReportingContinuation(raw)
        var iterator = stream.makeAsyncIterator()
        var heard: [PostgresListener.Event] = []
        for n in 1...10 {
            continuation.yield(notification(n))
            if let event = await iterator.next() { heard.append(event) }
        }
        #expect(heard == (1...10).map(notification))
    }
}
