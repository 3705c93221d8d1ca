import BabyBasicsStore
import Foundation
import Postgres
import Testing

@Suite struct ChildRepositoryTests {
    @Test func createListGetAndUpdate() async throws {
        let fixture = try await StoreFixture.make()
        let parent = try await fixture.user("Parent")
        var settings = ChildSettings()
        settings.unit = .ml
        settings.timezone = "Australia/Adelaide"
        settings.dayStartTime = PostgresTime(hour: 6, minute: 0)
        let child = try await fixture.store.children.create(ChildDraft(name: "Zoë", birthDate: PostgresDate(year: 2026, month: 3, day: 8), settings: settings), as: parent.id)
        #expect(child.role == .primary && child.primaryCaregiverID == parent.id)
        #expect(child.settings == settings)
        #expect(child.settings.bottleExpiry.preparedMinutes == 120 && child.settings.bottleExpiry.feedingMinutes == 60 && child.settings.bottleExpiry.refrigeratedMinutes == 1440)
        #expect(try await fixture.store.children.list(as: parent.id).map(\.id) == [child.id])
        #expect(try await fixture.store.children.get(child.id, as: parent.id) == child)

        // Any caregiver may update.
        let partner = try await fixture.user("Partner")
        try await fixture.join(partner, to: child, invitedBy: parent)
        var changed = settings
        changed.defaultBottleMl = 150
        changed.timezone = "Europe/London"
        let updated = try await fixture.store.children.update(child.id, with: ChildChanges(name: "Zoé", settings: changed), as: partner.id)
        #expect(updated.name == "Zoé" && updated.settings.defaultBottleMl == 150 && updated.settings.timezone == "Europe/London")
        #expect(updated.role == .caregiver)
        #expect(try await fixture.store.children.get(child.id, as: parent.id).settings == changed)
    }

    @Test func badInputIsRefusedWithTheFieldAndWritesNothing() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family()
        let before = try await fixture.fingerprint()
        let store = fixture.store
        let birth = PostgresDate(year: 2026, month: 3, day: 8)
        await expectStoreError(.invalid(field: "name", reason: "must not be blank")) {
            _ = try await store.children.create(ChildDraft(name: " ", birthDate: birth), as: parent.id)
        }
        await expectStoreError(.invalid(field: "birthDate", reason: "must not be in the future")) {
            _ = try await store.children.create(ChildDraft(name: "Z", birthDate: PostgresDate(Date().addingTimeInterval(3 * 86_400), in: .gmt)), as: parent.id)
        }
        await expectStoreError(.invalid(field: "birthDate", reason: "must be in 1900 or later")) {
            _ = try await store.children.create(ChildDraft(name: "Z", birthDate: PostgresDate(year: 1899, month: 12, day: 31)), as: parent.id)
        }
        var settings = ChildSettings()
        settings.timezone = "Mars/Olympus"
        await expectStoreError(.invalid(field: "timezone", reason: "\"Mars/Olympus\" is not an IANA time zone such as Europe/London")) {
            _ = try await store.children.create(ChildDraft(name: "Z", birthDate: birth, settings: settings), as: parent.id)
        }
        for size in [0, 501] {
            var bottle = ChildSettings()
            bottle.defaultBottleMl = size
            await expectStoreError(.invalid(field: "defaultBottleMl", reason: "must be between 1 and 500 mL")) {
                _ = try await store.children.update(child.id, with: ChildChanges(settings: bottle), as: parent.id)
            }
        }
        #expect(try await fixture.fingerprint() == before)
    }

    @Test func deleteIsPrimaryOnlyAndRemovesEverything() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family()
        let partner = try await fixture.user("Partner")
        try await fixture.join(partner, to: child, invitedBy: parent)
        _ = try await fixture.store.invites.create(for: child.id, as: parent.id)
        try await fixture.admin.execute("""
            INSERT INTO events (child_id, logged_by, event_type, start_time, start_tz, start_offset_seconds, data)
            VALUES (\(child.id), \(partner.id), 'diaper', now(), 'UTC', 0, '{"contents":"wet"}')
            """)
        await expectStoreError(.forbidden(required: .primary)) { try await fixture.store.children.delete(child.id, as: partner.id) }
        try await fixture.store.children.delete(child.id, as: parent.id)
        let counts = try #require(try await fixture.admin.query("""
            SELECT (SELECT count(*) FROM children), (SELECT count(*) FROM caregivers), (SELECT count(*) FROM invites), (SELECT count(*) FROM events)
            """).first).decode((Int, Int, Int, Int).self)
        #expect(counts == (0, 0, 0, 0))
        await expectStoreError(.notFound) { try await fixture.store.children.delete(child.id, as: parent.id) }
    }

    @Test func primaryTransferMovesWhoMayRemoveCaregivers() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family("Parent")
        let partner = try await fixture.user("Partner")
        let nanny = try await fixture.user("Nanny")
        let stranger = try await fixture.user("Stranger")
        try await fixture.join(partner, to: child, invitedBy: parent)
        try await fixture.join(nanny, to: child, invitedBy: parent)
        await expectStoreError(.forbidden(required: .primary)) { try await fixture.store.children.transferPrimary(of: child.id, to: nanny.id, as: partner.id) }
        await expectStoreError(.invalid(field: "newPrimaryID", reason: "is not a caregiver of this child")) {
            try await fixture.store.children.transferPrimary(of: child.id, to: stranger.id, as: parent.id)
        }
        try await fixture.store.children.transferPrimary(of: child.id, to: partner.id, as: parent.id)
        // The old primary can no longer remove caregivers; the new one can.
        await expectStoreError(.forbidden(required: .primary)) { try await fixture.store.caregivers.remove(nanny.id, from: child.id, as: parent.id) }
        try await fixture.store.caregivers.remove(nanny.id, from: child.id, as: partner.id)
        let roles = try await fixture.store.caregivers.list(of: child.id, as: parent.id).map { "\($0.displayName):\($0.role.rawValue)" }
        #expect(roles == ["Partner:primary", "Parent:caregiver"])
    }

    @Test func aChildWhoseCaregiverRowFailsLeavesNoOrphan() async throws {
        let fixture = try await StoreFixture.make()
        let parent = try await fixture.user("Parent")
        // (On a Citus coordinator the trigger runs on the shards; the setting lets it be
        // created there. On one server it is an unused custom setting.)
        // One statement per call: Citus passes a function's creation on to the workers as the
        // text it came in, and a worker refuses several commands in one prepared statement.
        try await fixture.admin.executeUnsafeRawSQL("SET citus.enable_unsafe_triggers = on")
        try await fixture.admin.executeUnsafeRawSQL("""
            CREATE FUNCTION test_refuse_caregiver() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'caregiver insert refused by the test' USING ERRCODE = 'P0001'; END $$
            """)
        try await fixture.admin.executeUnsafeRawSQL("""
            CREATE TRIGGER test_refuse_caregiver BEFORE INSERT ON caregivers FOR EACH ROW EXECUTE FUNCTION test_refuse_caregiver()
            """)
        await #expect(throws: PostgresError.self) {
            _ = try await fixture.store.children.create(ChildDraft(name: "Orphan?", birthDate: PostgresDate(year: 2026, month: 1, day: 1)), as: parent.id)
        }
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*) FROM children") == 0)
    }
}
