package benchkit

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"time"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
)

// MockConfig starts the mock push service (`notify run pushmock`) as a
// child process.
type MockConfig struct {
	// Binary is the notify executable. Required.
	Binary string
	// Dir receives its log (pushmock.log) and certificate
	// (pushmock-cert.pem). Required.
	Dir string
	// Port it listens on, on 127.0.0.1. Default: a free port.
	Port int
	// Latency is its injected answer latency; 0 answers at once.
	Latency time.Duration
	// Seed is the data set seed it derives subscription keys from, to
	// decrypt samples. Default 1.
	Seed int64
	// DecryptSample is the fraction of messages it decrypts; 0 for none.
	DecryptSample float64
	// MaxStreams is its HTTP/2 streams per connection. Default: the mock's.
	MaxStreams int
	// WebSocketAddr, when set, also serves Mozilla's push protocol there
	// for a real Firefox (--ws-addr).
	WebSocketAddr string
	// Flags are further pushmock flags, e.g. faults ("--rate-429", "0.02").
	Flags []string
	// Env is added to its environment.
	Env []string
	// Ready bounds the wait for it to answer. Default 30 s.
	Ready time.Duration
}

// Mock is a running mock push service process and a client of its /stats.
type Mock struct {
	*Proc
	// URL is its base URL (https://127.0.0.1:port).
	URL string
	// CertFile is its self-signed certificate, for senders' RootCAs.
	CertFile string
	// FCMCredentialsFile is the dev service account its FCM side trusts
	// (written by the mock on start, its token_uri this mock's), and
	// APNsDevDir the directory of the dev APNs key its APNs side trusts
	// (apns.EnsureDevKey): both in Dir, so runs share nothing.
	FCMCredentialsFile, APNsDevDir string
	client                         *http.Client
}

// StartMock starts the mock and waits until it answers /healthz.
func StartMock(ctx context.Context, cfg MockConfig) (*Mock, error) {
	if cfg.Binary == "" || cfg.Dir == "" {
		return nil, fmt.Errorf("benchkit: MockConfig needs Binary and Dir")
	}
	if cfg.Port == 0 {
		var err error
		if cfg.Port, err = FreePort(); err != nil {
			return nil, err
		}
	}
	if cfg.Seed == 0 {
		cfg.Seed = 1
	}
	if cfg.Ready == 0 {
		cfg.Ready = 30 * time.Second
	}
	addr := "127.0.0.1:" + strconv.Itoa(cfg.Port)
	m := &Mock{URL: "https://" + addr, CertFile: filepath.Join(cfg.Dir, "pushmock-cert.pem"),
		FCMCredentialsFile: filepath.Join(cfg.Dir, "fcm-service-account.json"), APNsDevDir: filepath.Join(cfg.Dir, "apns")}
	args := []string{"run", "pushmock", "--addr", addr, "--cert-file", m.CertFile,
		"--fcm-credentials", m.FCMCredentialsFile, "--apns-dev-dir", m.APNsDevDir,
		"--seed", strconv.FormatInt(cfg.Seed, 10), "--latency", cfg.Latency.String(),
		"--decrypt-sample", strconv.FormatFloat(cfg.DecryptSample, 'f', -1, 64)}
	if cfg.MaxStreams != 0 {
		args = append(args, "--max-streams", strconv.Itoa(cfg.MaxStreams))
	}
	if cfg.WebSocketAddr != "" {
		args = append(args, "--ws-addr", cfg.WebSocketAddr)
	}
	args = append(args, cfg.Flags...)
	var err error
	if m.Proc, err = StartProc(cfg.Binary, cfg.Dir, "pushmock", cfg.Env, args...); err != nil {
		return nil, err
	}
	err = WaitFor(ctx, "the mock push service", cfg.Ready, []*Proc{m.Proc}, func(ctx context.Context) (bool, error) {
		if m.client == nil {
			// The certificate appears once the mock has written it.
			pool, err := webpush.LoadCAFile(m.CertFile)
			if err != nil {
				return false, err
			}
			m.client = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
				TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
		}
		return m.get(ctx, "/healthz", nil)
	})
	if err != nil {
		_ = m.Stop(10 * time.Second)
		return nil, err
	}
	return m, nil
}

// Stats reads the mock's GET /stats.
func (m *Mock) Stats(ctx context.Context) (pushmock.Stats, error) {
	var st pushmock.Stats
	_, err := m.get(ctx, "/stats", &st)
	return st, err
}

func (m *Mock) get(ctx context.Context, path string, into any) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.URL+path, nil)
	if err != nil {
		return false, err
	}
	resp, err := m.client.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return false, fmt.Errorf("mock %s: %s", path, resp.Status)
	}
	if into != nil {
		if err := json.NewDecoder(resp.Body).Decode(into); err != nil {
			return false, fmt.Errorf("mock %s: %w", path, err)
		}
	}
	return true, nil
}
