import BabyBasicsStore
import Foundation
import Postgres
import Testing

@Suite struct UserRepositoryTests {
    @Test func createGetRenameAndCredentials() async throws {
        let fixture = try await StoreFixture.make()
        let sam = try await fixture.store.users.create(email: "Sam@Example.com", displayName: "  Sam  ", passwordHash: "argon2$hash")
        #expect(sam.displayName == "Sam")
        #expect(try await fixture.store.users.get(sam.id, as: sam.id) == sam)
        #expect(try await fixture.store.users.get(email: "sam@example.COM", as: sam.id).id == sam.id)
        let renamed = try await fixture.store.users.rename(to: "Samantha", as: sam.id)
        #expect(renamed.displayName == "Samantha")
        let credentials = try #require(try await fixture.store.users.credentials(email: "SAM@example.com"))
        #expect(credentials.id == sam.id && credentials.passwordHash == "argon2$hash")
        #expect(try await fixture.store.users.credentials(email: "nobody@example.com") == nil)
    }

    @Test func emailIsTakenIgnoringCaseAndInputIsValidatedFirst() async throws {
        let fixture = try await StoreFixture.make()
        _ = try await fixture.store.users.create(email: "dana@example.com", displayName: "Dana")
        let before = try await fixture.fingerprint()
        await expectStoreError(.emailTaken) { _ = try await fixture.store.users.create(email: "DANA@example.com", displayName: "Other") }
        await expectStoreError(.invalid(field: "displayName", reason: "must not be blank")) {
            _ = try await fixture.store.users.create(email: "x@example.com", displayName: "   ")
        }
        await expectStoreError(.invalid(field: "email", reason: "is not an email address")) {
            _ = try await fixture.store.users.create(email: "not an email", displayName: "X")
        }
        #expect(try await fixture.fingerprint() == before)
    }

    @Test func usersSeeThemselvesAndCoCaregiversOnly() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family("Parent")
        let partner = try await fixture.user("Partner")
        let stranger = try await fixture.user("Stranger")
        try await fixture.join(partner, to: child, invitedBy: parent)
        #expect(try await fixture.store.users.get(partner.id, as: parent.id).displayName == "Partner")
        await expectStoreError(.notFound) { _ = try await fixture.store.users.get(stranger.id, as: parent.id) }
        await expectStoreError(.notFound) { _ = try await fixture.store.users.get(email: try #require(stranger.email), as: parent.id) }
    }

    /// A co-caregiver is a display name, not sign-in identifiers; your own record has yours.
    @Test func aCoCaregiversEmailAndAppleSubjectStayTheirs() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family("Parent")
        let partner = try await fixture.store.users.create(email: "partner@example.com", displayName: "Partner", appleUserID: "001234.apple.subject")
        try await fixture.join(partner, to: child, invitedBy: parent)
        let seen = try await fixture.store.users.get(partner.id, as: parent.id)
        #expect(seen.displayName == "Partner" && seen.email == nil && seen.appleUserID == nil)
        let byEmail = try await fixture.store.users.get(email: "partner@example.com", as: parent.id)
        #expect(byEmail.id == partner.id && byEmail.email == nil && byEmail.appleUserID == nil)
        let own = try await fixture.store.users.get(partner.id, as: partner.id)
        #expect(own.email == "partner@example.com" && own.appleUserID == "001234.apple.subject")
    }

    @Test func aSoleCaregiverCannotDeleteTheirAccountUntilTheRoleIsTransferred() async throws {
        let fixture = try await StoreFixture.make()
        let (parent, child) = try await fixture.family("Parent")
        await expectStoreError(.soleCaregiver(childIDs: [child.id])) { try await fixture.store.users.deleteAccount(as: parent.id) }
        let partner = try await fixture.user("Partner")
        try await fixture.join(partner, to: child, invitedBy: parent)
        try await fixture.store.children.transferPrimary(of: child.id, to: partner.id, as: parent.id)
        try await fixture.store.users.deleteAccount(as: parent.id)
        await expectStoreError(.notFound) { _ = try await fixture.store.users.get(parent.id, as: partner.id) }
        let kept = try await fixture.store.children.get(child.id, as: partner.id)
        #expect(kept.role == .primary && kept.primaryCaregiverID == partner.id)
    }
}
