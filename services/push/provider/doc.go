// Package provider is the layer every push platform sends through: one
// Platform type, one Delivery (a device, the event and its payload, a
// TTL), one Provider interface, and the policies the platforms share,
// each written once — what a transport error means (SendFailed), how a
// Retry-After reads (ParseRetryAfter), the pause an origin or project
// takes when asked to wait (Pause), how an answer's text is kept for a
// reason (Sanitize), the error of a send after Close (ErrClosed), the
// CA file a private push service needs (LoadCAFile) and the series they
// count in (Metrics).
//
// The platform packages (webpush, fcm, apns) hold what differs: the
// request, the answer's meaning, credentials. The push worker holds a
// map from Platform to Provider and nothing platform-specific, so a
// fourth platform is one package implementing Provider plus its
// registration where the binary builds the worker (see DESIGN.md).
//
// Outcome is what became of one send, whatever its platform: the worker's
// accounting (delivered, gone, failed, retrying) is written once for
// every platform.
package provider
