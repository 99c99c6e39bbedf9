package pushmock_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/pushmock/pushmocktest"
	"github.com/notify-dev/notify/services/seed"
)

const testSeed = 42

func startMock(t *testing.T, cfg pushmock.Config) *pushmock.Server {
	t.Helper()
	cfg.Seed = testSeed
	return pushmocktest.Start(t, cfg)
}

func newSender(t *testing.T, m *pushmock.Server, mod func(*webpush.Config)) *webpush.Sender {
	t.Helper()
	return pushmocktest.NewSender(t, m.CertPool(), mod)
}

func message(t *testing.T, m *pushmock.Server, id int64) webpush.Message {
	t.Helper()
	k, err := seed.DeriveSubscriptionKeys(testSeed, id)
	if err != nil {
		t.Fatal(err)
	}
	return webpush.Message{
		Subscription: webpush.Subscription{Endpoint: m.Endpoint(id), P256DH: k.P256DH(), Auth: k.Auth[:]},
		Payload:      []byte(`{"title":"New material","id":` + string(rune('0'+id%10)) + `}`),
	}
}

func TestDeliverAndDecrypt(t *testing.T) {
	t.Parallel()
	m := startMock(t, pushmock.Config{DecryptSample: 1, Latency: 5 * time.Millisecond})
	s := newSender(t, m, nil)
	const n = 40
	var wg sync.WaitGroup
	for id := int64(1); id <= n; id++ {
		wg.Go(func() {
			if out := s.Send(context.Background(), message(t, m, id)); out.Kind != webpush.Delivered || out.Status != 201 {
				t.Errorf("id %d: %+v", id, out)
			}
		})
	}
	wg.Wait()
	// A second delivery of id 1 is a duplicate.
	s.Send(context.Background(), message(t, m, 1))
	st := m.Stats()
	if st.Received != n+1 || st.Unique != n || st.Duplicates != 1 || st.Decrypted != n+1 || st.DecryptFailures != 0 || st.VAPIDFailures != 0 || st.ByStatus["201"] != n+1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestDecryptFailureCounted(t *testing.T) {
	t.Parallel()
	m := startMock(t, pushmock.Config{DecryptSample: 1})
	s := newSender(t, m, nil)
	msg := message(t, m, 7)
	other, _ := seed.DeriveSubscriptionKeys(testSeed+1, 7) // keys the mock will not derive
	msg.Subscription.P256DH = other.P256DH()
	if out := s.Send(context.Background(), msg); out.Kind != webpush.Delivered {
		t.Fatalf("outcome %+v", out) // a real service cannot tell either
	}
	if st := m.Stats(); st.DecryptFailures != 1 || st.Decrypted != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestFaultsMapToOutcomes(t *testing.T) {
	t.Parallel()
	const goneF, failF = 0.2, 0.2
	m := startMock(t, pushmock.Config{GoneFraction: goneF, Always5xxFraction: failF})
	s := newSender(t, m, func(c *webpush.Config) { c.OriginInitialLimit = 1000 })
	var gone, failing, ok int
	for id := int64(1); id <= 100; id++ {
		out := s.Send(context.Background(), message(t, m, id))
		switch {
		case pushmock.GoneID(id, goneF):
			gone++
			if out.Kind != webpush.Gone || out.Status != 410 {
				t.Errorf("id %d: %+v, want gone", id, out)
			}
		case pushmock.Always5xxID(id, failF):
			failing++
			if out.Kind != webpush.Retryable || out.Status != 500 {
				t.Errorf("id %d: %+v, want retryable 500", id, out)
			}
		default:
			ok++
			if out.Kind != webpush.Delivered {
				t.Errorf("id %d: %+v, want delivered", id, out)
			}
		}
	}
	if gone == 0 || failing == 0 || ok == 0 {
		t.Fatalf("degenerate id sets: %d gone, %d failing, %d ok", gone, failing, ok)
	}
	// The failing set answers 500 forever.
	for id := int64(1); id <= 100; id++ {
		if pushmock.Always5xxID(id, failF) && !pushmock.GoneID(id, goneF) {
			if out := s.Send(context.Background(), message(t, m, id)); out.Status != 500 {
				t.Fatalf("id %d answered %d on retry, want 500 again", id, out.Status)
			}
			break
		}
	}
	if st := m.Stats(); st.ByStatus["410"] != int64(gone) || st.Unique != int64(ok) {
		t.Fatalf("stats %+v", st)
	}
}

// TestRetryAfterHonoured retries every 429 the way a push worker would and
// checks the mock saw no request before the Retry-After it gave, with both
// header forms.
func TestRetryAfterHonoured(t *testing.T) {
	t.Parallel()
	for _, date := range []bool{false, true} {
		t.Run(map[bool]string{false: "seconds", true: "http-date"}[date], func(t *testing.T) {
			t.Parallel()
			m := startMock(t, pushmock.Config{Rate429: 0.3, RetryAfter: 500 * time.Millisecond, RetryAfterDate: date})
			s := newSender(t, m, nil)
			const n = 30
			var wg sync.WaitGroup
			var mu sync.Mutex
			paused := 0
			for id := int64(1); id <= n; id++ {
				wg.Go(func() {
					msg := message(t, m, id)
					for attempt := 1; ; attempt++ {
						out := s.Send(context.Background(), msg)
						if out.Kind == webpush.Delivered {
							return
						}
						if out.Kind != webpush.Retryable || attempt > 50 {
							t.Errorf("id %d attempt %d: %+v", id, attempt, out)
							return
						}
						if out.Status == 429 && out.RetryAfter <= 0 {
							t.Errorf("429 without a delay: %+v", out)
						}
						if errors.Is(out.Err, webpush.ErrOriginPaused) {
							mu.Lock()
							paused++
							mu.Unlock()
						}
						time.Sleep(out.RetryAfter)
					}
				})
			}
			wg.Wait()
			st := m.Stats()
			if st.EarlyRetries != 0 {
				t.Fatalf("%d requests arrived before their Retry-After: %+v", st.EarlyRetries, st)
			}
			if st.Unique != n || st.Duplicates != 0 || st.ByStatus["429"] == 0 {
				t.Fatalf("stats %+v", st)
			}
			t.Logf("429s: %d, sends refused while the origin was paused: %d", st.ByStatus["429"], paused)
		})
	}
}

func TestRandom5xxIsRetryable(t *testing.T) {
	t.Parallel()
	m := startMock(t, pushmock.Config{Rate5xx: 1})
	s := newSender(t, m, nil)
	out := s.Send(context.Background(), message(t, m, 3))
	if out.Kind != webpush.Retryable || out.Status != 503 {
		t.Fatalf("outcome %+v", out)
	}
}

// TestRejectsLikeAPushService sends malformed requests directly.
func TestRejectsLikeAPushService(t *testing.T) {
	t.Parallel()
	m := startMock(t, pushmock.Config{})
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConfig(m), ForceAttemptHTTP2: true}}
	key, _ := webpush.GenerateVAPIDKey()
	signer, _ := webpush.NewSigner(webpush.VAPIDConfig{Key: key, Subject: "mailto:ops@example.com"})
	good, _ := signer.Header(m.URL())
	otherAud, _ := signer.Header("https://push.example.com")
	expSoon, _ := signer.Sign(m.URL(), time.Now().Add(48*time.Hour))
	body := bytes.Repeat([]byte{1}, 200)
	for _, tc := range []struct {
		name    string
		path    string
		headers map[string]string
		body    []byte
		want    int
	}{
		{"ok", "/wpush/1", map[string]string{"Authorization": good, "TTL": "60", "Content-Encoding": "aes128gcm"}, body, 201},
		{"no authorization", "/wpush/1", map[string]string{"TTL": "60", "Content-Encoding": "aes128gcm"}, body, 401},
		{"other audience", "/wpush/1", map[string]string{"Authorization": otherAud, "TTL": "60", "Content-Encoding": "aes128gcm"}, body, 403},
		{"exp over 24 h", "/wpush/1", map[string]string{"Authorization": "vapid t=" + expSoon + ", k=" + key.PublicKey(), "TTL": "60", "Content-Encoding": "aes128gcm"}, body, 403},
		{"garbage authorization", "/wpush/1", map[string]string{"Authorization": "vapid t=a.b.c, k=xyz", "TTL": "60", "Content-Encoding": "aes128gcm"}, body, 403},
		{"no TTL", "/wpush/1", map[string]string{"Authorization": good, "Content-Encoding": "aes128gcm"}, body, 400},
		{"aesgcm", "/wpush/1", map[string]string{"Authorization": good, "TTL": "60", "Content-Encoding": "aesgcm"}, body, 400},
		{"bad topic", "/wpush/1", map[string]string{"Authorization": good, "TTL": "60", "Content-Encoding": "aes128gcm", "Topic": "a b"}, body, 400},
		{"too large", "/wpush/1", map[string]string{"Authorization": good, "TTL": "60", "Content-Encoding": "aes128gcm"}, make([]byte, 4097), 413},
		{"4096 is fine", "/wpush/2", map[string]string{"Authorization": good, "TTL": "60", "Content-Encoding": "aes128gcm"}, make([]byte, 4096), 201},
		{"unknown id", "/wpush/abc", map[string]string{"Authorization": good, "TTL": "60", "Content-Encoding": "aes128gcm"}, body, 404},
	} {
		req, _ := http.NewRequest(http.MethodPost, m.URL()+tc.path, bytes.NewReader(tc.body))
		for k, v := range tc.headers {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.want)
		}
	}
	st := m.Stats()
	if st.VAPIDFailures != 4 {
		t.Errorf("vapid failures %d, want 4", st.VAPIDFailures)
	}

	// Stats over HTTP, then reset.
	resp, err := client.Get(m.URL() + "/stats")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got map[string]any
	if err := json.Unmarshal(raw, &got); err != nil {
		t.Fatalf("stats JSON: %v: %s", err, raw)
	}
	for _, k := range []string{"received", "unique", "duplicates", "by_status", "decrypt_failures", "vapid_failures", "early_retries"} {
		if _, ok := got[k]; !ok {
			t.Errorf("stats JSON lacks %q: %s", k, raw)
		}
	}
	if got["unique"].(float64) != 2 {
		t.Errorf("unique %v, want 2", got["unique"])
	}
	resp, err = client.Post(m.URL()+"/stats/reset", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if st := m.Stats(); st.Received != 0 || st.Unique != 0 || len(st.ByStatus) != 0 {
		t.Fatalf("after reset: %+v", st)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, cfg := range []pushmock.Config{{Rate429: 1.5}, {GoneFraction: -0.1}, {Jitter: -1}, {MaxStreams: -1}, {Latency: -5}} {
		if _, err := pushmock.New(cfg); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	_, err := pushmock.New(pushmock.Config{DecryptSample: 2})
	if err == nil || !strings.Contains(err.Error(), "decrypt-sample") {
		t.Errorf("error %v does not name the setting", err)
	}
}

func TestIDSetsAreDeterministicAndSized(t *testing.T) {
	n := 0
	for id := int64(1); id <= 100000; id++ {
		if pushmock.GoneID(id, 0.05) {
			n++
		}
		// The sets nest: a larger fraction keeps every id of a smaller one,
		// so runs with different fault rates stay comparable.
		if pushmock.GoneID(id, 0.05) && !pushmock.GoneID(id, 0.10) {
			t.Fatalf("id %d gone at fraction 0.05 but not at 0.10", id)
		}
	}
	if n < 4500 || n > 5500 {
		t.Fatalf("%d of 100000 ids gone at fraction 0.05", n)
	}
	// Deterministic across processes and builds: the seed, the mock and
	// the tests of other processes must agree on the same ids. These are
	// the first gone ids at 0.05 as computed when the salt was chosen.
	var first []int64
	for id := int64(1); len(first) < 8; id++ {
		if pushmock.GoneID(id, 0.05) {
			first = append(first, id)
		}
	}
	if want := []int64{9, 46, 60, 71, 74, 89, 95, 108}; !slices.Equal(first, want) {
		t.Fatalf("first gone ids at 0.05 = %v, want %v (the id hash changed)", first, want)
	}
}

// TestPerTopic: with PerTopic a subscription's pushes of different events
// (Topics) are each unique, and only a repeat of one Topic a duplicate;
// without it every repeat of the subscription is.
func TestPerTopic(t *testing.T) {
	t.Parallel()
	for _, perTopic := range []bool{false, true} {
		m := startMock(t, pushmock.Config{PerTopic: perTopic, Latency: pushmock.NoLatency})
		s := newSender(t, m, nil)
		for _, topic := range []string{"eventA", "eventB", "eventA"} {
			msg := message(t, m, 7)
			msg.Topic = topic
			if out := s.Send(context.Background(), msg); out.Kind != webpush.Delivered {
				t.Fatalf("per-topic %v, topic %s: %+v", perTopic, topic, out)
			}
		}
		st := m.Stats()
		wantUnique, wantDup := int64(1), int64(2)
		if perTopic {
			wantUnique, wantDup = 2, 1
		}
		if st.Unique != wantUnique || st.Duplicates != wantDup {
			t.Fatalf("per-topic %v: unique %d duplicates %d, want %d and %d", perTopic, st.Unique, st.Duplicates, wantUnique, wantDup)
		}
		m.ResetStats()
		if s.Send(context.Background(), message(t, m, 7)); m.Stats().Duplicates != 0 {
			t.Fatalf("per-topic %v: a duplicate after ResetStats", perTopic)
		}
	}
}
