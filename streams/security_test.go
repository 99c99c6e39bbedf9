package streams

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// selfSigned returns a server certificate for 127.0.0.1 and the PEM file of its CA
// (itself).
func selfSigned(t *testing.T) (tls.Certificate, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kafka.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"kafka.test"},
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, ca
}

func envOf(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// A SASL_SSL cluster (SCRAM-SHA-512 over TLS) takes a client configured from the
// NOTIFY_KAFKA_* settings, and refuses one without them or with a wrong password; the
// DLQ's second client copies the first one's TLS and SASL.
func TestSecuritySASLSSL(t *testing.T) {
	t.Parallel()
	cert, ca := selfSigned(t)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "t"),
		kfake.TLS(&tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}),
		kfake.EnableSASL(), kfake.Superuser(SASLScramSHA512, "notify", "s3cret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	env := map[string]string{EnvKafkaTLSCAFile: ca, EnvKafkaSASLMechanism: "SCRAM-SHA-512",
		EnvKafkaSASLUsername: "notify", EnvKafkaSASLPassword: "s3cret"}
	sec, err := SecurityFromEnv(envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if sec.String() != "SASL_SSL SCRAM-SHA-512" {
		t.Errorf("String %q", sec.String())
	}
	ping := func(opts ...kgo.Opt) error {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...), kgo.RequestRetries(0)}, opts...)...)
		if err != nil {
			return err
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return cl.ProduceSync(ctx, &kgo.Record{Topic: "t", Value: []byte("x")}).FirstErr()
	}
	if err := ping(sec.Opts()...); err != nil {
		t.Fatalf("configured client: %v", err)
	}
	if err := ping(); err == nil {
		t.Error("a client without TLS and SASL was served")
	}
	if err := ping(kgo.DialTLSConfig(sec.TLS.Clone())); err == nil {
		t.Error("a client without SASL was served")
	}
	env[EnvKafkaSASLPassword] = "wrong"
	bad, err := SecurityFromEnv(envOf(env))
	if err != nil {
		t.Fatal(err)
	}
	if err := ping(bad.Opts()...); err == nil {
		t.Error("a wrong password was served")
	}

	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(c.ListenAddrs()...)}, sec.Opts()...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := ping(clientSeeds(cl)...); err != nil {
		t.Errorf("a second client from clientSeeds: %v", err)
	}
}

// ClientOpts, the options every client starts from, carry the process's Security.
// Not parallel: it sets the process-wide value and puts it back before the parallel
// tests run.
func TestClientOptsCarrySecurity(t *testing.T) {
	_, ca := selfSigned(t)
	sec, err := SecurityFromEnv(envOf(map[string]string{EnvKafkaTLSCAFile: ca, EnvKafkaSASLMechanism: "scram-sha-256",
		EnvKafkaSASLUsername: "u", EnvKafkaSASLPassword: "p"}))
	if err != nil {
		t.Fatal(err)
	}
	UseSecurity(sec)
	defer UseSecurity(Security{})
	cl, err := kgo.NewClient(ClientOpts([]string{"127.0.0.1:1"}, "test")...)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if c, _ := cl.OptValue(kgo.DialTLSConfig).(*tls.Config); c == nil || c.RootCAs == nil {
		t.Error("ClientOpts lacks the TLS config")
	}
	if v := cl.OptValue(kgo.SASL); v == nil {
		t.Error("ClientOpts lacks SASL")
	}
}

// Bad settings fail naming the setting.
func TestSecurityFromEnvRefuses(t *testing.T) {
	t.Parallel()
	_, ca := selfSigned(t)
	notPEM := filepath.Join(t.TempDir(), "x")
	_ = os.WriteFile(notPEM, []byte("nope"), 0o600)
	for _, c := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{EnvKafkaTLS: "maybe"}, EnvKafkaTLS},
		{map[string]string{EnvKafkaTLS: "false", EnvKafkaTLSCAFile: ca}, EnvKafkaTLS},
		{map[string]string{EnvKafkaTLSCAFile: "/nonexistent"}, EnvKafkaTLSCAFile},
		{map[string]string{EnvKafkaTLSCAFile: notPEM}, EnvKafkaTLSCAFile},
		{map[string]string{EnvKafkaTLSCertFile: ca}, EnvKafkaTLSKeyFile},
		{map[string]string{EnvKafkaSASLMechanism: "GSSAPI", EnvKafkaSASLUsername: "u", EnvKafkaSASLPassword: "p"}, EnvKafkaSASLMechanism},
		{map[string]string{EnvKafkaSASLMechanism: "SCRAM-SHA-512", EnvKafkaSASLUsername: "u"}, EnvKafkaSASLPassword},
		{map[string]string{EnvKafkaSASLUsername: "u", EnvKafkaSASLPassword: "p"}, EnvKafkaSASLMechanism},
		{map[string]string{EnvKafkaSASLMechanism: "PLAIN", EnvKafkaSASLUsername: "u", EnvKafkaSASLPassword: "p"}, EnvKafkaTLS},
	} {
		if _, err := SecurityFromEnv(envOf(c.env)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want an error naming %s", c.env, err, c.want)
		}
	}
	if s, err := SecurityFromEnv(envOf(nil)); err != nil || s.TLS != nil || s.SASL != nil || s.String() != "PLAINTEXT" {
		t.Errorf("unset: %+v %v, want PLAINTEXT", s, err)
	}
}
