// Package apns sends alerts to iOS devices through Apple's push service
// (APNs) with token authentication.
//
// One Client holds one provider token — an ES256 JWT, header {alg: ES256,
// kid: key id}, claims {iss: team id, iat}, signed with the team's .p8 key
// — for every send, and replaces it when it is Config.TokenRefresh old
// (default 40 min): Apple refuses tokens older than an hour and updates
// more frequent than every 20 minutes. A 403 ExpiredProviderToken replaces
// the token at once (one caller replaces it; the others pick it up) and
// the notification is sent once more.
//
// Requests are POST /3/device/<hex token> over HTTP/2 only (the push
// worker's own HTTP/2 client, package h2, which refuses a server that does
// not negotiate h2; connections per origin up to Config.MaxConnections,
// one more dialed only when all are at the stream limit), on
// api.push.apple.com or, for
// devices of development builds, api.sandbox.push.apple.com — or one
// Config.Endpoint for both, such as the mock in services/pushmock. Their
// headers are authorization, apns-topic (the bundle id), apns-push-type
// alert, apns-priority, apns-expiration (from the TTL; 0 means deliver now
// or never) and apns-collapse-id (the event id, so a resend replaces an
// undelivered copy); their body {"aps":{"alert":{"title","body"}},
// "event_id",…} is at most 4096 bytes. Connections are opened through a
// dial guard (package endpoint) that allows *.push.apple.com by default.
//
// Send returns a provider.Outcome, the push worker's platform-neutral
// result:
//
//	200                                   Delivered
//	410 Unregistered, 400 BadDeviceToken  Gone: delete the device
//	403 ExpiredProviderToken              new token, sent once more
//	429 TooManyRequests                   Retryable, this device only, after TooManyRequestsWait
//	5xx, connection errors                Retryable (Retry-After when given)
//	other 4xx (reason from the body)      PermanentFailure
//
// A notification that cannot be valid — a device token that is not hex of
// even length 64–200, no topic, a collapse id over 64 bytes, a body over
// 4096 bytes — is a PermanentFailure without a request.
//
// Local development uses credentials from EnsureDevKey (a fresh P-256
// .p8 with made-up ids under .local/apns), which only the mock trusts.
package apns
