import BabyBasicsStore
import Foundation

/// `GET /sync?cursor=…`: one page of the family state that changed after the cursor; send
/// `next_cursor` back for the next page (at once while `has_more`).
struct SyncPageJSON: Encodable {
    let page: ChangePage

    func encode(to encoder: any Encoder) throws {
        var container = encoder.container(keyedBy: JSONKey.self)
        try container.put(page.notices.map(NoticeJSON.init), "notices")
        try container.put(page.removals.map(RemovalJSON.init), "removals")
        try container.put(page.children.map(ChildJSON.init), "children")
        try container.put(page.caregivers.map(CaregiverJSON.init), "caregivers")
        try container.put(page.events.map(EventJSON.init), "events")
        try container.put(page.next.description, "next_cursor")
        try container.put(page.hasMore, "has_more")
    }

    struct NoticeJSON: Encodable {
        let notice: SyncNotice
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: JSONKey.self)
            switch notice {
            case .accessRevoked(let child):
                try container.put("access_revoked", "kind")
                try container.put(child, "child_id")
            case .resyncRequired(let child):
                try container.put("resync_required", "kind")
                try container.put(child, "child_id")
            }
        }
    }

    struct RemovalJSON: Encodable {
        let removal: SyncRemoval
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: JSONKey.self)
            try container.put(removal.childID, "child_id")
            try container.put(removal.kind.rawValue, "kind")
            try container.put(removal.id, "id")
        }
    }

    /// A child in the API's own names (snake_case, as every other body).
    struct ChildJSON: Encodable {
        let child: Child
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: JSONKey.self)
            try container.put(child.id, "id")
            try container.put(child.name, "name")
            try container.put(child.birthDate.description, "birth_date")
            try container.put(child.primaryCaregiverID, "primary_caregiver_id")
            try container.put(child.role.rawValue, "role")
            try container.put(SettingsJSON(settings: child.settings), "settings")
            try container.put(child.createdAt, "created_at")
            try container.put(child.updatedAt, "updated_at")
        }
    }

    struct SettingsJSON: Encodable {
        let settings: ChildSettings
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: JSONKey.self)
            try container.put(settings.unit.rawValue, "unit")
            try container.put(settings.defaultBottleMl, "default_bottle_ml")
            try container.put(settings.timezone, "time_zone")
            try container.put(settings.dayStartTime.description, "day_start_time")
            try container.put([
                "prepared_minutes": settings.bottleExpiry.preparedMinutes, "feeding_minutes": settings.bottleExpiry.feedingMinutes,
                "refrigerated_minutes": settings.bottleExpiry.refrigeratedMinutes,
            ], "bottle_expiry")
            try container.put(["bottle_expiry": settings.notifications.bottleExpiry, "wake_window": settings.notifications.wakeWindow], "notifications")
        }
    }

    struct CaregiverJSON: Encodable {
        let membership: ChildCaregiver
        func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: JSONKey.self)
            try container.put(membership.childID, "child_id")
            try container.put(membership.caregiver.userID, "user_id")
            try container.put(membership.caregiver.displayName, "display_name")
            try container.put(membership.caregiver.role.rawValue, "role")
            try container.put(membership.caregiver.joinedAt, "joined_at")
        }
    }
}
