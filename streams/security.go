package streams

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// The settings of the connection to Kafka, read by SecurityFromEnv. Unset,
// clients speak PLAINTEXT without authentication, which only a broker
// reachable by nobody else should accept (README, Security: the topics are
// the pipeline's control plane).
const (
	// EnvKafkaTLS: "true" (or 1) for TLS to every broker; implied by any
	// other NOTIFY_KAFKA_TLS_* setting.
	EnvKafkaTLS = "NOTIFY_KAFKA_TLS"
	// EnvKafkaTLSCAFile: PEM certificates the brokers' chains must end in.
	// Default: the system roots.
	EnvKafkaTLSCAFile = "NOTIFY_KAFKA_TLS_CA_FILE"
	// EnvKafkaTLSCertFile and EnvKafkaTLSKeyFile: a client certificate
	// (mutual TLS), both or neither.
	EnvKafkaTLSCertFile = "NOTIFY_KAFKA_TLS_CERT_FILE"
	EnvKafkaTLSKeyFile  = "NOTIFY_KAFKA_TLS_KEY_FILE"
	// EnvKafkaTLSServerName replaces the broker's host name in the
	// certificate check. Default: the host of each broker address.
	EnvKafkaTLSServerName = "NOTIFY_KAFKA_TLS_SERVER_NAME"
	// EnvKafkaSASLMechanism: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN (PLAIN
	// only with TLS: it sends the password as it is).
	EnvKafkaSASLMechanism = "NOTIFY_KAFKA_SASL_MECHANISM"
	// EnvKafkaSASLUsername and EnvKafkaSASLPassword: the SASL credentials,
	// required with a mechanism.
	EnvKafkaSASLUsername = "NOTIFY_KAFKA_SASL_USERNAME"
	EnvKafkaSASLPassword = "NOTIFY_KAFKA_SASL_PASSWORD"
)

// The SASL mechanisms Security accepts.
const (
	SASLScramSHA512 = "SCRAM-SHA-512"
	SASLScramSHA256 = "SCRAM-SHA-256"
	SASLPlain       = "PLAIN"
)

// Security is how every Kafka client of a process reaches the brokers:
// TLS, SASL, both or neither. The zero value is PLAINTEXT without
// authentication.
type Security struct {
	// TLS, when non-nil, is used to dial every broker.
	TLS *tls.Config
	// SASL, when non-nil, authenticates every connection.
	SASL sasl.Mechanism
	// Mechanism names SASL ("" without).
	Mechanism string
}

// SecurityFromEnv reads the NOTIFY_KAFKA_TLS_* and NOTIFY_KAFKA_SASL_*
// settings; an error names the setting at fault.
func SecurityFromEnv(getenv func(string) string) (Security, error) {
	var s Security
	get := func(k string) string { return strings.TrimSpace(getenv(k)) }
	on := get(EnvKafkaTLS)
	useTLS := false
	if on != "" {
		b, err := strconv.ParseBool(on)
		if err != nil {
			return s, fmt.Errorf("invalid %s %q: want true or false", EnvKafkaTLS, on)
		}
		useTLS = b
	}
	ca, cert, key, server := get(EnvKafkaTLSCAFile), get(EnvKafkaTLSCertFile), get(EnvKafkaTLSKeyFile), get(EnvKafkaTLSServerName)
	if ca != "" || cert != "" || key != "" || server != "" {
		if on != "" && !useTLS {
			return s, fmt.Errorf("%s is false but other NOTIFY_KAFKA_TLS_* settings are set", EnvKafkaTLS)
		}
		useTLS = true
	}
	if useTLS {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: server}
		if ca != "" {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return s, fmt.Errorf("invalid %s: %w", EnvKafkaTLSCAFile, err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return s, fmt.Errorf("invalid %s %s: no PEM certificate in it", EnvKafkaTLSCAFile, ca)
			}
		}
		switch {
		case (cert == "") != (key == ""):
			return s, fmt.Errorf("%s and %s go together: set both for a client certificate, or neither", EnvKafkaTLSCertFile, EnvKafkaTLSKeyFile)
		case cert != "":
			pair, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return s, fmt.Errorf("invalid %s / %s: %w", EnvKafkaTLSCertFile, EnvKafkaTLSKeyFile, err)
			}
			cfg.Certificates = []tls.Certificate{pair}
		}
		s.TLS = cfg
	}
	mech, user, pass := get(EnvKafkaSASLMechanism), get(EnvKafkaSASLUsername), getenv(EnvKafkaSASLPassword)
	if mech == "" {
		if user != "" || pass != "" {
			return s, fmt.Errorf("%s is not set but %s / %s are: name the mechanism (%s, %s or %s)",
				EnvKafkaSASLMechanism, EnvKafkaSASLUsername, EnvKafkaSASLPassword, SASLScramSHA512, SASLScramSHA256, SASLPlain)
		}
		return s, nil
	}
	if user == "" || pass == "" {
		return s, fmt.Errorf("%s %s needs %s and %s", EnvKafkaSASLMechanism, mech, EnvKafkaSASLUsername, EnvKafkaSASLPassword)
	}
	auth := scram.Auth{User: user, Pass: pass}
	switch strings.ToUpper(mech) {
	case SASLScramSHA512:
		s.SASL = auth.AsSha512Mechanism()
	case SASLScramSHA256:
		s.SASL = auth.AsSha256Mechanism()
	case SASLPlain:
		if s.TLS == nil {
			return s, fmt.Errorf("%s PLAIN sends the password in the clear: set %s=true (or use %s)", EnvKafkaSASLMechanism, EnvKafkaTLS, SASLScramSHA512)
		}
		s.SASL = plain.Auth{User: user, Pass: pass}.AsMechanism()
	default:
		return s, fmt.Errorf("invalid %s %q: want %s, %s or %s", EnvKafkaSASLMechanism, mech, SASLScramSHA512, SASLScramSHA256, SASLPlain)
	}
	s.Mechanism = strings.ToUpper(mech)
	return s, nil
}

// Opts are the client options that apply s.
func (s Security) Opts() []kgo.Opt {
	var o []kgo.Opt
	if s.TLS != nil {
		// franz-go sets ServerName per broker from its address unless
		// the config names one.
		o = append(o, kgo.DialTLSConfig(s.TLS.Clone()))
	}
	if s.SASL != nil {
		o = append(o, kgo.SASL(s.SASL))
	}
	return o
}

// String says what s does, for a startup log line (no secrets).
func (s Security) String() string {
	t := "PLAINTEXT"
	if s.TLS != nil {
		t = "TLS"
	}
	if s.Mechanism != "" {
		return "SASL_" + map[string]string{"PLAINTEXT": "PLAINTEXT", "TLS": "SSL"}[t] + " " + s.Mechanism
	}
	return t
}

var (
	securityMu sync.Mutex
	security   Security
)

// UseSecurity makes s apply to every client ClientOpts builds from now on:
// a process sets it once at start, from SecurityFromEnv, so no client is
// ever built without it.
func UseSecurity(s Security) {
	securityMu.Lock()
	defer securityMu.Unlock()
	security = s
}

func securityOpts() []kgo.Opt {
	securityMu.Lock()
	defer securityMu.Unlock()
	return security.Opts()
}
