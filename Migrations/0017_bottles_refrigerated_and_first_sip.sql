-- 0017_bottles_refrigerated_and_first_sip.sql
--
-- Bottles (PRD 5):
-- * A refrigerated bottle keeps 24 hours from preparation instead of 2: the
--   prepared form of a bottle's data may say so, {"refrigerated": true}
--   (optional boolean; absent or null = room temperature). The app sets it
--   with EventRepository.setRefrigerated and reads expiry from it.
-- * The first sip (feeding_started_at) lies within the bottle's life: not
--   before it was made, not more than 24 hours after (the longest life, a
--   refrigerated bottle's), not after it was finished. (Not in the future either:
--   the app refuses a first sip more than 5 minutes ahead of its clock; a
--   CHECK cannot use the clock.) Its zone is the bottle's own (start_tz): a
--   bottle is drunk where it was made, within a day.
--
-- NOT VALID: rows older than this migration are checked when next updated.
-- To check them all once the data is clean:
--     ALTER TABLE events VALIDATE CONSTRAINT events_bottle_first_sip_within_life;

-- event_feeding_data_is_valid as in 0005, plus the "refrigerated" key of the
-- prepared form (CREATE OR REPLACE also restates 0012's pinned search_path).
CREATE OR REPLACE FUNCTION event_feeding_data_is_valid(d jsonb) RETURNS boolean
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE
SET search_path FROM CURRENT
AS $$
BEGIN
    IF d IS NULL OR jsonb_typeof(d) <> 'object' THEN
        RETURN false;
    END IF;

    IF d -> 'kind' = '"breast"' THEN
        -- {"kind":"breast","started_side":"left"|"right","both_sides":bool}
        RETURN (d - ARRAY['kind', 'started_side', 'both_sides']) = '{}'::jsonb
           AND coalesce(d -> 'started_side' IN ('"left"'::jsonb, '"right"'::jsonb), false)
           AND coalesce(jsonb_typeof(d -> 'both_sides') = 'boolean', false);
    END IF;

    IF d -> 'kind' = '"bottle"' THEN
        IF coalesce(jsonb_typeof(d -> 'amount_ml'), 'null') <> 'null' THEN
            -- Simple form: {"kind":"bottle","amount_ml":120} (amount fed).
            RETURN (d - ARRAY['kind', 'amount_ml']) = '{}'::jsonb
               AND jsonb_is_positive_number(d -> 'amount_ml');
        END IF;
        -- Prepared-bottle form (PRD 4.2 / 5 / 8):
        -- {"kind":"bottle","amount_prepared_ml":150,
        --  "amount_remaining_ml":20 (optional, 0..prepared),
        --  "feeding_started_at":"2026-01-02T08:20:00Z" (optional),
        --  "refrigerated":true (optional)}
        IF (d - ARRAY['kind', 'amount_ml', 'amount_prepared_ml', 'amount_remaining_ml',
                      'feeding_started_at', 'refrigerated']) <> '{}'::jsonb THEN
            RETURN false;
        END IF;
        IF NOT jsonb_is_positive_number(d -> 'amount_prepared_ml') THEN
            RETURN false;
        END IF;
        IF coalesce(jsonb_typeof(d -> 'amount_remaining_ml'), 'null') <> 'null' THEN
            IF NOT jsonb_is_nonnegative_number(d -> 'amount_remaining_ml') THEN
                RETURN false;
            END IF;
            IF (d ->> 'amount_remaining_ml')::numeric > (d ->> 'amount_prepared_ml')::numeric THEN
                RETURN false;
            END IF;
        END IF;
        IF coalesce(jsonb_typeof(d -> 'feeding_started_at'), 'null') <> 'null'
           AND NOT jsonb_is_iso_timestamp(d -> 'feeding_started_at') THEN
            RETURN false;
        END IF;
        IF coalesce(jsonb_typeof(d -> 'refrigerated'), 'null') NOT IN ('null', 'boolean') THEN
            RETURN false;
        END IF;
        RETURN true;
    END IF;

    RETURN false;   -- kind missing or not breast/bottle
END
$$;

COMMENT ON FUNCTION event_feeding_data_is_valid(jsonb) IS
'events_feeding_data_valid: kind "breast" with started_side ("left"|"right") and both_sides (boolean), both required; or kind "bottle" with either amount_ml > 0 alone, or amount_prepared_ml > 0 plus optional amount_remaining_ml (0..amount_prepared_ml), optional feeding_started_at (ISO 8601 with offset) and optional refrigerated (boolean: keeps 24 h from preparation). Amounts in mL. Any other key is refused. JSON null = absent for optional keys.';

ALTER TABLE events
    -- Only a well-formed first sip is placed in time; its form is
    -- events_feeding_data_valid's to refuse (CASE: no cast of anything else).
    ADD CONSTRAINT events_bottle_first_sip_within_life CHECK (
        CASE WHEN data ->> 'feeding_started_at' IS NULL THEN true
             WHEN jsonb_is_iso_timestamp(data -> 'feeding_started_at')
             THEN (data ->> 'feeding_started_at')::timestamptz >= start_time
                  AND (data ->> 'feeding_started_at')::timestamptz <= start_time + interval '24 hours'
                  AND (end_time IS NULL OR (data ->> 'feeding_started_at')::timestamptz <= end_time)
             ELSE true
        END
    ) NOT VALID;

COMMENT ON CONSTRAINT events_bottle_first_sip_within_life ON events IS
'A bottle''s first sip (data.feeding_started_at) is not before it was made (start_time), not more than 24 hours after, nor after it was finished (end_time) (23514). NOT VALID: rows older than 0017 are checked when next updated.';
