-- 0026: validate the three CHECKs 0025 added NOT VALID.
--
-- A file of its own, so that its transaction holds only what VALIDATE CONSTRAINT
-- takes: SHARE UPDATE EXCLUSIVE on events, which lets the app's reads and writes go
-- on while every row is checked (bbmigrate plan reports it as safe). In 0025 the
-- same statements would have scanned under that file's ACCESS EXCLUSIVE lock.

ALTER TABLE events VALIDATE CONSTRAINT events_start_from_1900;
ALTER TABLE events VALIDATE CONSTRAINT events_notes_length;
ALTER TABLE events VALIDATE CONSTRAINT events_note_category_length;
