package pipeline

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
)

// mockClient reads the mock push service's /stats over its own TLS.
type mockClient struct {
	base string
	hc   *http.Client
}

type mockStats struct {
	Received        int64 `json:"received"`
	Unique          int64 `json:"unique"`
	Duplicates      int64 `json:"duplicates"`
	DecryptFailures int64 `json:"decrypt_failures"`
	VapidFailures   int64 `json:"vapid_failures"`
}

func (m *mockClient) load(certFile string) error {
	if m.hc != nil {
		return nil
	}
	pem, err := os.ReadFile(certFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return fmt.Errorf("no certificate in %s", certFile)
	}
	m.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true}}
	return nil
}

func (m *mockClient) stats(ctx context.Context) (mockStats, error) {
	var s mockStats
	if m.hc == nil {
		return s, fmt.Errorf("mock not ready")
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.base+"/stats", nil)
	resp, err := m.hc.Do(req)
	if err != nil {
		return s, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("mock /stats: %s", resp.Status)
	}
	return s, json.NewDecoder(resp.Body).Decode(&s)
}
