import Foundation
import Postgres
import Testing

/// users, children, caregivers, invites: each rule refused and accepted.
@Suite struct AccountConstraintTests {
    @Test func emailIsUniqueIgnoringCase() async throws {
        let (connection, _) = try await migratedDatabase()
        try await connection.makeUser("Parent@Example.com")
        await expectRefusal("23505", constraint: "users_email_lower_key") {
            try await connection.makeUser("parent@EXAMPLE.com")
        }
        try await connection.makeUser("other.parent@example.com")
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM users") == 2)
    }

    @Test func childNameAndTimeZoneAreChecked() async throws {
        let (connection, _) = try await migratedDatabase()
        let user = try await connection.makeUser()
        for (name, zone, constraint) in [("   ", "UTC", "children_name_not_blank"), ("Zoë", "Not/AZone", "children_timezone_valid"), ("Zoë", "EST5EDT+1", "children_timezone_valid")] {
            await expectRefusal("23514", constraint: constraint) {
                try await connection.transaction { connection in
                    let child = UUID()
                    try await connection.execute("""
                        INSERT INTO children (id, name, birth_date, primary_caregiver_id, timezone)
                        VALUES (\(child), \(name), '2026-01-01', \(user), \(zone))
                        """)
                    try await connection.execute("INSERT INTO caregivers (child_id, user_id, role) VALUES (\(child), \(user), 'primary')")
                }
            }
        }
        let family = try await connection.makeFamily(timezone: "Australia/Adelaide")
        let row = try #require(try await connection.query("SELECT timezone, day_start_time, settings::text FROM children WHERE id = \(family.childID)").first)
        let (zone, dayStart, settings) = try row.decode((String, PostgresTime, String).self)
        #expect(zone == "Australia/Adelaide" && dayStart == PostgresTime(hour: 0, minute: 0) && settings == "{}")
        await expectRefusal("23514", constraint: "children_settings_valid") {
            try await connection.execute(#"UPDATE children SET settings = '{"unit":"cups"}' WHERE id = \#(family.childID)"#)
        }
        try await connection.execute(#"UPDATE children SET settings = '{"unit":"ml","default_bottle_ml":120}' WHERE id = \#(family.childID)"#)
    }

    @Test func exactlyOnePrimaryWhichIsTheChildsPrimaryCaregiver() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        let second = try await connection.makeUser()
        await expectRefusal("23505", constraint: "caregivers_one_primary_per_child") {
            try await connection.execute("INSERT INTO caregivers (child_id, user_id, role) VALUES (\(family.childID), \(second), 'primary')")
        }
        try await connection.execute("INSERT INTO caregivers (child_id, user_id, role) VALUES (\(family.childID), \(second), 'caregiver')")
        await expectRefusal("23514", constraint: "caregivers_role_valid") {
            try await connection.execute("UPDATE caregivers SET role = 'owner' WHERE user_id = \(second)")
        }
        // A child without its primary caregiver row is refused at COMMIT.
        let orphanUser = try await connection.makeUser()
        await expectRefusal("23503", constraint: "children_primary_is_caregiver_fkey") {
            try await connection.execute("""
                INSERT INTO children (name, birth_date, primary_caregiver_id) VALUES ('Orphan', '2026-01-01', \(orphanUser))
                """)
        }
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM children") == 1)
        // The supported way to move the primary role.
        try await connection.execute("SELECT transfer_primary_caregiver(\(family.childID), \(second))")
        let primary = try await connection.fetchValue(UUID.self, "SELECT user_id FROM caregivers WHERE child_id = \(family.childID) AND role = 'primary'")
        #expect(primary == second)
        #expect(try await connection.fetchValue(UUID.self, "SELECT primary_caregiver_id FROM children") == second)
    }

    @Test func invitesAreUniqueAndSingleUse() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        let guest = try await connection.makeUser()
        let guest2 = try await connection.makeUser()
        try await connection.execute("""
            INSERT INTO invites (code, child_id, created_by, expires_at) VALUES ('ABCDEFGH', \(family.childID), \(family.userID), now() + interval '48 hours')
            """)
        await expectRefusal("23505", constraint: "invites_pkey") {
            try await connection.execute("""
                INSERT INTO invites (code, child_id, created_by, expires_at) VALUES ('ABCDEFGH', \(family.childID), \(family.userID), now() + interval '1 hour')
                """)
        }
        try await connection.execute("UPDATE invites SET redeemed_by = \(guest), redeemed_at = now() WHERE code = 'ABCDEFGH'")
        await expectRefusal("23514", constraint: "invites_single_use") {
            try await connection.execute("UPDATE invites SET redeemed_by = \(guest2), redeemed_at = now() WHERE code = 'ABCDEFGH'")
        }
    }

    @Test func soleCaregiverCannotDeleteTheirAccount() async throws {
        let (connection, _) = try await migratedDatabase()
        let family = try await connection.makeFamily()
        await expectRefusal("23001", constraint: "users_sole_caregiver_of_child") {
            try await connection.execute("SELECT delete_user_account(\(family.userID))")
        }
        let partner = try await connection.makeUser()
        try await connection.execute("INSERT INTO caregivers (child_id, user_id) VALUES (\(family.childID), \(partner))")
        try await connection.logEvent(family, type: "diaper", data: #"{"contents":"wet"}"#)
        #expect(try await connection.fetchValue(Bool.self, "SELECT delete_user_account(\(family.userID))") == true)
        // The child lives on with the partner as primary; the event stays, unattributed.
        #expect(try await connection.fetchValue(UUID.self, "SELECT primary_caregiver_id FROM children") == partner)
        #expect(try await connection.fetchValue(Int.self, "SELECT count(*) FROM events WHERE logged_by IS NULL") == 1)
    }
}
