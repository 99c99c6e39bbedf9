// Package kafkatest starts a scratch Kafka broker for one test: a JVM of
// its own on the jars infra/local/kafka.sh fetches (Kafka in KRaft
// combined mode, one node), on free ports, with its data, config,
// certificates and log under the test's temporary directory, killed when
// the test ends. The shared local broker (127.0.0.1:19092) is never
// touched.
//
// It exists for what the shared broker cannot show: a listener that
// requires TLS and SASL. StartSASLSSL's broker accepts clients only on a
// SASL_SSL listener with SCRAM-SHA-512, behind a certificate of a CA the
// test generated with crypto/x509, so notify's client settings
// (NOTIFY_KAFKA_TLS_*, NOTIFY_KAFKA_SASL_*) are tested against a real
// broker's handshake and authentication.
package kafkatest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/notify-dev/notify/infra/local/localtest"
)

// EnvLibs names the environment variable that points the broker at another
// directory of Kafka jars (another checkout's .local/kafka/libs, say).
const EnvLibs = "NOTIFY_KAFKA_LIBS"

// Broker is a running scratch broker.
type Broker struct {
	// Addr is the SASL_SSL listener, 127.0.0.1:PORT: the only one clients
	// can use.
	Addr string
	// CAFile is the PEM certificate of the CA that signed the broker's
	// certificate (for 127.0.0.1 and localhost).
	CAFile string
	// Dir holds server.properties, the certificates, the data and the log.
	Dir string
	// Log is the broker's stdout and stderr.
	Log string
	// Startup is how long the broker took from exec to answering an
	// authenticated metadata request.
	Startup time.Duration

	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// Mechanism is the SASL mechanism StartSASLSSL's listener takes.
const Mechanism = "SCRAM-SHA-512"

// admin is the broker's own user (inter-broker listener, readiness probe).
const admin = "scratch-admin"

// LibsDir is where infra/local/kafka.sh puts the jars, or EnvLibs when set.
func LibsDir() string { return localtest.LibsDir(EnvLibs, "kafka") }

// StartSASLSSL starts a broker whose client listener is SASL_SSL with
// SCRAM-SHA-512 for users (name → password), and returns once it answers
// an authenticated request. Without java or the jars it skips t (fails it
// when CI is set: localtest.Missing).
func StartSASLSSL(t testing.TB, users map[string]string) *Broker {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		localtest.Missing(t, "kafkatest: java is not on PATH (Kafka needs Java 17+; bash infra/local/up.sh installs what it needs)")
		return nil
	}
	libs := LibsDir()
	if _, err := os.Stat(filepath.Join(libs, ".stamp")); err != nil {
		localtest.Missing(t, "kafkatest: no Kafka jars in %s; fetch them with bash infra/local/kafka.sh start (or point %s at another checkout's)", libs, EnvLibs)
		return nil
	}
	b := &Broker{Dir: t.TempDir()}
	b.Log = filepath.Join(b.Dir, "kafka.log")
	b.CAFile = filepath.Join(b.Dir, "ca.pem")
	keystore := filepath.Join(b.Dir, "server.pem")
	writeCerts(t, b.CAFile, keystore)

	adminPass := randText(t)
	all := map[string]string{admin: adminPass}
	for u, p := range users {
		if u == admin {
			t.Fatalf("kafkatest: user name %q is the broker's own", admin)
		}
		all[u] = p
	}
	names := make([]string, 0, len(all))
	for u := range all {
		names = append(names, u)
	}
	sort.Strings(names)

	cp := filepath.Join(libs, "*")
	log4j := filepath.Join(localtest.RepoRoot(), "infra", "local", "kafka", "log4j2.xml")
	jvm := []string{"-Xms128m", "-Xmx512m", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true", "-Dlog4j2.configurationFile=" + log4j}
	// A free port can be taken between the probe and the broker's bind: a
	// start that fails on its port is retried on others.
	for attempt := 1; ; attempt++ {
		port, cport := freePort(t), freePort(t)
		b.Addr = "127.0.0.1:" + strconv.Itoa(port)
		data := filepath.Join(b.Dir, fmt.Sprintf("data-%d", attempt))
		config := filepath.Join(b.Dir, "server.properties")
		writeFile(t, config, serverProperties(port, cport, data, keystore, b.CAFile, adminPass))

		format := append(append([]string{}, jvm...), "-cp", cp, "kafka.tools.StorageTool", "format", "--standalone",
			"--cluster-id", clusterID(t), "--config", config)
		for _, u := range names {
			format = append(format, "--add-scram", fmt.Sprintf("%s=[name=%s,password=%s]", Mechanism, u, all[u]))
		}
		if out, err := exec.Command(java, format...).CombinedOutput(); err != nil {
			t.Fatalf("kafkatest: kafka.tools.StorageTool format: %v\n%s", err, out)
		}

		logf, err := os.OpenFile(b.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatalf("kafkatest: %v", err)
		}
		b.cmd = exec.Command(java, append(append([]string{}, jvm...), "-XX:+UseG1GC", "-cp", cp, "kafka.Kafka", config)...)
		b.cmd.Dir = b.Dir
		b.cmd.Stdout, b.cmd.Stderr = logf, logf
		// The broker dies with the test binary, even one killed before
		// any cleanup runs.
		b.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		t0 := time.Now()
		if err := b.cmd.Start(); err != nil {
			logf.Close()
			t.Fatalf("kafkatest: start %s: %v", java, err)
		}
		logf.Close()
		b.exited = make(chan struct{})
		go func() { b.err = b.cmd.Wait(); close(b.exited) }()
		t.Cleanup(b.stop)

		err = b.waitReady(adminPass, 3*time.Minute)
		if err == nil {
			b.Startup = time.Since(t0)
			t.Logf("kafkatest: SASL_SSL broker at %s after %s (log %s)", b.Addr, b.Startup.Round(100*time.Millisecond), b.Log)
			return b
		}
		b.stop()
		if attempt < 3 && bytes.Contains(readFile(b.Log), []byte("Address already in use")) {
			continue
		}
		t.Fatalf("kafkatest: %v\n%s", err, tail(readFile(b.Log), 60))
		return nil
	}
}

// stop kills the broker and waits for it; a second call is a no-op.
func (b *Broker) stop() {
	if b.cmd == nil || b.cmd.Process == nil {
		return
	}
	select {
	case <-b.exited:
		return
	default:
	}
	_ = b.cmd.Process.Kill()
	<-b.exited
}

// waitReady asks the broker for its metadata as the admin user until it
// answers, the JVM exits or timeout passes.
func (b *Broker) waitReady(adminPass string, timeout time.Duration) error {
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(readFile(b.CAFile))
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr),
		kgo.DialTLSConfig(&tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}),
		kgo.SASL(scram.Auth{User: admin, Pass: adminPass}.AsSha512Mechanism()))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-b.exited:
			return fmt.Errorf("the broker exited before it answered (%v); last error: %v", b.err, last)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		m, err := adm.BrokerMetadata(ctx)
		cancel()
		if err == nil && len(m.Brokers) > 0 {
			return nil
		}
		last = err
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("the broker did not answer within %s; last error: %v", timeout, last)
}

// serverProperties is one combined node: clients on SASL_SSL only, the
// controller quorum on its own PLAINTEXT loopback listener (no client
// speaks to it), internal topics with one copy.
func serverProperties(port, cport int, data, keystore, ca, adminPass string) string {
	return fmt.Sprintf(`process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:%[2]d
listeners=SASL_SSL://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d
advertised.listeners=SASL_SSL://127.0.0.1:%[1]d,CONTROLLER://127.0.0.1:%[2]d
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
sasl.enabled.mechanisms=%[6]s
sasl.mechanism.inter.broker.protocol=%[6]s
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="%[7]s" password="%[8]s";
ssl.keystore.type=PEM
ssl.keystore.location=%[4]s
ssl.truststore.type=PEM
ssl.truststore.location=%[5]s
ssl.client.auth=none
log.dirs=%[3]s
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
auto.create.topics.enable=false
num.partitions=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=2
`, port, cport, data, keystore, ca, Mechanism, admin, adminPass)
}

// writeCerts writes a new CA's certificate to caFile and, to keystore, a
// P-256 key (PKCS #8, unencrypted: Kafka's PEM keystore takes it without
// ssl.key.password) with its certificate for 127.0.0.1 and localhost
// signed by that CA.
func writeCerts(t testing.TB, caFile, keystore string) {
	t.Helper()
	now := time.Now()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ca := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: "notify scratch Kafka CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: serial(t), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pkcs8, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	writeFile(t, caFile, string(caPEM))
	writeFile(t, keystore, string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}))+
		string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leafDER}))+string(caPEM))
}

func serial(t testing.TB) *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// clusterID is a cluster id as Kafka's Uuid.randomUuid writes it (16
// random bytes, URL-safe base64 without padding, not starting with "-").
func clusterID(t testing.TB) string {
	for {
		b := make([]byte, 16)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		if id := base64.RawURLEncoding.EncodeToString(b); id[0] != '-' {
			return id
		}
	}
}

// randText is a password of 24 URL-safe characters (nothing the format
// tool's [name=…,password=…] syntax or the JAAS line would need quoted).
func randText(t testing.TB) string {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return strings.NewReplacer("-", "a", "_", "b").Replace(base64.RawURLEncoding.EncodeToString(b))
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func writeFile(t testing.TB, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}

func readFile(path string) []byte {
	b, _ := os.ReadFile(path)
	return b
}

func tail(b []byte, lines int) string {
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}
