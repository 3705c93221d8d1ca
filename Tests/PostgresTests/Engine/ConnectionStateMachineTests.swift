@testable import Postgres
import Testing

/// The connection's rules, driven event by event with a manual clock and no server: each
/// ordering that a real server produces only by chance is produced here on purpose.
@Suite struct ConnectionStateMachineTests {
    typealias Machine = ConnectionStateMachine

    // MARK: Pipelining

    @Test func pipelinedRequestsGoOutTogetherAndEachGetsItsOwnResults() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1))
        h.submit(2, .pipelined(steps: 2))
        #expect(h.pump() == [1, 2])
        h.read(Machine.ResultEvent.step + [.sync])
        h.read(Machine.ResultEvent.step + Machine.ResultEvent.step + [.sync])
        #expect(h.answer(1) == .success)
        #expect(h.answer(2) == .success)
        #expect(h.kept == [1: 1, 2: 2])
        #expect(h.machine.pendingCount == 0)
    }

    @Test func aScriptOrAStreamWaitsUntilNothingIsInFlight() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1))
        h.submit(2, .simple)
        h.submit(3, .pipelined(steps: 1))
        #expect(h.pump() == [1])
        h.read(Machine.ResultEvent.step + [.sync])
        // The script leaves pipeline mode, alone; the next pipelined request waits for it.
        #expect(h.machine.nextSend(transactionStatus: .idle) == .send(2, enterPipeline: false, exitPipeline: true))
        #expect(h.machine.nextSend(transactionStatus: .idle) == nil)
        h.read([.result, .result, .endOfStep])
        #expect(h.machine.nextSend(transactionStatus: .idle) == .send(3, enterPipeline: true, exitPipeline: false))
        #expect(h.kept[2] == 1, "a script answers with its last result only")
    }

    /// The deferred constraint that fails at the implicit COMMIT: the statement's result, its
    /// NULL, then the error, its NULL, and the Sync's answer in a later read. The caller gets
    /// the constraint error, once, and the connection goes on. (On a real server the same
    /// ordering is forced by ReadSplittingTests.)
    @Test func anErrorAndItsSyncsAnswerInSeparateReadsAreOneAnswer() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1))
        h.pump()
        #expect(h.read([.result, .endOfStep, .failed("23503", .foreignKeyViolation), .endOfStep]) == 4)
        #expect(h.answers[1] == nil, "answered before the Sync")
        #expect(h.machine.readDecision() == .read, "the request is still in flight, waiting for its Sync")
        h.read([.sync])
        #expect(h.error(1)?.kind == .foreignKeyViolation)
        #expect(h.error(1)?.stepIndex == nil, "an error at the Sync is the statement's own, not a step's")
        h.submit(2, .pipelined(steps: 1))
        #expect(h.pump() == [2])
    }

    @Test func aFailedStepNamesItselfAndTheRestAreAborted() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 3))
        h.pump()
        h.read(Machine.ResultEvent.step + [.failed("22012", .divisionByZero), .endOfStep, .aborted, .endOfStep, .sync])
        #expect(h.error(1)?.stepIndex == 1)
        #expect(h.kept[1] == 1)
    }

    @Test func twoNullsInARowMeanLibpqLostItsPlaceAndTheConnectionIsGivenUp() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1))
        h.submit(2, .pipelined(steps: 1))
        h.pump()
        h.read([.result, .endOfStep, .endOfStep])
        #expect(h.machine.isBroken)
        #expect(h.error(1)?.message.contains("lost its place") == true)
        #expect(h.error(2)?.kind == .connectionFailure)
    }

    @Test func aCopyStartedByAQueryIsAbortedAndAMisuse() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1))
        h.pump()
        h.read([.copyStarted, .failed("57014", .queryCanceled), .endOfStep, .sync])
        #expect(h.copiesAborted == 1)
        #expect(h.error(1)?.kind == .misuse)
    }

    // MARK: Deadlines

    @Test func aDeadlineBeforeSendingMeansNeverSent() {
        var h = ConnectionMachineHarness()
        h.submit(1, .simple)
        h.submit(2, .simple, deadline: .seconds(1))
        h.pump()
        h.advance(by: .seconds(1))
        let error = h.error(2)
        #expect(error?.kind == .timeout)
        #expect(error?.retry == .safe)
        h.read([.result, .endOfStep])
        #expect(h.pump() == [], "the timed-out request is never sent")
        #expect(h.timers.isEmpty && h.timersAgree())
    }

    @Test func aDeadlineOfAStatementAloneCancelsItAndTheServersAnswerIsATimeout() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1), deadline: .seconds(2))
        h.pump()
        h.advance(by: .seconds(2))
        #expect(h.cancelsSent == [1])
        h.cancelReturns(1)
        h.read([.failed("57014", .queryCanceled), .endOfStep, .sync])
        let error = h.error(1)
        #expect(error?.kind == .timeout)
        #expect(error?.message.contains("cancelled on the server") == true)
        #expect(!h.machine.isBroken)
        #expect(h.timers.isEmpty && h.timersAgree())
    }

    /// A silent peer (a frozen server, a dropped path): the caller hears within the deadline
    /// plus `answerWait`, the connection is given up at the deadline plus `grace`, and every
    /// step happens at an exact time on the manual clock, whatever the machine's load.
    @Test func aSilentPeerIsATimeoutAtAnExactTimeThenTheConnectionIsGivenUp() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1), deadline: .seconds(2))
        h.submit(2, .pipelined(steps: 1))
        h.pump()
        h.advance(by: .seconds(2))
        #expect(h.cancelsSent.isEmpty, "two requests in flight: a cancel could hit the other one")
        #expect(h.error(1)?.kind == .timeout)
        #expect(h.error(1)?.retry == .outcomeUnknown)
        h.advance(by: h.machine.timings.grace - .milliseconds(1))
        #expect(!h.machine.isBroken)
        h.advance(by: .milliseconds(1))
        #expect(h.machine.isBroken)
        #expect(h.error(2)?.kind == .connectionFailure)
        #expect(h.timers.isEmpty && h.timersAgree())
    }

    @Test func aSilentPeerAfterACancelIsAnsweredAsUnconfirmedAfterAnswerWait() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1), deadline: .seconds(1))
        h.pump()
        h.advance(by: .seconds(1))
        #expect(h.answers[1] == nil)
        h.advance(by: h.machine.timings.answerWait)
        #expect(h.error(1)?.message.contains("has not answered") == true)
        h.advance(by: h.machine.timings.grace)
        #expect(h.machine.isBroken)
        #expect(h.answers[1]?.count == 1, "the loss does not answer a second time")
    }

    // MARK: Cancelling

    @Test func aCancelIsSentAgainUntilTheStatementStopsAndNothingElseGoesMeanwhile() {
        var h = ConnectionMachineHarness(timings: .init(grace: .seconds(5), answerWait: .seconds(1), retry: .milliseconds(300)))
        h.submit(1, .pipelined(steps: 1))
        h.pump()
        h.interrupt(1)
        h.submit(2, .pipelined(steps: 1))
        #expect(h.pump() == [], "nothing is sent while a cancel is out: it could reach the next statement")
        h.advance(by: h.machine.timings.retry)
        #expect(h.cancelsSent == [1], "the first call has not returned: no second one")
        h.cancelReturns(1)
        h.advance(by: h.machine.timings.retry)
        #expect(h.cancelsSent == [1, 1])
        h.read([.failed("57014", .queryCanceled), .endOfStep, .sync])
        #expect(h.error(1)?.kind == .queryCanceled)
        #expect(h.pump() == [], "the second cancel call is still out")
        h.cancelReturns(1)
        #expect(h.pump() == [2])
    }

    @Test func anInterruptedStatementSharingTheWireIsAnsweredAtOnceAndDrainedLater() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1))
        h.submit(2, .pipelined(steps: 1))
        h.pump()
        h.interrupt(2)
        #expect(h.error(2)?.kind == .queryCanceled)
        h.read(Machine.ResultEvent.step + [.sync] + Machine.ResultEvent.step + [.sync])
        #expect(h.answer(1) == .success)
        #expect(h.answers[2]?.count == 1, "draining does not answer again")
        #expect(h.timers.isEmpty && h.timersAgree())
    }

    @Test func withoutACancelObjectTheCallerIsAnsweredAtOnce() {
        var h = ConnectionMachineHarness(canCancel: false)
        h.submit(1, .simple)
        h.pump()
        h.interrupt(1)
        #expect(h.cancelsSent.isEmpty)
        #expect(h.error(1)?.kind == .queryCanceled)
    }

    // MARK: Losing the connection

    @Test(arguments: [
        (TransactionStatus.idle, false, false, PostgresError.Retry.outcomeUnknown),
        (.inTransaction, false, false, .safe),
        (.inTransaction, true, false, .outcomeUnknown),
        (.idle, false, true, .safe),
    ])
    func aLostConnectionSaysWhatMayHaveBeenApplied(status: TransactionStatus, commit: Bool, prepareOnly: Bool, expected: PostgresError.Retry) {
        var h = ConnectionMachineHarness()
        h.transactionStatus = status
        h.submit(1, .pipelined(steps: 1), isCommit: commit, changesNothing: prepareOnly)
        h.submit(2, .simple)
        h.pump()
        h.lose()
        #expect(h.error(1)?.retry == expected)
        #expect(h.error(2)?.retry == .safe, "never sent")
        #expect(h.error(2)?.message.contains("never sent") == true)
    }

    @Test func aTerminationTheServerAnnouncedIsTheCallersErrorAndSafe() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1))
        h.pump()
        h.read([.failed("57P01", .adminShutdown)])
        h.lose()
        #expect(h.error(1)?.kind == .adminShutdown)
        #expect(h.error(1)?.retry == .safe)
    }

    @Test func aStatementSentAfterTheServerSaidItWasEndingTheSessionNeverRan() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1))
        h.pump(serverEndedSession: true)
        h.lose()
        #expect(h.error(1)?.retry == .safe)
    }

    @Test func aRequestWhoseSendFailedWasNeverDelivered() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1))
        h.pump()
        h.apply(h.machine.sendFailed(1, reason: "could not queue"))
        #expect(h.error(1)?.retry == .safe)
        h.submit(2, .simple)
        #expect(h.error(2)?.message.contains("broken") == true)
    }

    @Test func aLostConnectionInEveryStateAnswersEachCallerOnceAndStopsEveryTimer() {
        // Waiting, in flight, interrupted and answered, cancel out, stream paused.
        var h = ConnectionMachineHarness()
        h.submit(1, .stream, deadline: .seconds(5))
        h.pump()
        h.read(Array(repeating: .row, count: 3))
        h.streamHolds(1, Machine.streamBufferLimit)
        #expect(h.machine.readDecision() == .wait)
        h.submit(2, .pipelined(steps: 1), deadline: .seconds(1))
        h.submit(3, .simple)
        h.interrupt(3)
        h.advance(by: .seconds(1))
        h.lose()
        for id: UInt64 in [1, 2, 3] { #expect(h.answers[id]?.count == 1, "request \(id)") }
        #expect(h.timers.isEmpty && h.machine.activeTimers.isEmpty)
        #expect(h.machine.interest == .none)
    }

    @Test func closeWithRequestsInFlightFailsThemAndRefusesMore() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1))
        h.pump()
        h.apply(h.machine.close())
        #expect(h.error(1)?.kind == .connectionFailure)
        h.submit(2, .simple)
        #expect(h.error(2)?.message.contains("closed") == true)
    }

    // MARK: Streams

    @Test func aFullStreamPausesReadingAndAHalfEmptyOneResumesIt() {
        var h = ConnectionMachineHarness()
        h.submit(1, .stream)
        h.pump()
        h.read([.row])
        h.streamHolds(1, Machine.streamBufferLimit)
        #expect(h.machine.readDecision() == .wait)
        #expect(h.machine.interest.read == false)
        h.streamHolds(1, Machine.streamBufferLimit / 2)
        #expect(h.resumeReadingAsked == 0, "half full is not yet drained enough")
        h.streamHolds(1, Machine.streamBufferLimit / 2 - 1)
        #expect(h.resumeReadingAsked == 1)
        #expect(h.machine.interest.read)
    }

    /// A stream goes alone, in pipeline mode, and ends at its own Sync's answer (libpq turns
    /// single-row mode off as it moves on to that Sync; outside pipeline mode it stayed on for
    /// the next statement). Nothing joins it meanwhile; afterwards pipelined requests need not
    /// enter pipeline mode again.
    @Test func aStreamGoesAloneInPipelineModeAndEndsAtItsSync() {
        var h = ConnectionMachineHarness()
        h.submit(1, .pipelined(steps: 1))
        h.submit(2, .stream)
        h.submit(3, .pipelined(steps: 1))
        #expect(h.machine.nextSend(transactionStatus: .idle) == .send(1, enterPipeline: true, exitPipeline: false))
        #expect(h.machine.nextSend(transactionStatus: .idle) == nil, "the stream went with a request in flight")
        h.read(Machine.ResultEvent.step + [.sync])
        #expect(h.machine.nextSend(transactionStatus: .idle) == .send(2, enterPipeline: false, exitPipeline: false))
        #expect(h.machine.nextSend(transactionStatus: .idle) == nil, "a pipelined request joined the stream")
        h.read([.row, .row, .result, .endOfStep])
        #expect(h.answers[2] == nil, "the stream ended before its Sync's answer")
        #expect(h.machine.nextSend(transactionStatus: .idle) == nil)
        h.read([.sync])
        #expect(h.rowsDelivered[2] == 2)
        #expect(h.answers[2]?.count == 1)
        #expect(h.machine.nextSend(transactionStatus: .idle) == .send(3, enterPipeline: false, exitPipeline: false))
    }

    @Test func aStreamWithoutItsSyncLosesTheConnection() {
        var h = ConnectionMachineHarness()
        h.submit(1, .stream)
        h.pump()
        h.read([.row, .result, .endOfStep, .endOfStep])
        #expect(h.machine.isBroken)
        #expect(h.error(1)?.message.contains("lost its place") == true)
    }

    @Test func anAbandonedPausedStreamIsReadAgainCancelledAndDrained() {
        var h = ConnectionMachineHarness()
        h.submit(1, .stream)
        h.pump()
        h.read([.row])
        h.streamHolds(1, Machine.streamBufferLimit)
        #expect(h.machine.readDecision() == .wait)
        h.apply(h.machine.abandonStream(1))
        #expect(h.resumeReadingAsked == 1, "the server can only see the cancel once its rows are off the wire")
        #expect(h.cancelsSent == [1])
        h.read([.row, .row, .failed("57014", .queryCanceled), .endOfStep, .sync])
        #expect(h.rowsDelivered[1] == 1, "rows after the reader left are dropped")
        #expect(h.answers[1]?.count == 1)
    }

    // MARK: COPY

    @Test func aCopyTakesTheConnectionOnlyWhenNothingIsInFlight() {
        var m = Machine()
        _ = m.startConnecting(timeout: .seconds(1), target: "t")
        _ = m.connected(canCancel: true)
        _ = m.submit(.init(id: 1, mode: .pipelined(steps: 1)))
        #expect(m.beginOffload() == nil)
        _ = m.nextSend(transactionStatus: .idle)
        _ = m.received(.sync)
        #expect(m.beginOffload() == true, "pipeline mode is left first")
        #expect(m.pendingCount == 1 && m.interest == .none)
        _ = m.submit(.init(id: 2, mode: .simple))
        #expect(m.nextSend(transactionStatus: .idle) == nil, "nothing goes while the COPY runs")
        _ = m.endOffload(bad: false, reason: "")
        #expect(m.nextSend(transactionStatus: .idle) == .send(2, enterPipeline: false, exitPipeline: false))
    }

    // MARK: Connecting

    @Test func aConnectTimeoutFailsTheConnectAndNothingElse() {
        var m = Machine()
        let start = m.startConnecting(timeout: .seconds(3), target: "host h port 1")
        #expect(start == [.startTimer(.connect, .seconds(3))])
        _ = m.connectPolled(.reading, failure: PostgresError(kind: .connectionFailure, message: "x"))
        #expect(m.interest == .init(read: true, write: false))
        let actions = m.timerFired(.connect)
        guard case .connectFailed(let error)? = actions.first else {
            Issue.record("no failure: \(actions)")
            return
        }
        #expect(error.message.contains("connect timeout") && error.message.contains("host h port 1"))
        #expect(m.connected(canCancel: true).isEmpty, "a late success after the timeout is ignored")
    }

    // MARK: The cost of an action

    /// Every statement's actions are built, copied and read several times on the I/O thread.
    /// An error inline made each of them the size of a `PostgresError` (and its copies went
    /// through value witnesses): errors are boxed, so an action stays a few words (the largest
    /// case is a timer with its delay).
    @Test func anActionStaysSmall() {
        #expect(MemoryLayout<Machine.Action>.size <= 40, "Action is \(MemoryLayout<Machine.Action>.size) bytes")
        #expect(MemoryLayout<Machine.Outcome>.size <= 8)
        var actions = Machine.Actions()
        actions.append(.keep(1, replacing: false))
        actions.append(.complete(1, .success, answerCaller: true))
        #expect(actions == [.keep(1, replacing: false), .complete(1, .success, answerCaller: true)])
        actions.append(.discard)
        #expect(actions.count == 3 && actions[2] == .discard && actions.last == .discard)
        #expect(actions + [.resumeReading] == [.keep(1, replacing: false), .complete(1, .success, answerCaller: true), .discard, .resumeReading])
    }
}
