package push_test

import (
	"context"
	"crypto/ecdh"
	"crypto/rand"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/VictoriaMetrics/metrics"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/notify-dev/notify/services/push"
	"github.com/notify-dev/notify/services/push/webpush"
)

// tarPit accepts TCP connections and never answers: the endpoints of
// issue 12's slow-origin attack.
func tarPit(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return "https://" + ln.Addr().String()
}

// TestConnectTimeoutBoundsATarPit: a push service that accepts the
// connection and never answers the handshake holds a send for the connect
// timeout, not for the request timeout.
func TestConnectTimeoutBoundsATarPit(t *testing.T) {
	t.Parallel()
	sender, err := push.NewWebPushSender(push.SenderSettings{
		VAPID:          webpush.VAPIDConfig{Key: mustVAPID(t), Subject: "mailto:tests@notify.invalid"},
		Endpoints:      devEndpoints(t),
		Timeout:        10 * time.Minute,
		ConnectTimeout: 200 * time.Millisecond,
	}, quietLogger(), metrics.NewSet())
	if err != nil {
		t.Fatal(err)
	}
	defer sender.Close()
	b := newTestBrowserKeys(t)
	out := sender.Send(context.Background(), webpush.Message{
		Subscription: webpush.Subscription{Endpoint: tarPit(t) + "/wpush/1", P256DH: b.p256dh, Auth: b.auth},
		Payload:      []byte("x"),
	})
	if out.Kind != webpush.Retryable || !strings.Contains(out.Err.Error(), "TLS handshake") || !errors.Is(out.Err, context.DeadlineExceeded) {
		t.Fatalf("send to a tar-pit: %+v, want Retryable with the handshake's deadline", out)
	}
}

// TestSlowOriginLeavesSlotsForOthers: half of a command's subscriptions
// point at an origin that never answers (its sends wait for a connection
// for a minute). With the send slots capped per origin, the other half is
// delivered meanwhile; without, the slow origin's sends held every slot.
func TestSlowOriginLeavesSlotsForOthers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, fixtureOpts{users: 400, subsRatio: 1})
	pit := tarPit(t)
	tag, err := f.db.Pool.Exec(f.ctx, `UPDATE push_subscriptions SET endpoint = replace(endpoint, $1, $2)
		WHERE id IN (SELECT id FROM push_subscriptions ORDER BY id LIMIT 200)`, f.mock.URL(), pit)
	if err != nil || tag.RowsAffected() != 200 {
		t.Fatalf("point 200 subscriptions at the tar-pit: %v (%d rows)", err, tag.RowsAffected())
	}
	set := metrics.NewSet()
	sender, err := push.NewWebPushSender(push.SenderSettings{
		VAPID:          webpush.VAPIDConfig{Key: mustVAPID(t), Subject: "mailto:tests@notify.invalid"},
		Endpoints:      devEndpoints(t),
		CAFile:         f.mock.CertFile(),
		MaxInFlight:    100,
		ConnectTimeout: time.Minute,
	}, quietLogger(), set)
	if err != nil {
		t.Fatal(err)
	}
	w, err := push.New(push.Config{
		Brokers: f.brokers, Topics: f.topics, Pool: f.db.Pool, Sender: sender,
		MaxInFlight: 100, MaxInFlightPerOrigin: 50, BatchSize: 50, FlushInterval: 20 * time.Millisecond,
		LagInterval: -1, Logger: testLogger(t), Metrics: set,
		ConsumerOpts: []kgo.Opt{kgo.SessionTimeout(6 * time.Second), kgo.FetchMaxWait(100 * time.Millisecond)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Start(f.ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// The tar-pit's sends are abandoned uncommitted.
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = w.Stop(sctx)
		sender.Close()
	})
	f.produceCommands(f.commands(1)) // one command: the tar-pit's ids come first
	deadline := time.Now().Add(40 * time.Second)
	for f.mock.Stats().Unique < 200 {
		if time.Now().After(deadline) {
			t.Fatalf("the reachable origin got %d of 200 pushes while the slow one held its sends (worker %+v)", f.mock.Stats().Unique, w.Stats())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

type browserKeys struct{ p256dh, auth []byte }

// newTestBrowserKeys makes a subscription's keys (a P-256 public key and a
// 16-byte auth secret), enough for a send to get as far as the network.
func newTestBrowserKeys(t *testing.T) browserKeys {
	t.Helper()
	priv, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	auth := make([]byte, 16)
	_, _ = rand.Read(auth)
	return browserKeys{p256dh: priv.PublicKey().Bytes(), auth: auth}
}
