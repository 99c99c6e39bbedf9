// Package h2 is a purpose-built HTTP/2 client for push requests — Web Push,
// FCM HTTP v1 and APNs alike: a POST with a body of at most a few KiB,
// answered by a status, a few headers and, for a refusal, a short (JSON)
// body. A general client (net/http, x/net/http2) spends several times the
// CPU per request — a goroutine per request, a write system call per
// request, a header map — which for FCM and APNs, with no per-message
// crypto, is most of the sender's cost.
//
// Here a request is encoded straight into the connection's write buffer
// under one lock, one writer goroutine per connection flushes whatever has
// accumulated in a single write (so under load many requests share a TLS
// record and a system call), and one reader goroutine per connection
// completes streams. Framing and HPACK decoding come from
// golang.org/x/net/http2; the request side of HPACK is its own (hpack.go).
// A Request carries its header fields as a list (Field), each either
// indexed (repeated: authorization, content-type, apns-topic…) or a
// never-indexed literal (unique to the request).
//
// Measured (compare_test.go: the same requests, 256 concurrent, against the
// same HTTP/2 server in a child process, 3 interleaved runs on 2026-12-01):
// 4.2–4.9 µs of client CPU per request here, 23.8–24.5 µs through x/net/http2's
// Transport — about 5×.
//
// What it implements of RFC 9113: the connection preface and SETTINGS in
// both directions (MAX_CONCURRENT_STREAMS, INITIAL_WINDOW_SIZE,
// MAX_FRAME_SIZE, HEADER_TABLE_SIZE, MAX_HEADER_LIST_SIZE), send-side flow
// control on the connection and each stream, receive-side WINDOW_UPDATEs,
// PING (answering, and probing idle connections), GOAWAY (streams above the
// last processed id are retried on another connection), RST_STREAM
// (REFUSED_STREAM is retried on another connection), CONTINUATION, and
// server push refused.
//
// A peer cannot grow the client without bound: at most 10,000 replies
// (SETTINGS and PING ACKs, RST_STREAM) may wait for a peer that does not
// read — past that the connection is closed with ENHANCE_YOUR_CALM, as
// golang.org/x/net/http2's server does — a connection with 4 MiB waiting
// for the writer takes no new requests and holds bodies back, and a
// GOAWAY's debug data is logged once per connection, truncated
// (hostile_test.go).
//
// Pooling: a Pool holds the connections to one origin; a connection at the
// server's stream limit makes the pool dial another — one dial, shared by
// every request waiting for room — up to Options.MaxConns, beyond which
// requests wait for a stream. A server that does not negotiate h2 fails the
// dial with ErrNotHTTP2.
//
// A Pool is a client, not a service: it has Close rather than the startstop
// lifecycle. Its goroutines (reader, writer, health check per connection,
// a dial) end with their connection; Close stops new requests and lets
// connections close once their streams finish.
package h2
