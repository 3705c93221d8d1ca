public import Foundation
import Postgres

/// Invite codes: how a second caregiver joins a child (PRD §7.3).
///
/// Codes are 8 characters from an alphabet without look-alikes (no 0/O, 1/I/L), drawn from
/// the system's cryptographically secure generator.
///
/// ```swift
/// let invite = try await store.invites.create(for: childID, as: primaryID)
/// let childID = try await store.invites.redeem(invite.code, as: grandmaID)
/// ```
public struct InviteRepository: Sendable {
    let routing: Routing
    var pool: PostgresPool { routing.primary }

    /// The code alphabet: upper-case letters and digits minus 0, O, 1, I and L.
    public static let alphabet = Array("ABCDEFGHJKMNPQRSTUVWXYZ23456789")
    public static let codeLength = 8

    /// A new random code.
    public static func makeCode() -> String {
        var generator = SystemRandomNumberGenerator()
        return String((0..<codeLength).map { _ in alphabet[Int(generator.next(upperBound: UInt(alphabet.count)))] })
    }

    /// Creates an invite valid for `validFor`, or, by default, for the database's own rule
    /// (`invites.expires_at` defaults to 48 hours after creation: one rule for the app and
    /// for an invite a DBA inserts by hand). Primary only.
    ///
    /// ```swift
    /// let invite = try await store.invites.create(for: child.id, as: primaryID)            // 48 h
    /// let week = try await store.invites.create(for: child.id, validFor: .seconds(7 * 86_400), as: primaryID)
    /// ```
    public func create(for childID: UUID, validFor: Duration? = nil, as actingUser: UUID) async throws -> Invite {
        var lifetime: PostgresInterval?
        if let validFor {
            let seconds = Double(validFor.components.seconds) + Double(validFor.components.attoseconds) / 1e18
            guard seconds >= 60, seconds <= 30 * 86_400, let interval = PostgresInterval(seconds: seconds) else {
                throw StoreError.invalid(field: "validFor", reason: "must be between 1 minute and 30 days")
            }
            lifetime = interval
        }
        let expiresColumn: SQL = lifetime == nil ? "" : ", expires_at"
        let expiresValue: SQL = lifetime.map { ", now() + \($0)" } ?? ""
        return try await routing.writing(as: actingUser) {
            for _ in 0..<5 {
                let code = Self.makeCode()
                do {
                    // Another child's invite with this code (1 in 850 billion): draw again. A
                    // statement of its own, not a NOT EXISTS inside the insert: on Citus it reads
                    // every shard of invites, and such a read cannot sit in a statement that
                    // writes. It was a read before the write either way (under READ COMMITTED
                    // nothing locks a code nobody holds yet); two children given one code at
                    // the same instant still open neither (see `redeem`).
                    // (count(*), not EXISTS: Citus 13 cannot plan `SELECT EXISTS (…)` over every
                    // shard with a parameter.)
                    if try await pool.fetchValue(Bool.self, "SELECT count(*) > 0 FROM invites taken WHERE taken.code = \(code)") == true { continue }
                    let rows = try await pool.query("""
                        WITH me AS (
                            \(Authorization.membership(of: childID, for: actingUser))
                        ), created AS (
                            INSERT INTO invites AS i (code, child_id, created_by\(expiresColumn))
                            SELECT \(code), \(childID), \(actingUser)\(expiresValue)
                            FROM me WHERE me.role = 'primary'
                            RETURNING \(Invite.columns)
                        )
                        SELECT (SELECT role FROM me) AS my_role, created.* FROM (SELECT 1) AS one LEFT JOIN created ON true
                        """)
                    guard let row = rows.first else { throw StoreError.notFound }
                    let role = try row.decode(CaregiverRole?.self, column: "my_role")
                    guard let role else { throw StoreError.notFound }
                    guard role == .primary else { throw StoreError.forbidden(required: .primary) }
                    guard let codeColumn = row.columnIndex("code"), !row.isNull(at: codeColumn) else { throw StoreError.notFound }
                    return try row.decode(as: Invite.self)
                } catch let error as PostgresError where error.declaredConstraint == "invites_pkey" {
                    continue // a code collision (1 in 850 billion) in this child: draw again
                }
            }
            throw StoreError.stateConflict(reason: "could not draw a free invite code; try again")
        }
    }

    /// Joins the invite's child as a caregiver; returns the child's id.
    ///
    /// Atomic and single use: of two people redeeming one code at once, exactly one gets in.
    /// An unknown code is `inviteNotFound`, an expired one `inviteExpired`, one used by someone
    /// else `inviteUsed`. Redeeming again as an existing member (or the same redeemer retrying)
    /// succeeds without using the invite up. Codes are unique per child (`invites_pkey`, 0022)
    /// and `create` never draws one another invite uses; a code that matches invites of two
    /// children all the same is `inviteNotFound`, never a way into both.
    @discardableResult
    public func redeem(_ code: String, as actingUser: UUID) async throws -> UUID {
        guard let normalized = Self.normalize(code) else { throw StoreError.inviteNotFound }
        return try await routing.writing(as: actingUser) {
            // First the child the code belongs to (every shard of `invites` on Citus, a plain
            // read), then everything else in one statement about that child alone: the invite
            // locked, the membership added, the invite used. The second statement checks the
            // invite again under its lock; the first only says where to look.
            let owners = try await pool.query("SELECT i.child_id FROM invites i WHERE i.code = \(normalized) LIMIT 2").decodeColumn(UUID.self)
            guard owners.count == 1, let owner = owners.first else { throw StoreError.inviteNotFound }
            let rows = try await pool.query("""
                WITH invite AS (
                    SELECT i.code, i.child_id, i.expires_at, i.redeemed_by, i.redeemed_at FROM invites i
                    WHERE i.code = \(normalized) AND i.child_id = \(owner)
                    FOR UPDATE OF i
                ), already AS (
                    -- One column: Citus cannot carry a CTE without columns between its steps.
                    SELECT 1 FROM caregivers cg WHERE cg.child_id = \(owner) AND cg.user_id = \(actingUser)
                ), joined AS (
                    INSERT INTO caregivers (child_id, user_id, role)
                    SELECT invite.child_id, \(actingUser), 'caregiver' FROM invite
                    WHERE invite.redeemed_at IS NULL AND invite.expires_at > now() AND NOT EXISTS (SELECT FROM already)
                    ON CONFLICT (child_id, user_id) DO NOTHING
                    RETURNING child_id
                ), used AS (
                    UPDATE invites SET redeemed_by = \(actingUser), redeemed_at = now()
                    WHERE code = \(normalized) AND child_id = \(owner) AND EXISTS (SELECT FROM joined)
                    RETURNING code
                )
                SELECT invite.child_id, invite.redeemed_by, invite.redeemed_at IS NOT NULL AS used,
                       invite.expires_at <= now() AS expired,
                       EXISTS (SELECT FROM already) AS already_member, EXISTS (SELECT FROM joined) AS joined
                FROM invite
                """)
            guard let row = rows.first else { throw StoreError.inviteNotFound }
            let (childID, redeemedBy, used, expired, alreadyMember, joined) = try row.decode((UUID, UUID?, Bool, Bool, Bool, Bool).self)
            if joined { await routing.announce([childID]) }
            if joined || alreadyMember || redeemedBy == actingUser { return childID }
            if used { throw StoreError.inviteUsed }
            if expired { throw StoreError.inviteExpired }
            throw StoreError.stateConflict(reason: "the invite could not be redeemed; try again")
        }
    }

    /// A code as a person may type it (any case, spaces around), as stored; `nil` when it
    /// cannot be a code. The one rule of `redeem` and `revoke`.
    static func normalize(_ code: String) -> String? {
        let normalized = code.trimmingCharacters(in: .whitespacesAndNewlines).uppercased()
        guard normalized.count == codeLength, normalized.allSatisfy({ alphabet.contains($0) }) else { return nil }
        return normalized
    }

    /// Deletes an unused invite. Primary only. The code is read as `redeem` reads it.
    public func revoke(_ code: String, as actingUser: UUID) async throws {
        guard let code = Self.normalize(code) else { throw StoreError.notFound }
        try await routing.writing(as: actingUser) {
            // As `redeem`: first which child's invite this is (one the user belongs to, their
            // primary one first), then one statement about that child alone.
            let owners = try await pool.query("""
                SELECT i.child_id FROM invites i
                JOIN caregivers cg ON cg.child_id = i.child_id AND cg.user_id = \(actingUser)
                WHERE i.code = \(code)
                ORDER BY cg.role = 'primary' DESC, i.child_id LIMIT 1
                """).decodeColumn(UUID.self)
            guard let owner = owners.first else { throw StoreError.notFound }
            let rows = try await pool.query("""
                WITH invite AS (
                    SELECT i.code, i.child_id, i.redeemed_at, cg.role FROM invites i
                    JOIN caregivers cg ON cg.child_id = i.child_id AND cg.user_id = \(actingUser)
                    WHERE i.code = \(code) AND i.child_id = \(owner) AND cg.child_id = \(owner)
                ), revoked AS (
                    DELETE FROM invites i
                    WHERE i.code = \(code) AND i.child_id = \(owner) AND i.redeemed_at IS NULL
                      AND EXISTS (SELECT FROM invite WHERE invite.role = 'primary')
                    RETURNING 1
                )
                SELECT (SELECT role FROM invite), (SELECT redeemed_at IS NOT NULL FROM invite), (SELECT count(*) FROM revoked)
                """)
            guard let row = rows.first else { throw StoreError.notFound }
            let (role, used, revoked) = try row.decode((CaregiverRole?, Bool?, Int).self)
            guard let role else { throw StoreError.notFound }
            guard role == .primary else { throw StoreError.forbidden(required: .primary) }
            if used == true { throw StoreError.inviteUsed }
            guard revoked == 1 else { throw StoreError.notFound }
        }
    }

    /// Unused, unexpired invites of a child, newest first. Primary only (codes are secrets).
    public func pending(for childID: UUID, as actingUser: UUID) async throws -> [Invite] {
        try await routing.reading(as: actingUser) { pool in
            let rows = try await pool.query("""
                WITH me AS (
                    \(Authorization.membership(of: childID, for: actingUser))
                )
                SELECT (SELECT role FROM me) AS my_role, pending.* FROM (SELECT 1) AS one
                LEFT JOIN LATERAL (
                    SELECT \(Invite.columns) FROM invites i
                    WHERE i.child_id = \(childID) AND i.redeemed_at IS NULL AND i.expires_at > now()
                      AND EXISTS (SELECT FROM me WHERE role = 'primary')
                    ORDER BY i.created_at DESC
                ) AS pending ON true
                """)
            guard let first = rows.first else { throw StoreError.notFound }
            guard let role = try first.decode(CaregiverRole?.self, column: "my_role") else { throw StoreError.notFound }
            guard role == .primary else { throw StoreError.forbidden(required: .primary) }
            return try rows.filter { !$0.isNull(at: 1) }.map { try $0.decode(as: Invite.self) }
        }
    }
}
