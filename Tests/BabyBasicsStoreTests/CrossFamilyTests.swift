import BabyBasicsStore
import Foundation
import Postgres
import Testing

/// Family A's user calls everything on family B's child: always `notFound`, nothing changes.
@Suite struct CrossFamilyTests {
    @Test func anotherFamilysChildDoesNotExist() async throws {
        let fixture = try await StoreFixture.make()
        let (alice, _) = try await fixture.family("Alice")
        let (bob, bobsChild) = try await fixture.family("Bob")
        let bobsPartner = try await fixture.user("BobsPartner")
        try await fixture.join(bobsPartner, to: bobsChild, invitedBy: bob)
        let bobsInvite = try await fixture.store.invites.create(for: bobsChild.id, as: bob.id)
        let store = fixture.store
        let before = try await fixture.fingerprint()

        let calls: [(String, @Sendable () async throws -> Void)] = [
            ("children.get", { _ = try await store.children.get(bobsChild.id, as: alice.id) }),
            ("children.update", { _ = try await store.children.update(bobsChild.id, with: ChildChanges(name: "Mine now"), as: alice.id) }),
            ("children.delete", { try await store.children.delete(bobsChild.id, as: alice.id) }),
            ("children.transferPrimary", { try await store.children.transferPrimary(of: bobsChild.id, to: alice.id, as: alice.id) }),
            ("caregivers.list", { _ = try await store.caregivers.list(of: bobsChild.id, as: alice.id) }),
            ("caregivers.remove", { try await store.caregivers.remove(bobsPartner.id, from: bobsChild.id, as: alice.id) }),
            ("caregivers.leave", { try await store.caregivers.leave(bobsChild.id, as: alice.id) }),
            ("invites.create", { _ = try await store.invites.create(for: bobsChild.id, as: alice.id) }),
            ("invites.pending", { _ = try await store.invites.pending(for: bobsChild.id, as: alice.id) }),
            ("invites.revoke", { try await store.invites.revoke(bobsInvite.code, as: alice.id) }),
            ("users.get", { _ = try await store.users.get(bob.id, as: alice.id) }),
            ("users.get(email:)", { _ = try await store.users.get(email: bob.email ?? "", as: alice.id) }),
        ]
        await expectAllNotFound(calls)
        #expect(try await fixture.store.children.list(as: alice.id).allSatisfy { $0.id != bobsChild.id })
        #expect(try await fixture.fingerprint() == before)
    }
}
