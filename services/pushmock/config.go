package pushmock

import (
	"fmt"
	"log/slog"
	"time"
)

// NoLatency makes the mock answer at once (Config.Latency zero means the
// default 230 ms).
const NoLatency time.Duration = -1

// Config configures a Server. Zero fields take the documented defaults.
type Config struct {
	// Observe, when set, is called with every push request that reached
	// its platform's checks (tests of what senders send: headers, bodies).
	// It runs on the request's goroutine; nil costs nothing.
	Observe func(Observed)
	// Addr is the TCP address to listen on. Default 127.0.0.1:8443; use
	// port 0 for any free port (URL reports the one chosen).
	Addr string
	// CertFile is where the self-signed certificate (PEM, no key) is
	// written for senders to trust. Default .local/pushmock/cert.pem.
	CertFile string
	// Latency delays every answer. Default 230 ms; NoLatency for none.
	Latency time.Duration
	// Jitter spreads the latency uniformly over Latency ± Jitter (never
	// below zero). Default 0.
	Jitter time.Duration
	// PerTopic counts a Web Push delivery once per (subscription, Topic)
	// instead of once per subscription: Unique and Duplicates then stay
	// exact over many events to the same subscriptions (each event its
	// own Topic), at the cost of a map entry per delivery. Default false:
	// the one-broadcast runs' bitmap.
	PerTopic bool
	// Rate429 is the fraction of otherwise good requests answered 429 with
	// a Retry-After of RetryAfter. Default 0.
	Rate429 float64
	// RetryAfter is the delay a 429 asks for. Default 1 s.
	RetryAfter time.Duration
	// RetryAfterDate sends Retry-After as an HTTP date instead of seconds.
	RetryAfterDate bool
	// Rate5xx is the fraction of otherwise good requests answered 503
	// (without Retry-After). Default 0.
	Rate5xx float64
	// GoneFraction is the fraction of ids (chosen by GoneID) that always
	// answer 410 Gone. Default 0.
	GoneFraction float64
	// Always5xxFraction is the fraction of ids (chosen by Always5xxID)
	// that always answer 500. Default 0. An id in both sets answers 410.
	Always5xxFraction float64
	// DecryptSample is the fraction of ids (chosen by Sampled) whose
	// messages are decrypted with keys re-derived from Seed. Default 0.
	DecryptSample float64
	// Seed is the seed the subscriptions' keys were derived from. Default 1.
	Seed int64
	// MaxStreams is the HTTP/2 SETTINGS_MAX_CONCURRENT_STREAMS per
	// connection. Default 1000.
	MaxStreams int
	// WebSocketAddr, when set, is where the mock also speaks Mozilla's
	// push protocol (plain ws://) for a real Firefox whose
	// dom.push.serverURL points there: browsers subscribe through the mock
	// and pushes to their endpoints are forwarded to them (mozpush.go).
	// Default empty: off.
	WebSocketAddr string
	// APNs turns on the APNs side (apns.go). Default: off.
	APNs APNsConfig
	// FCMCredentialsFile turns on the FCM side (fcm.go): the
	// service-account JSON whose public key verifies the token endpoint's
	// assertions and whose project_id messages:send serves. A file that
	// does not exist is created with fresh dev credentials whose token_uri
	// is this mock. Default empty: no FCM side.
	FCMCredentialsFile string
	// FCMTokenLifetime is how long the access tokens the FCM side issues
	// are valid (expires_in, whole seconds). Default 1 h, as Google's;
	// under a second makes every token arrive expired.
	FCMTokenLifetime time.Duration
	// FCMNow is the FCM side's clock for the assertions it verifies and
	// the access tokens it issues and checks. Default time.Now; a test
	// hands it the clock it gives the client, so a token expires when the
	// test moves that clock rather than after a wait in real time.
	FCMNow func() time.Time
	// Logger receives lifecycle events. Default slog.Default().
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.Addr == "" {
		c.Addr = "127.0.0.1:8443"
	}
	if c.CertFile == "" {
		c.CertFile = ".local/pushmock/cert.pem"
	}
	if c.Latency == 0 {
		c.Latency = 230 * time.Millisecond
	}
	if c.RetryAfter == 0 {
		c.RetryAfter = time.Second
	}
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = 1000
	}
	if c.FCMTokenLifetime == 0 {
		c.FCMTokenLifetime = time.Hour
	}
	if c.FCMNow == nil {
		c.FCMNow = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.APNs = c.APNs.withDefaults()
	return c
}

func (c Config) validate() error {
	fractions := []struct {
		name string
		v    float64
	}{
		{"rate-429", c.Rate429}, {"rate-5xx", c.Rate5xx}, {"gone-fraction", c.GoneFraction},
		{"always-5xx-fraction", c.Always5xxFraction}, {"decrypt-sample", c.DecryptSample},
	}
	for _, f := range fractions {
		if !(f.v >= 0 && f.v <= 1) {
			return fmt.Errorf("pushmock: %s %v: want a fraction between 0 and 1", f.name, f.v)
		}
	}
	switch {
	case c.Latency < 0 && c.Latency != NoLatency:
		return fmt.Errorf("pushmock: latency %s: must not be negative", c.Latency)
	case c.Jitter < 0:
		return fmt.Errorf("pushmock: jitter %s: must not be negative", c.Jitter)
	case c.RetryAfter < 0:
		return fmt.Errorf("pushmock: retry-after %s: must not be negative", c.RetryAfter)
	case c.FCMTokenLifetime < 0:
		return fmt.Errorf("pushmock: fcm-token-lifetime %s: must not be negative", c.FCMTokenLifetime)
	case c.MaxStreams < 1:
		return fmt.Errorf("pushmock: max-streams %d: want at least 1", c.MaxStreams)
	}
	return c.APNs.validate()
}

// Observed is one push request as the mock received it.
type Observed struct {
	// Platform is "webpush", "fcm" or "apns".
	Platform string
	// Device is the Web Push subscription id, the FCM registration token
	// or the APNs device token.
	Device string
	// Topic and Urgency are Web Push's headers.
	Topic, Urgency string
	// VAPIDKey is the public key (the "k" parameter) a Web Push
	// request's Authorization was signed with.
	VAPIDKey string
	// CollapseKey and Priority are FCM's android.collapse_key and
	// android.priority, or APNs' apns-collapse-id and apns-priority.
	CollapseKey, Priority string
	// Body is the FCM or APNs request body, or the decrypted Web Push
	// payload (nil when the subscription's keys are not the seed's).
	Body []byte
}
