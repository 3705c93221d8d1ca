import BabyBasicsStore
import Foundation
import Postgres
import Testing

@Suite struct CaregiverAndInviteTests {
    @Test func removeAndLeaveRules() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family("Parent")
        let partner = try await fixture.user("Partner")
        let nanny = try await fixture.user("Nanny")
        try await fixture.join(partner, to: child, invitedBy: parent)
        try await fixture.join(nanny, to: child, invitedBy: parent)
        let listed = try await fixture.store.caregivers.list(of: child.id, as: nanny.id)
        #expect(listed.map(\.displayName) == ["Parent", "Partner", "Nanny"])
        #expect(listed.first?.role == .primary)
        await expectStoreError(.forbidden(required: .primary)) { try await fixture.store.caregivers.remove(nanny.id, from: child.id, as: partner.id) }
        await expectStoreError(.primaryCaregiverCannotLeave) { try await fixture.store.caregivers.remove(parent.id, from: child.id, as: parent.id) }
        await expectStoreError(.primaryCaregiverCannotLeave) { try await fixture.store.caregivers.leave(child.id, as: parent.id) }
        try await fixture.store.caregivers.remove(nanny.id, from: child.id, as: parent.id)
        await expectStoreError(.notFound) { try await fixture.store.caregivers.remove(nanny.id, from: child.id, as: parent.id) }
        try await fixture.store.caregivers.leave(child.id, as: partner.id)
        await expectStoreError(.notFound) { _ = try await fixture.store.children.get(child.id, as: partner.id) }
        #expect(try await fixture.store.caregivers.list(of: child.id, as: parent.id).count == 1)
    }

    @Test func invitesArePrimaryOnlyCryptographicAndEightCharactersWithoutLookalikes() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family()
        let partner = try await fixture.user("Partner")
        let invite = try await fixture.store.invites.create(for: child.id, as: parent.id)
        #expect(invite.code.count == 8)
        #expect(invite.code.allSatisfy { InviteRepository.alphabet.contains($0) })
        #expect(!invite.code.contains { "01OIL".contains($0) })
        #expect(abs(invite.expiresAt.timeIntervalSince(invite.createdAt) - 48 * 3600) < 1)
        let codes = Set((0..<2000).map { _ in InviteRepository.makeCode() })
        #expect(codes.count == 2000)
        try await fixture.store.invites.redeem(invite.code.lowercased(), as: partner.id)
        await expectStoreError(.forbidden(required: .primary)) { _ = try await fixture.store.invites.create(for: child.id, as: partner.id) }
        await expectStoreError(.forbidden(required: .primary)) { _ = try await fixture.store.invites.pending(for: child.id, as: partner.id) }
        let short = try await fixture.store.invites.create(for: child.id, validFor: .seconds(3600), as: parent.id)
        #expect(try await fixture.store.invites.pending(for: child.id, as: parent.id).map(\.code) == [short.code])
        try await fixture.store.invites.revoke(short.code, as: parent.id)
        #expect(try await fixture.store.invites.pending(for: child.id, as: parent.id).isEmpty)
        await expectStoreError(.inviteUsed) { try await fixture.store.invites.revoke(invite.code, as: parent.id) }
    }

    /// One rule each: an invite made in the app and one inserted by hand both last 48 hours;
    /// `revoke` reads a code as `redeem` does (any case, spaces around).
    @Test func invitesHaveOneLifetimeAndOneWayToReadACode() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family()
        let made = try await fixture.store.invites.create(for: child.id, as: parent.id)
        try await fixture.admin.execute("INSERT INTO invites (code, child_id, created_by) VALUES ('HANDMADE', \(child.id), \(parent.id))")
        let lifetimes = try await fixture.admin.query("SELECT code, extract(epoch FROM expires_at - created_at)::float8 FROM invites ORDER BY code")
            .map { try $0.decode((String, Double).self) }
        #expect(lifetimes.count == 2 && lifetimes.allSatisfy { $0.1 == 48 * 3600 }, "\(lifetimes)")

        try await fixture.store.invites.revoke("  \(made.code.lowercased())\n", as: parent.id)
        try await fixture.store.invites.revoke("handmade", as: parent.id)
        #expect(try await fixture.store.invites.pending(for: child.id, as: parent.id).isEmpty)
        await expectStoreError(.notFound) { try await fixture.store.invites.revoke("not a code at all", as: parent.id) }
        await expectStoreError(.notFound) { try await fixture.store.invites.revoke(made.code, as: parent.id) }
        await expectStoreError(.invalid(field: "validFor", reason: "must be between 1 minute and 30 days")) {
            _ = try await fixture.store.invites.create(for: child.id, validFor: .seconds(59), as: parent.id)
        }
    }

    @Test func redeemingUnknownExpiredUsedAndRepeatedCodes() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family()
        let first = try await fixture.user("First")
        let second = try await fixture.user("Second")
        await expectStoreError(.inviteNotFound) { try await fixture.store.invites.redeem("ZZZZZZZZ", as: first.id) }
        await expectStoreError(.inviteNotFound) { try await fixture.store.invites.redeem("'; DROP", as: first.id) }

        let expired = try await fixture.store.invites.create(for: child.id, as: parent.id)
        try await fixture.admin.execute("UPDATE invites SET created_at = now() - interval '3 days', expires_at = now() - interval '1 day' WHERE code = \(expired.code)")
        await expectStoreError(.inviteExpired) { try await fixture.store.invites.redeem(expired.code, as: first.id) }

        let invite = try await fixture.store.invites.create(for: child.id, as: parent.id)
        #expect(try await fixture.store.invites.redeem(invite.code, as: first.id) == child.id)
        // The same redeemer retrying is fine; anyone else finds it used.
        #expect(try await fixture.store.invites.redeem(invite.code, as: first.id) == child.id)
        await expectStoreError(.inviteUsed) { try await fixture.store.invites.redeem(invite.code, as: second.id) }

        // An existing member redeeming another code succeeds and leaves it unused.
        let spare = try await fixture.store.invites.create(for: child.id, as: parent.id)
        #expect(try await fixture.store.invites.redeem(spare.code, as: first.id) == child.id)
        #expect(try await fixture.store.invites.pending(for: child.id, as: parent.id).map(\.code) == [spare.code])
    }

    @Test func twoPeopleRedeemingOneCodeAtOnceExactlyOneGetsIn() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family()
        for _ in 0..<5 {
            let invite = try await fixture.store.invites.create(for: child.id, as: parent.id)
            let a = try await fixture.user("A")
            let b = try await fixture.user("B")
            let store = fixture.store
            async let first = Result { try await store.invites.redeem(invite.code, as: a.id) }
            async let second = Result { try await store.invites.redeem(invite.code, as: b.id) }
            let outcomes = [await first, await second]
            #expect(outcomes.filter { if case .success = $0 { true } else { false } }.count == 1)
            #expect(outcomes.contains { if case .failure(let error as StoreError) = $0 { error == .inviteUsed } else { false } })
        }
        #expect(try await fixture.admin.fetchValue(Int.self, "SELECT count(*) FROM caregivers WHERE child_id = \(child.id)") == 6)
    }
}

extension Result where Failure == any Error {
    init(catching body: () async throws -> Success) async {
        do { self = .success(try await body()) } catch { self = .failure(error) }
    }
}
