// Package webpush delivers Web Push messages: RFC 8291 message encryption
// (aes128gcm, one record, a fresh ephemeral P-256 key and salt per message),
// RFC 8292 VAPID authentication (ES256, one token per push-service origin,
// reused until shortly before it expires) and an RFC 8030 sender over
// HTTP/2 that many goroutines share.
//
// # Sending
//
// A Sender is safe for concurrent use and meant to be shared by every
// goroutine of a push worker:
//
//	s, err := webpush.NewSender(webpush.Config{VAPID: vapidCfg})
//	out := s.Send(ctx, webpush.Message{Subscription: sub, Payload: body})
//	switch out.Kind {
//	case webpush.Delivered:        // record it
//	case webpush.Gone:             // delete the subscription, never retry
//	case webpush.PermanentFailure: // record it, never retry
//	case webpush.Retryable:        // retry after max(out.RetryAfter, own backoff)
//	}
//
// Send never retries by itself: the caller owns the retry policy (attempt
// counting, exponential backoff, dead-lettering) because only it knows how
// often a message has been tried.
//
// # Flow control
//
// Three limits apply to every send, in this order:
//
//  1. Retry-After. When a push service answers 503 with Retry-After, or
//     429 with Retry-After while 429s are sustained (Config.RateLimitRatio:
//     by default a quarter of the origin's answers over 2 s), no request
//     goes to that origin before the given time. A sparse 429 is about one
//     recipient (APNs TooManyRequests is per device token), not the
//     sender: only its message waits, at the caller, for its Retry-After,
//     and the origin keeps its pace. Sends that arrive during a pause
//     either wait (when the remaining time is at most
//     Config.RetryAfterWait) or return at once as Retryable with
//     RetryAfter set to the remaining time and Err wrapping ErrOriginPaused,
//     without touching the network. The default (RetryAfterWait 0) returns
//     at once, so a worker can park the message and move on to other work;
//     a worker that prefers to block sets RetryAfterWait.
//  2. A per-origin adaptive concurrency limit (AIMD): it grows by one for
//     each delivered message while at least half of it is in use, and
//     halves on sustained 429s, 5xx, timeouts and connection errors — at
//     most once per round trip, so a burst of failures from requests that
//     were already in flight counts once. It never drops below 1 or grows
//     above Config.OriginMaxLimit.
//  3. A global cap on in-flight sends (Config.MaxInFlight) that bounds
//     memory whatever the number of callers.
//
// # Connections
//
// Each origin gets its own pool of HTTP/2 connections (package h2), a
// client built for push requests rather than net/http: a request is
// encoded straight into its connection's write buffer, one writer
// goroutine per connection sends whatever accumulated in one write (under
// load many requests share a TLS record and a system call), and one reader
// goroutine per connection completes the streams. HTTP/2 multiplexes many
// streams per connection; when every connection is at the server's
// SETTINGS_MAX_CONCURRENT_STREAMS the pool dials one more, and concurrent
// first sends share a single dial. Requests the server did not process
// (REFUSED_STREAM, GOAWAY) move to another connection; idle connections are
// pinged and closed when dead. Push services are reached directly: there is
// no HTTP proxy support.
//
// # CPU
//
// Per message the ephemeral key and the ECDH (two P-256 scalar
// multiplications, ~80 µs on one core of the reference machine) dominate;
// everything else — HKDF, AES-GCM, VAPID (a cached token), HTTP/2 framing,
// HPACK (the repeated Authorization costs one byte after the first
// request), TLS — costs under 10 µs. Encryption runs on the calling
// goroutine; the Go scheduler runs at most GOMAXPROCS of them at a time.
package webpush
