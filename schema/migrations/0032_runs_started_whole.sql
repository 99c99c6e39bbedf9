-- A small event's run written whole. A planning group's one-range user
-- lists none of whose students has preferences are sliced before their
-- runs exist, and their runs and ranges are inserted already finished and
-- done (services/fanout, sqlStartWholeRuns), where they were inserted,
-- locked, updated with the range's progress and updated again with the
-- run's end in the same transaction: two non-HOT updates of each row
-- (every index of fanout_runs, a dead tuple each) and four statements of
-- fixed cost per group. The insert's lifecycle records are therefore
-- FanoutStarted and, for a run inserted finished, FanoutFinished after it:
-- the same two records, with the same payloads, that the insert and the
-- run's end wrote before.
--
-- The payloads of FanoutStarted and FanoutFinished are written once, in
-- the two functions below, for both branches of the trigger (an INSERT's
-- and an UPDATE's).

CREATE FUNCTION lifecycle_started_payload(ev uuid, typ text, course uuid, material uuid, published timestamptz,
                                          n_ranges integer, send timestamptz, expires timestamptz) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT jsonb_build_object('event_id', ev, 'type', typ, 'course_id', course, 'at', lifecycle_time(now()),
                              'material_id', material, 'published_at', lifecycle_time(published),
                              'ranges', n_ranges, 'send_at', lifecycle_time(send), 'expires_at', lifecycle_time(expires))
$$;

CREATE FUNCTION lifecycle_finished_payload(ev uuid, typ text, course uuid, n_notified bigint,
                                           finished timestamptz, started timestamptz) RETURNS jsonb
    LANGUAGE sql STABLE
    AS $$
    SELECT jsonb_build_object('event_id', ev, 'type', typ, 'course_id', course,
                              'notified', coalesce(n_notified, 0), 'at', lifecycle_time(finished),
                              'started_at', lifecycle_time(started))
$$;

CREATE OR REPLACE FUNCTION fanout_runs_lifecycle() RETURNS trigger
    LANGUAGE plpgsql
    AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        -- A run planned for later ('scheduled') starts when its state
        -- becomes 'running'; a run inserted finished has both records.
        INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
        SELECT gen_random_uuid(), 'lifecycle', r.event_id::text, r.kind, jsonb_strip_nulls(r.payload)
        FROM (
            SELECT n.event_id, 1 AS k, 'FanoutStarted' AS kind,
                   lifecycle_started_payload(n.event_id, n.type, n.course_id, n.material_id, n.published_at,
                                             n.ranges, n.send_at, n.expires_at) AS payload
            FROM new_runs n
            WHERE n.state = 'running'
            UNION ALL
            SELECT n.event_id, 2, 'FanoutFinished',
                   lifecycle_finished_payload(n.event_id, n.type, n.course_id, n.notified, n.finished_at, n.started_at)
            FROM new_runs n
            WHERE n.state = 'running' AND n.finished_at IS NOT NULL
        ) r
        ORDER BY r.event_id, r.k;
        RETURN NULL;
    END IF;
    INSERT INTO outbox (id, aggregatetype, aggregateid, type, payload)
    SELECT gen_random_uuid(), 'lifecycle', r.event_id::text, r.kind, jsonb_strip_nulls(r.payload)
    FROM (
        SELECT n.event_id, 1 AS k, 'FanoutFinished' AS kind,
               lifecycle_finished_payload(n.event_id, n.type, n.course_id, n.notified, n.finished_at, n.started_at) AS payload
        FROM new_runs n JOIN old_runs o ON o.event_id = n.event_id
        WHERE o.finished_at IS NULL AND n.finished_at IS NOT NULL
        UNION ALL
        SELECT n.event_id, 2,
               CASE WHEN n.state = 'running' AND o.state = 'scheduled' THEN 'FanoutStarted'
                    WHEN n.state = 'running' THEN 'EventResumed'
                    WHEN n.state = 'paused' THEN 'EventPaused'
                    WHEN n.state = 'cancelled' THEN 'EventCancelled'
                    ELSE 'PushFinished' END,
               CASE
                   WHEN n.state = 'running' AND o.state = 'scheduled' THEN
                       lifecycle_started_payload(n.event_id, n.type, n.course_id, n.material_id, n.published_at,
                                                 n.ranges, n.send_at, n.expires_at)
                   ELSE b.base || CASE
                       WHEN n.state IN ('running', 'paused', 'cancelled') THEN
                           jsonb_build_object('previous_state', o.state)
                       ELSE (
                           -- The final counts, read in the transaction that
                           -- finishes the event (at most 32 counter rows).
                           SELECT jsonb_build_object(
                               'notified', coalesce(sum(c.notified), 0), 'delivered', coalesce(sum(c.delivered), 0),
                               'gone', coalesce(sum(c.gone), 0), 'failed', coalesce(sum(c.failed), 0),
                               'cancelled', coalesce(sum(c.cancelled), 0), 'expired', coalesce(sum(c.expired), 0),
                               'muted', coalesce(sum(c.muted), 0), 'capped', coalesce(sum(c.capped), 0),
                               'deferred', coalesce(sum(c.deferred), 0), 'silenced', coalesce(sum(c.silenced), 0))
                           FROM event_counters c WHERE c.event_id = n.event_id)
                   END
               END
        FROM new_runs n JOIN old_runs o ON o.event_id = n.event_id
        CROSS JOIN LATERAL (SELECT jsonb_build_object('event_id', n.event_id, 'type', n.type, 'course_id', n.course_id,
                                                      'at', lifecycle_time(now())) AS base) b
        WHERE n.state IS DISTINCT FROM o.state AND n.state IN ('running', 'paused', 'cancelled', 'finished')
    ) r
    ORDER BY r.event_id, r.k;
    RETURN NULL;
END $$;
