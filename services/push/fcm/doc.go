// Package fcm sends notifications to Android (and other Firebase) apps
// through FCM HTTP v1: POST {endpoint}/v1/projects/{project}/messages:send
// with an OAuth 2.0 access token, over HTTP/2.
//
// # Credentials
//
// A Google service-account JSON file (LoadCredentials; the notify binary
// reads NOTIFY_FCM_CREDENTIALS) gives the project (project_id), the key
// (private_key, PEM RSA) and the token endpoint (token_uri). The client
// signs an RS256 JWT assertion (iss = client_email, scope
// firebase.messaging, aud = token_uri, valid for an hour), exchanges it at
// token_uri (RFC 7523 jwt-bearer grant) for an access token and caches
// that. Sends read the cached token without a lock. Shortly before it
// expires (Config.RefreshBefore, at most half its lifetime) exactly one
// sender exchanges a new assertion while the others keep using the old
// token; once it has expired they wait for that one exchange. A 401 drops
// the token the send used — unless another send already replaced it, so
// a burst of 401s costs one exchange — and the message is sent once more;
// a second 401 is a PermanentFailure. The token endpoint refusing the
// assertion (invalid_grant: wrong key, clock, issuer) is a
// PermanentFailure wrapping ErrTokenExchange; it failing or being
// unreachable is Retryable. A failed exchange stands for a second: sends
// meanwhile keep a token that has not yet expired or get the same
// failure, so an outage costs one exchange a second, not one per message.
//
// GenerateDevCredentials makes a service account with a fresh key for the
// local mock (package pushmock verifies assertions with VerifyAssertion).
//
// # Outcomes
//
// Send returns a provider.Outcome, with FCM's errorCode in an *Error:
//
//	200                               Delivered
//	404 UNREGISTERED                  Gone: delete the token, never retry
//	403 SENDER_ID_MISMATCH            Gone: the token belongs to another project
//	400 INVALID_ARGUMENT, other 4xx   PermanentFailure, with the reason
//	401 (twice)                       PermanentFailure, after one token renewal
//	429 QUOTA_EXCEEDED                Retryable, RetryAfter ≥ Retry-After; the project pauses
//	500, 503, 408, no answer          Retryable, RetryAfter from Retry-After when given
//
// FCM's quota is per project per minute, so a 429 pauses the whole
// project, not one message: until Retry-After (Config.QuotaPause, 1 min,
// when FCM gives none) every Send returns Retryable at once, with
// RetryAfter the time left and Err wrapping ErrProjectPaused, without a
// request. A 5xx with Retry-After pauses the project the same way. Send
// never retries otherwise: backoff, attempt counting and dead-lettering
// belong to the caller.
//
// # Connections
//
// Sends go over the push worker's own HTTP/2 client (package h2, the Web
// Push sender's too): many streams share a connection, and one more is
// dialed — by one caller while the others wait — only when every open one
// is at the server's concurrent-stream limit, up to Config.MaxConnections.
// It costs ~4–5 µs of CPU per request where net/http's client cost ~20, and
// for FCM, with no per-message crypto, that is most of the sender's cost.
// A server without HTTP/2 (a stand-in) is spoken to over HTTP/1.1 through
// net/http, one request per connection at a time, with a warning. The
// token exchange uses net/http's Transport. Every connection is dialed
// through an endpoint.Policy (DialPolicy): exactly the hosts of Config.Endpoint and
// the token_uri, and no loopback, private or metadata address unless the
// operator named it as an IP literal or localhost, or Config.Dev is set.
// Redirects are never followed: they would carry the bearer token
// elsewhere.
//
// # Metrics
//
// notify_provider_sends_total{platform="fcm",outcome} and the other
// notify_provider_* series (package provider),
// notify_fcm_in_flight, notify_fcm_token_exchanges_total{result},
// notify_fcm_unauthorized_total, notify_fcm_project_pauses_total and
// notify_fcm_paused_sends_total, in Config.Metrics.
package fcm
