package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/notify-dev/notify/services/push/webpush"
	"github.com/notify-dev/notify/services/pushmock"
	"github.com/notify-dev/notify/services/seed"
)

// buildNotify builds the notify binary into dir for process tests.
func buildNotify(t *testing.T, dir string) string {
	t.Helper()
	bin := filepath.Join(dir, "notify")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startMockProcess runs `notify run pushmock` on a free port and returns
// its URL and certificate file; the process is stopped with SIGTERM at
// cleanup.
func startPushmockProcess(t *testing.T, bin string, args ...string) (url, certFile string) {
	t.Helper()
	certFile = filepath.Join(t.TempDir(), "cert.pem")
	cmd := exec.Command(bin, append([]string{"run", "pushmock", "--addr", "127.0.0.1:0", "--cert-file", certFile, "--latency", "0"}, args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	urlc := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line struct{ Msg, URL string }
			if json.Unmarshal(sc.Bytes(), &line) == nil && line.Msg == "push mock listening" {
				urlc <- line.URL
			}
		}
		exited <- cmd.Wait()
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-exited:
			if err != nil {
				t.Errorf("pushmock exited with %v after SIGTERM", err)
			}
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			t.Error("pushmock did not stop on SIGTERM")
		}
	})
	select {
	case url = <-urlc:
	case err := <-exited:
		t.Fatalf("pushmock exited: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("pushmock did not start")
	}
	return url, certFile
}

type cliResult struct {
	code           int
	stdout, stderr string
}

// runNotify runs the binary with the caller's environment in dev mode (the
// mock is on loopback, signed with the dev key).
func runNotify(t *testing.T, bin string, args ...string) cliResult {
	t.Helper()
	return runCLI(t, bin, "", nil, []string{envDev + "=1"}, args...)
}

// runCLI runs the binary as a process, in dir unless it is empty, with the
// caller's environment minus the variables drop refuses (nil drops none),
// then env; a non-zero exit is a result, failing to run is fatal.
func runCLI(t *testing.T, bin, dir string, drop func(kv string) bool, env []string, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if drop == nil || !drop(kv) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return cliResult{code: code, stdout: out.String(), stderr: errb.String()}
}

func seededKeys(t *testing.T, seedV, id int64) (p256dh, auth string) {
	t.Helper()
	k, err := seed.DeriveSubscriptionKeys(seedV, id)
	if err != nil {
		t.Fatal(err)
	}
	return webpush.EncodeBase64URL(k.P256DH()), webpush.EncodeBase64URL(k.Auth[:])
}

// TestWebpushCLI runs `notify webpush send` and `notify vapid generate` as
// processes, against `notify run pushmock` as another process.
func TestWebpushCLI(t *testing.T) {
	t.Parallel()
	bin := buildNotify(t, t.TempDir())
	t.Run("send", func(t *testing.T) { t.Parallel(); testWebpushSend(t, bin) })
	t.Run("vapid generate", func(t *testing.T) { t.Parallel(); testVAPIDGenerate(t, bin) })
}

func testWebpushSend(t *testing.T, bin string) {
	const goneFraction = 0.5
	url, certFile := startPushmockProcess(t, bin, "--decrypt-sample", "1", "--seed", "3", "--gone-fraction", strconv.FormatFloat(goneFraction, 'f', -1, 64))
	var okID, goneID int64
	for id := int64(1); okID == 0 || goneID == 0; id++ {
		if pushmock.GoneID(id, goneFraction) {
			goneID = id
		} else {
			okID = id
		}
	}
	send := func(id int64, extra ...string) cliResult {
		p, a := seededKeys(t, 3, id)
		args := append([]string{"webpush", "send", "--endpoint", url + "/wpush/" + strconv.FormatInt(id, 10),
			"--p256dh", p, "--auth", a, "--payload", `{"title":"New material","url":"/c/1"}`}, extra...)
		return runNotify(t, bin, args...)
	}

	r := send(okID, "--ca", certFile, "--ttl", "60", "--urgency", "high", "--topic", "course-1")
	if r.code != 0 || !strings.Contains(r.stdout, "outcome   delivered") || !strings.Contains(r.stdout, "status    201") {
		t.Fatalf("delivered: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, "DEV VAPID key") {
		t.Errorf("no warning about the dev VAPID key: %s", r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, "/wpush/") {
		t.Errorf("the endpoint was printed: %s %s", r.stdout, r.stderr)
	}

	r = send(goneID, "--ca", certFile)
	if r.code != exitGone || !strings.Contains(r.stdout, "outcome   gone") || !strings.Contains(r.stderr, "delete it") {
		t.Fatalf("gone: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}

	r = send(okID) // the mock's certificate is not trusted
	if r.code != exitRetryable || !strings.Contains(r.stderr, "--ca") {
		t.Fatalf("untrusted: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}

	r = send(okID, "--ca", certFile, "--payload", "not json")
	if r.code != 2 || !strings.Contains(r.stderr, "JSON") {
		t.Fatalf("bad payload: exit %d, stderr %s", r.code, r.stderr)
	}

	// The mock decrypted what it received with the re-derived keys.
	st := mockStats(t, url, certFile)
	if st.Decrypted != 1 || st.DecryptFailures != 0 || st.VAPIDFailures != 0 || st.ByStatus["201"] != 1 || st.ByStatus["410"] != 1 {
		t.Fatalf("mock stats %+v", st)
	}
}

func testVAPIDGenerate(t *testing.T, bin string) {
	r := runNotify(t, bin, "vapid", "generate", "--json")
	var keys struct {
		Public  string `json:"public_key"`
		Private string `json:"private_key"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &keys); err != nil || r.code != 0 {
		t.Fatalf("exit %d, %q: %v", r.code, r.stdout, err)
	}
	k, err := webpush.ParseVAPIDKey(keys.Private)
	if err != nil || k.PublicKey() != keys.Public {
		t.Fatalf("generated pair does not match: %v", err)
	}
	r = runNotify(t, bin, "vapid", "generate")
	if r.code != 0 || !strings.Contains(r.stdout, envVAPIDPrivateKey+"=") {
		t.Fatalf("exit %d, %q", r.code, r.stdout)
	}
}
