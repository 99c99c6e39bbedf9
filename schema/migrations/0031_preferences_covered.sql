-- The slice statement reads a slice's preferences from an index alone.
--
-- Why: it read them by a range scan of user_preferences' primary key and
-- then the heap, one page per student: preferences are saved in no
-- particular order of user id, so the 3,000 rows of a slice of 5,000 (the
-- issue's shares) were on 2,500 heap pages, 6–7 ms of the statement's
-- ~45 (EXPLAIN (ANALYZE, BUFFERS), benchmarks/RESULTS.md). A covering
-- index holds them in user-id order, about 60 to a leaf page, and an
-- index-only scan reads them there where the heap pages are all-visible
-- (every page vacuum has seen since its last change: most of a table of
-- long-lived settings).
--
-- A btree entry must stay under a third of a page, and 200 rules do not
-- fit: the index covers the rows whose rules are small (compact; 800
-- bytes as text leaves twice that for jsonb's binary form beside the rest
-- of the entry), and the others, rare, are read through their own small
-- partial index and the heap, as before.
ALTER TABLE user_preferences
    ADD COLUMN compact boolean GENERATED ALWAYS AS (octet_length(types::text) + octet_length(courses::text) <= 800) STORED;

CREATE INDEX user_preferences_covered ON user_preferences (user_id)
    INCLUDE (types, courses, quiet_start, quiet_end, time_zone, max_pushes_per_hour) WHERE compact;
CREATE INDEX user_preferences_large ON user_preferences (user_id) WHERE NOT compact;
