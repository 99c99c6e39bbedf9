// Package pushmock is an RFC 8030 push service for tests and benchmarks. It
// speaks TLS and HTTP/2 with a self-signed certificate it writes to a file
// for senders to trust, and checks requests as a real push service does:
// VAPID (RFC 8292: signature, aud = its own origin, exp in the future and at
// most 24 h ahead), Content-Encoding aes128gcm, a TTL header, a body of at
// most 4096 bytes — answering 401/403/400/413 otherwise.
//
// It answers after an injected latency (default 230 ms, the seed's measured
// FCM round trip, rounded up to the millisecond), so thousands of concurrent
// streams cost memory, not CPU. Faults are configurable: random 429s with
// Retry-After, random 503s, a deterministic set of ids that answer 410
// (GoneID) and a deterministic set that answer 500 forever (Always5xxID).
//
// The mock shares the benchmark machine with the sender it stands in front
// of, so its own CPU per push is kept small (about 10 µs): HTTP/2 is served
// by a frame loop per connection (h2.go) instead of net/http's goroutine per
// stream, answers wait in a millisecond-grained releaser instead of a timer
// each and leave in batches with one flush per connection, and while a
// server runs the GC target is 400% unless GOGC is set (gc.go). FCM and
// APNs sends over HTTP/2 take the same path (their handlers run on the
// frame loop). HTTP/1.1 goes through net/http as usual.
//
// With DecryptSample > 0 it re-derives the browser keys of a deterministic
// fraction of subscription ids (seed.DeriveSubscriptionKeys, as `notify
// seed` does) and decrypts what it received, counting failures.
//
// Stats (GET /stats, POST /stats/reset) count requests, distinct delivered
// ids (a bitset over ids, 128 KiB per million), duplicate deliveries,
// answers by status, VAPID and decryption failures, and early retries:
// requests for an id that arrive before the Retry-After it was given.
//
// With Config.APNs set it is also an APNs (apns.go): POST
// /3/device/<hex token>, HTTP/2 only (505 for HTTP/1.1), checking the ES256
// provider token (signature against the configured key, kid, iss, iat at
// most an hour old — 403 ExpiredProviderToken beyond, configurable), the
// headers (apns-topic, apns-push-type, apns-priority, apns-expiration,
// apns-collapse-id ≤ 64 bytes) and the body (JSON with aps.alert, ≤ 4096
// bytes), answering with APNs's statuses and {"reason"} bodies. The faults
// apply to it too, with the gone and always-5xx sets chosen by device
// token (APNsGoneToken, APNsAlways5xxToken); Stats.APNs counts it.
//
// With Config.FCMCredentialsFile it is also FCM HTTP v1 (fcm.go): a token
// endpoint, POST /token, that verifies the service account's RS256
// assertion and issues short-lived access tokens, and POST
// /v1/projects/{project}/messages:send that checks the bearer token, the
// project and the message schema strictly. Devices are registration
// tokens made by FCMToken (carrying a device id and the project), and the
// same faults apply by id: GoneFraction answers 404 UNREGISTERED,
// Always5xxFraction 500, Rate429 429 QUOTA_EXCEEDED with Retry-After,
// Rate5xx 503. Stats.FCM counts its side.
//
// Push resources are /wpush/<id> with <id> a decimal subscription id in
// [1, 2^30). Use it in-process (New, Start, Stop; in a test,
// pushmocktest.Start) or as `notify run pushmock`.
package pushmock
