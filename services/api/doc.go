// Package api is notify's HTTP API: instructors publish course material,
// students manage their Web Push subscriptions and read their inbox, and
// instructors follow an event's fan-out.
//
// # Publishing
//
// POST /v1/courses/{course_id}/materials writes, in ONE transaction, the
// material row and one outbox row (id = the event id, aggregatetype
// "material", aggregateid = the course id, type "MaterialPublished", payload
// = streams.MaterialPublished). The API has no Kafka client: the CDC
// connector streams the outbox, so publishing costs two inserts whatever the
// size of the course, and it succeeds while Kafka is down. The whole write
// is a single SQL statement (one round trip, one implicit transaction).
// published_at is the API server's clock when the request was accepted,
// truncated to microseconds; the response, the material row and the event
// payload carry the same instant.
//
// An Idempotency-Key header (1–255 printable ASCII characters) is stored in
// api_idempotency in the same transaction, keyed by (user, key). A retry
// with the same key and the same request gets the first response (status
// and body; header Idempotent-Replayed: true) and creates no event; the same
// key with a different request (another course, title, body or url) is 422
// idempotency_key_reused. Two concurrent requests with one key serialise on
// the primary key (INSERT … ON CONFLICT DO NOTHING waits for the first
// transaction), so exactly one event is created. Requests that fail (4xx,
// 5xx) store nothing and may be retried with the same key. Keys apply to
// publishing only. Records expire: the server deletes those older than
// Config.IdempotencyTTL (24 hours by default) every
// Config.IdempotencySweepInterval, and a retry whose record is gone is a new
// request that publishes a new event.
//
// # Scheduling
//
// The publish body may carry send_at and expires_at (RFC 3339 with a zone
// offset; kept in UTC to the microsecond). They are checked against
// published_at: send_at in the future and at most MaxSendAtAhead (30 days)
// ahead; expires_at in the future, after send_at, and at most MaxLifetime
// (28 days, FCM's longest ttl) after the start (send_at, or now). A bad
// value is 400 invalid_send_at / invalid_expires_at and nothing is
// written — except that a retry whose Idempotency-Key is stored replays
// its first answer, even once its send_at has passed. Both travel in the
// MaterialPublished payload (omitted when absent) to the planner, which
// holds the fan-out until send_at (services/fanout, Scheduler); the push
// workers record devices not sent by expires_at as expired.
//
// # Choices made for bad input
//
//   - Every error body is {"error":{"code":"…","message":"…"}}; codes are
//     the err* constants in errors.go. That holds for the answers net/http
//     gives before any handler runs too (431 header_too_large for headers
//     over 16 KiB, 400 malformed_request for a bad request line or Host,
//     501/505 unsupported_request): see jsonErrorListener. A path with
//     "..", "." or "//" segments is 404 not_found, never the mux's
//     redirect. A body that does not arrive within Config.ReadTimeout is 408
//     request_timeout; one that cannot be read otherwise is 400
//     malformed_request. Messages never carry socket errors' text.
//   - An event or device id in a path that is not a uuid is 404 (it cannot
//     name anything), like an unknown id. User and course ids — the course
//     in a path, a token's subject — go through Config.IDs (package ids):
//     a uuid is itself, the platform's own id its UUIDv5 in
//     NOTIFY_ID_NAMESPACE; one that cannot be mapped (no namespace set,
//     too long) is 400 invalid_id naming the problem, 401 in a token.
//   - Request bodies must be Content-Type application/json, else 415; a
//     charset other than utf-8 (utf-16, iso-8859-1, …) is 400
//     unsupported_charset rather than read as UTF-8; bodies over 64 KiB are 413; malformed JSON,
//     trailing data, a non-object or nesting deeper than 16 levels is 400
//     malformed_json.
//   - JSON is read strictly, where encoding/json is lenient: bytes that
//     are not UTF-8, and \u escapes of lone surrogates, are 400
//     invalid_encoding (encoding/json would store U+FFFD); a name repeated
//     in one object is 400 duplicate_field (encoding/json keeps the last);
//     names are case-sensitive, so "Title" is 400 unknown_field even where
//     unknown fields are otherwise ignored (encoding/json would fill
//     title). No string in a body may contain NUL (400 invalid_encoding):
//     Postgres text cannot store it, so it would fail the write.
//   - Query strings follow the same rules: malformed percent-encoding is
//     400 malformed_request (url.Values would drop the pair silently), a
//     name or value that is not UTF-8 or contains NUL 400 invalid_encoding.
//   - Publish rejects unknown fields (400 unknown_field), so a typo such as
//     "titel" fails loudly instead of publishing an untitled material. The
//     push-subscription body is the browser's PushSubscription.toJSON(),
//     which may grow fields, so unknown fields there are ignored.
//   - title is trimmed of surrounding white space and must then be 1–200
//     characters (Unicode code points) without control characters and
//     without the bidirectional embedding, override and isolate characters
//     U+202A–U+202E and U+2066–U+2069 (they make a notification read
//     differently from what was published); body may be empty and is at
//     most 10 KiB (10,240 bytes of UTF-8); url is optional and, when given, an absolute
//     https URL with a host, no user info, no bidirectional controls, at
//     most 2,048 bytes.
//   - An inbox cursor is opaque: one the API did not return (including a
//     forged time outside years 1–9999) is 400 invalid_cursor.
//   - Validation happens before any transaction: a rejected request writes
//     nothing (no material, no outbox row, no idempotency row).
//
// # Authentication and rate limits
//
// Every route under /v1 but GET /v1/vapid-public-key needs a bearer token that
// package auth accepts (HS256 with the shared secret, or RS256/ES256 from
// the identity provider's JWK Set when Config.JWKS is set; iss, aud, iat,
// exp required; nbf honoured; lifetime bounded — see its doc). The token
// is resolved once per request into a principal:
//
//   - a user: the subject (or the provider's user claim) mapped through
//     Config.IDs, which must be a row of users: the token cache looks the
//     user up once per token and again every Config.UserRecheck (5
//     minutes), so a deleted user is locked out within it; a subject found
//     missing stays refused for Config.UnknownUserTTL (30s) without
//     another lookup. A user's rights follow from the roster: a course's
//     instructor publishes to it and sees and controls its events; a
//     user's token carries no scopes.
//   - a service: subject service:NAME, no users row, with scopes (package
//     auth's Scope) that grant their right on every course and event:
//     notifications:send publishes to any course (as the course's
//     instructor, the material's author; the service's Idempotency-Keys
//     are kept under a uuid derived from its name), events:read reads any
//     event's status, events:control pauses, resumes and cancels any
//     event, roster:write is for the roster routes. A service has no
//     /v1/me resources (403).
//
// Routes check rights with Server.authorize (401/403 written for them).
// Any token failure is 401 unauthorized with a WWW-Authenticate
// challenge; a user lookup that fails (database down) is 503; a missing
// scope 403 forbidden.
//
// A token the cache does not hold costs a signature check and a user
// lookup, so those are rate limited per client address before either
// (Config.AuthRateBurst at once, default 50, then Config.AuthRateLimit per
// second, default 20): a flood of signed tokens for users that do not
// exist costs at most the burst in lookups, the rest 429.
//
// Each principal may then send Config.RateBurst requests at once (default 50)
// and Config.RateLimit per second after that (default 10), counted
// together over every authenticated route (a token bucket per user or
// service, in a bounded map). Beyond that the answer is 429 rate_limited with
// Retry-After in whole seconds; the request does nothing. A service
// credential has a sending service's budget instead, its own bucket of
// Config.ServiceRateBurst (default 10,000) and Config.ServiceRateLimit per
// second (default 5,000).
//
// The access log has one line per request with method, route pattern,
// status, duration, the caller (a user id or service:NAME, once
// authenticated) and the remote address.
//
// # Push subscriptions
//
// POST /v1/me/push-subscriptions takes {endpoint, expirationTime?,
// keys:{p256dh, auth}}: endpoint an https URL of at most 2,048 bytes on a
// known push service (Config.PushEndpoints, package endpoint: no IP
// literals, user info, fragments or ports other than 443 unless allowed;
// each refusal is a 400 whose code names it); p256dh the base64url (padding
// optional) 65-byte uncompressed point, which must lie on P-256; auth 16
// bytes base64url. It answers 201 with the new subscription, or 200 when the
// caller already had the endpoint (its keys are replaced). An endpoint
// another user subscribed is 409 endpoint_owned_by_another_user and changes
// nothing: whoever learns an endpoint must not take that browser's
// notifications; a browser changing hands unsubscribes and subscribes again,
// which gives it a new endpoint. A user has at most
// Config.MaxSubscriptionsPerUser (default 20) subscriptions; a new one
// beyond is 409 too_many_subscriptions. expirationTime is accepted and
// ignored. DELETE /v1/me/push-subscriptions with {"endpoint"} (or
// ?endpoint=) answers 204, or 404 when the caller has no subscription with
// that endpoint (another user's is never touched).
//
// # Inbox
//
// GET /v1/me/notifications?limit=&cursor= lists the caller's notifications
// newest first by keyset pagination on (created_at, event_id); limit is
// 1–100 (default 20, anything else 400 invalid_limit); next_cursor is an
// opaque string, present while more items may follow. POST
// /v1/me/notifications/{event_id}/read is 204 and idempotent (the first read
// time is kept); 404 when the caller has no such notification.
//
// # Events
//
// GET /v1/events/{event_id} reports an event's progress to the course's
// instructor or a service with events:read (403 for anyone else; 404 for
// an unknown event) through a
// StatusSource; the default (EventReports) serves the eventstatus report,
// the same JSON as `notify status --json`: the fan-out's state ("pending"
// until the planner ran, then "running" with notified/slices/rate/ETA,
// "finished") beside the push accounting, and "done" when both are.
//
// The caller is authorized before any report is built: the owner lookup
// (event → course → instructor) is one indexed row, a report reads the
// event's counters (a few rows whatever the audience size, so every call
// gets a fresh one). Unknown ids are remembered for Config.UnknownEventTTL
// (default 5s) and answered 404 without a query.
//
// # Operations
//
// /healthz answers while the process runs; /readyz pings Postgres with a
// short timeout (200 or 503), reusing the answer for Config.ReadyInterval
// (1s) so many probes cost one ping. Metrics (Prometheus text) are served by
// MetricsHandler, not on the public port: `notify run api` serves them on
// --metrics-addr (127.0.0.1:9104 by default).
//
// # Contract
//
// openapi.json (embedded, served at GET /openapi.json) is the OpenAPI 3.1
// document of every route: auth, request schemas, every response and its
// error codes. The package's tests hold the code to it: testEnv.do
// validates each request and response against it (kin-openapi), a request
// the document refuses must be refused by the server (4xx) so the document
// is never stricter than the code, the ErrorCode enum must equal the
// package's error constants, and a full run must see a 2xx answer from
// every documented operation. A change to a route, a field or an error
// code therefore changes openapi.json in the same commit.
package api
