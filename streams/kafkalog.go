package streams

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kslog"
)

// KafkaLogEvery is the shortest gap between two log lines of a Kafka
// client with the same message.
const KafkaLogEvery = 10 * time.Second

// KafkaLogger is the franz-go logger of every notify Kafka client:
// franz-go's own slog adapter (kslog) over l with component=kafka. It
// passes on warnings and errors only, because at info franz-go logs every
// heartbeat and metadata decision, and each distinct message at most once
// per KafkaLogEvery, because while a broker is away a client reports every
// failed dial and retry several times a second.
func KafkaLogger(l *slog.Logger) kgo.Logger {
	h := kafkaLogHandler{next: l.With("component", "kafka").Handler(), rate: &logRate{last: map[string]time.Time{}}}
	return kslog.New(slog.New(h))
}

// kafkaLogHandler is the level floor and the rate limit of KafkaLogger.
type kafkaLogHandler struct {
	next slog.Handler
	rate *logRate // shared by the handlers WithAttrs and WithGroup derive
}

// logRate remembers when each message was last logged. franz-go's
// messages are fixed strings (the details are in the attributes), so the
// map stays small.
type logRate struct {
	mu   sync.Mutex
	last map[string]time.Time
}

func (r *logRate) allow(msg string, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if t, ok := r.last[msg]; ok && now.Sub(t) < KafkaLogEvery {
		return false
	}
	r.last[msg] = now
	return true
}

func (h kafkaLogHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return level >= slog.LevelWarn && h.next.Enabled(ctx, level)
}

func (h kafkaLogHandler) Handle(ctx context.Context, r slog.Record) error {
	if !h.rate.allow(r.Message, r.Time) {
		return nil
	}
	return h.next.Handle(ctx, r)
}

func (h kafkaLogHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	return kafkaLogHandler{next: h.next.WithAttrs(attrs), rate: h.rate}
}

func (h kafkaLogHandler) WithGroup(name string) slog.Handler {
	return kafkaLogHandler{next: h.next.WithGroup(name), rate: h.rate}
}
