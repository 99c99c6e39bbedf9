-- The roster as the platform keeps it: users, courses and enrollments that
-- `notify run roster` (Debezium change events), the identify API and the
-- bulk import keep in step with the course platform's own database.
--
-- source_pos: the position of the change last applied to the row (a
-- Debezium record's source.lsn, or its Kafka offset when the record has no
-- LSN; NULL for rows written through the API or by `notify seed`). A change
-- is applied only when its position is not older than the row's, so a
-- replay from the earliest offset, a re-snapshot or a redelivery after a
-- crash converges to the platform's state instead of rewinding it.
ALTER TABLE users
    ADD COLUMN locale     text,
    ADD COLUMN time_zone  text,
    ADD COLUMN source_pos bigint;

-- deleted_at: a course deleted on the platform. Its row stays while
-- materials (published history) reference it; nothing can be published to
-- it any more and its open enrollments end at the deletion.
ALTER TABLE courses
    ADD COLUMN source_pos bigint,
    ADD COLUMN deleted_at timestamptz;

-- Foreign keys the platform's change streams cannot honour: users, courses
-- and enrollments arrive on three topics with no order between them, so an
-- instructor's course can be applied before the instructor's user row, and
-- a course's instructor can change on the platform while the course has
-- materials. materials keeps one key, to its course (one row lock per
-- publish, as the composite key of 0003 had); that the author is the
-- course's instructor is checked by the API at publish time.
ALTER TABLE materials
    DROP CONSTRAINT materials_course_author_fkey,
    ADD CONSTRAINT materials_course_id_fkey FOREIGN KEY (course_id) REFERENCES courses (id);
ALTER TABLE courses
    DROP CONSTRAINT courses_instructor_id_fkey,
    DROP CONSTRAINT courses_id_instructor_key;

-- Enrollment periods. A student is in an event's audience if and only if
-- one of their periods in the course covers the event's publish time:
--   enrolled_at <= published AND (dropped_at IS NULL OR dropped_at > published)
-- A drop ends the open period (dropped_at = the change's source time) and a
-- re-enrolment starts a new row, so a slice that runs after a drop, or
-- after a drop and a re-enrolment, still finds exactly the students of the
-- publish time. Periods of one student never overlap, so at most one row
-- per student matches a publish time: the slice needs no DISTINCT.
--
-- The primary key gains enrolled_at (one row per period) and INCLUDEs
-- dropped_at, so the slice's range scan stays index-only; the partial
-- unique index keeps at most one open period per student and course, and
-- is the conflict target of the roster's upsert.
ALTER TABLE enrollments
    ADD COLUMN dropped_at timestamptz,
    ADD COLUMN source_pos bigint,
    DROP CONSTRAINT enrollments_pkey,
    ADD PRIMARY KEY (course_id, user_id, enrolled_at) INCLUDE (dropped_at),
    ADD CONSTRAINT enrollments_period CHECK (dropped_at IS NULL OR dropped_at >= enrolled_at);
CREATE UNIQUE INDEX enrollments_open ON enrollments (course_id, user_id) WHERE dropped_at IS NULL;

-- roster_positions: per roster topic partition, the last record applied and
-- when, for `notify roster status` (lag is read from Kafka; this says how
-- far the database is). Written in the apply transaction.
CREATE TABLE roster_positions (
    topic        text NOT NULL,
    partition    integer NOT NULL,
    kafka_offset bigint NOT NULL,
    source_pos   bigint,
    source_time  timestamptz,
    applied_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (topic, partition)
);

-- roster_counters: erasures and dead letters since the roster began, one
-- row per kind (no personal data: counts only).
CREATE TABLE roster_counters (
    kind  text PRIMARY KEY,
    n     bigint NOT NULL DEFAULT 0
);
