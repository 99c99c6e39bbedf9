package push

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/VictoriaMetrics/metrics"

	"github.com/notify-dev/notify/services/push/endpoint"
	"github.com/notify-dev/notify/services/push/provider"
	"github.com/notify-dev/notify/services/push/webpush"
)

// DefaultRetryAfterWait is how long a send waits in place for a push
// service's Retry-After pause to pass before giving up and re-queueing the
// message: a short pause (Retry-After: 1) costs less waited out than as a
// round trip through the outbox and Kafka.
const DefaultRetryAfterWait = 2 * time.Second

// SenderSettings are the delivery-engine settings a push worker exposes; the
// binary fills them from flags and NOTIFY_* variables.
type SenderSettings struct {
	// VAPID signs requests (NOTIFY_VAPID_PRIVATE_KEY, NOTIFY_VAPID_SUBJECT).
	// Required.
	VAPID webpush.VAPIDConfig
	// CAFile adds a PEM CA to the system roots (NOTIFY_PUSH_CA_FILE), e.g.
	// the mock push service's self-signed certificate. Default: system
	// roots only.
	CAFile string
	// Endpoints guards every connection to a push service (see package
	// endpoint): hosts off the allow-list (NOTIFY_PUSH_ALLOWED_HOSTS) and
	// addresses that resolve to loopback, private or metadata ranges are
	// refused as permanent failures. Default: the public push services,
	// no dev hosts.
	Endpoints *endpoint.Policy
	// MaxInFlight caps requests on the wire. The worker passes its own
	// MaxInFlight, which bounds sends more tightly (until recorded).
	MaxInFlight int
	// Timeout bounds one request. Default 30 s.
	Timeout time.Duration
	// ConnectTimeout bounds connecting to a push service, TCP and TLS
	// (--connect-timeout). Default webpush.DefaultDialTimeout (3 s).
	ConnectTimeout time.Duration
	// RetryAfterWait: see DefaultRetryAfterWait. Default 2 s; negative
	// means never wait.
	RetryAfterWait time.Duration
	// TTL is the default TTL header. Default 24 h.
	TTL time.Duration
}

// NewWebPushSender builds the delivery engine for a worker, naming the bad
// setting when one is invalid.
func NewWebPushSender(s SenderSettings, log *slog.Logger, set *metrics.Set) (*webpush.Sender, error) {
	if s.Timeout < 0 {
		return nil, fmt.Errorf("send-timeout must not be negative, got %s", s.Timeout)
	}
	if s.ConnectTimeout < 0 {
		return nil, fmt.Errorf("connect-timeout must not be negative, got %s", s.ConnectTimeout)
	}
	if s.TTL < 0 && s.TTL != provider.NowOrNever {
		return nil, fmt.Errorf("ttl must not be negative, got %s", s.TTL)
	}
	if s.Endpoints == nil {
		s.Endpoints, _ = endpoint.New(endpoint.Options{}) // the defaults are valid
	}
	cfg := webpush.Config{
		Dial:           s.Endpoints.Dialer(30 * time.Second),
		VAPID:          s.VAPID,
		MaxInFlight:    s.MaxInFlight,
		Timeout:        s.Timeout,
		DialTimeout:    s.ConnectTimeout,
		TTL:            s.TTL,
		RetryAfterWait: s.RetryAfterWait,
		Logger:         log,
		Metrics:        set,
	}
	switch {
	case cfg.RetryAfterWait == 0:
		cfg.RetryAfterWait = DefaultRetryAfterWait
	case cfg.RetryAfterWait < 0:
		cfg.RetryAfterWait = 0
	}
	if s.CAFile != "" {
		pool, err := webpush.LoadCAFile(s.CAFile)
		if err != nil {
			return nil, fmt.Errorf("NOTIFY_PUSH_CA_FILE / --ca: %w", err)
		}
		cfg.RootCAs = pool
	}
	return webpush.NewSender(cfg)
}
