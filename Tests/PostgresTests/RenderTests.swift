@testable import Postgres
import Foundation
import Testing

/// Rendering remembers the text of statements built from source literals and values (their
/// shape), and the statement cache finds them by text and parameter types.
@Suite struct RenderTests {
    static func render(_ sql: SQL) throws -> RenderedSQL {
        try sql.render(quoteIdentifier: { "\"" + $0 + "\"" })
    }

    static func lookup(_ id: Int, _ note: String?) -> SQL {
        "SELECT * FROM events WHERE id = \(id) AND note IS NOT DISTINCT FROM \(note)"
    }

    @Test func theSameShapeWithOtherValuesSharesItsText() throws {
        let first = try Self.render(Self.lookup(1, "a"))
        let second = try Self.render(Self.lookup(2, nil))
        #expect(first.text == "SELECT * FROM events WHERE id = $1 AND note IS NOT DISTINCT FROM $2")
        #expect(second.text == first.text)
        #expect(first.cacheKey == second.cacheKey)
        #expect(first.lengths == [8, 1] && second.lengths == [8, -1])
        #expect(first.buffer != second.buffer)
    }

    @Test func otherParameterTypesAreAnotherStatement() throws {
        let asInt: SQL = "SELECT \(Int32(1))"
        let asText: SQL = "SELECT \("1")"
        let int = try Self.render(asInt), text = try Self.render(asText)
        #expect(int.text == text.text)
        #expect(int.cacheKey != text.cacheKey)
    }

    /// Runtime text and identifiers change the text without changing the literals: such a
    /// statement is rendered in full every time, never taken from another's shape.
    @Test func runtimeTextAndIdentifiersAreNeverTakenFromAShape() throws {
        for table in ["events", "children"] {
            let byName: SQL = "SELECT * FROM \(identifier: table) WHERE id = \(1)"
            #expect(byName.textShape == nil)
            #expect(try Self.render(byName).text == "SELECT * FROM \"\(table)\" WHERE id = $1")
            let raw: SQL = "SELECT * FROM \(SQL(unsafeRawSQL: table)) WHERE id = \(1)"
            #expect(raw.textShape == nil)
            #expect(try Self.render(raw).text == "SELECT * FROM \(table) WHERE id = $1")
        }
        let fragment: SQL = "AND deleted_at IS NULL"
        let composed: SQL = "SELECT * FROM events WHERE id = \(1) \(fragment)"
        #expect(composed.textShape != nil)
        #expect(try Self.render(composed).text == "SELECT * FROM events WHERE id = $1 AND deleted_at IS NULL")
    }

    /// One remembered entry per shape holds both its text and the pool's session check; shapes
    /// that differ only in where a value sits, or in one literal, keep their own answers.
    @Test func eachShapeKeepsItsOwnTextAndSessionAnswer() throws {
        let statements: [SQL] = [
            Self.lookup(1, "a"),
            Self.lookup(2, nil),
            "SET statement_timeout = \(1)",
            "SELECT \(1) AS a",
            "SELECT pg_advisory_lock(\(1))",
        ]
        let shapes = statements.compactMap(\.textShape)
        #expect(shapes.count == statements.count)
        #expect(Set(shapes).count == 4, "the first two are one shape (the same literals, built at one place), the rest each their own")
        for _ in 0..<2 { // the second round comes from what the first remembered
            for sql in statements {
                #expect(try Self.render(sql).text == sql.description)
                #expect(SessionSettings.needsOwnSession(sql) == SessionSettings.needsOwnSession(sql.description), "\(sql.description)")
            }
        }
        #expect(SessionSettings.needsOwnSession(statements[2]) && SessionSettings.needsOwnSession(statements[4]))
        #expect(!SessionSettings.needsOwnSession(statements[0]) && !SessionSettings.needsOwnSession(statements[3]))
    }

    /// The pool looks a statement's shape up once, for its session check and the render: a
    /// lookup made before anything was remembered of the shape renders it in full, one made
    /// after renders from what was remembered, and both give the statement's own text.
    @Test func aShapeLookedUpOnceServesTheCheckAndTheRender() throws {
        // A shape no other test has: its first lookup knows nothing yet.
        let sql: SQL = "SELECT \(7) AS looked_up_once, \("x") AS b"
        let before = try #require(sql.shapeLookup)
        #expect(before.facts == nil)
        #expect(!SessionSettings.needsOwnSession(sql, looked: before))
        #expect(try sql.render(quoteIdentifier: { $0 }, looked: before).text == "SELECT $1 AS looked_up_once, $2 AS b")
        let after = try #require(sql.shapeLookup)
        #expect(after.facts?.text?.text == "SELECT $1 AS looked_up_once, $2 AS b" && after.facts?.ownSession == false)
        let rendered = try sql.render(quoteIdentifier: { $0 }, looked: after)
        #expect(rendered.text == "SELECT $1 AS looked_up_once, $2 AS b" && rendered.types.count == 2)
        // A statement without a shape (runtime text) is scanned whole, either way.
        let runtime = SQL(unsafeRawSQL: "SET search_path = public")
        #expect(runtime.shapeLookup == nil)
        #expect(SessionSettings.needsOwnSession(runtime, looked: nil))
    }

    /// A one-character statement is a literal without an address: rendered and checked in full.
    @Test func aOneCharacterLiteralIsRenderedInFull() throws {
        let star: SQL = "*"
        #expect(star.description == "*")
        #expect(try Self.render(star).text == "*")
        #expect(!SessionSettings.needsOwnSession(star))
        let pair: SQL = "SELECT \(1),\(2)"
        #expect(try Self.render(pair).text == "SELECT $1,$2")
    }
}
