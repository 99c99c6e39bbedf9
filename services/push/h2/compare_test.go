package h2

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"

	"github.com/notify-dev/notify/services/push/internal/benchtest"
)

// Why the push senders have their own HTTP/2 client, measured: the same push
// requests, the same concurrency, against the same HTTP/2 server running in
// a child process (so the process's CPU is the client's alone), through
// the own client and through golang.org/x/net/http2's Transport.
//
//	go test ./services/push/h2 -run '^$' -bench H2Client -benchtime 20000x
//
// cpu-ns/op is the client's CPU per request. Recorded in benchmarks/RESULTS.md.

const h2ServerEnv = "NOTIFY_H2_BENCH_SERVER"

func TestMain(m *testing.M) { benchtest.Main(m, h2ServerEnv, serveH2Bench) }

// serveH2Bench is the child's server: HTTP/2 answering 201 to every POST,
// like a push service. Its line is its address and its certificate.
func serveH2Bench(string) (line string, stop func(), err error) {
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusCreated)
	}))
	ts.EnableHTTP2 = true
	ts.Config.HTTP2 = &http.HTTP2Config{MaxConcurrentStreams: 1000}
	ts.StartTLS()
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw})
	return strings.TrimPrefix(ts.URL, "https://") + " " + base64.StdEncoding.EncodeToString(cert), ts.Close, nil
}

func startH2BenchServer(b *testing.B) (addr string, roots *x509.CertPool) {
	b.Helper()
	line := benchtest.StartChild(b, h2ServerEnv, "1")
	f := strings.Fields(line)
	if len(f) != 2 {
		b.Fatalf("bench server said %q", line)
	}
	pemBytes, err := base64.StdEncoding.DecodeString(f[1])
	if err != nil {
		b.Fatal(err)
	}
	roots = x509.NewCertPool()
	if !roots.AppendCertsFromPEM(pemBytes) {
		b.Fatal("bench server certificate")
	}
	return f[0], roots
}

const h2BenchConcurrency = 256

// benchBody is a push message's size: a ~200-byte payload, encrypted.
var benchBody = bytes.Repeat([]byte{0xa5}, 300)

func BenchmarkH2ClientOwn(b *testing.B) {
	addr, roots := startH2BenchServer(b)
	p := testPool(b, addr, roots)
	defer p.Close()
	auth := "vapid t=" + strings.Repeat("j", 420) + ", k=" + strings.Repeat("k", 87)
	benchtest.Parallel(b, h2BenchConcurrency, func(i int64) error {
		req := pushRequest(addr, fmt.Sprintf("/wpush/%d", i), auth, "2419200")
		resp, err := p.RoundTrip(context.Background(), req, benchBody, 30*time.Second)
		if err == nil && resp.Status != 201 {
			err = fmt.Errorf("status %d", resp.Status)
		}
		return err
	})
}

func BenchmarkH2ClientXNetTransport(b *testing.B) {
	addr, roots := startH2BenchServer(b)
	// x/net's Transport is what the comparison is about (net/http bundles the
	// same code); deprecated there in favour of net/http's, kept on purpose.
	//lint:ignore SA1019 the measured alternative
	tr := &http2.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}}
	defer tr.CloseIdleConnections() //lint:ignore SA1019 the measured alternative
	cl := &http.Client{Transport: tr}
	auth := "vapid t=" + strings.Repeat("j", 420) + ", k=" + strings.Repeat("k", 87)
	benchtest.Parallel(b, h2BenchConcurrency, func(i int64) error {
		req, err := http.NewRequest(http.MethodPost, fmt.Sprintf("https://%s/wpush/%d", addr, i), bytes.NewReader(benchBody))
		if err != nil {
			return err
		}
		req.Header.Set("Content-Type", "application/octet-stream")
		req.Header.Set("Content-Encoding", "aes128gcm")
		req.Header.Set("TTL", "2419200")
		req.Header.Set("Authorization", auth)
		resp, err := cl.Do(req)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 201 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}
