package benchtest

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/notify-dev/notify/internal/leaktest"
)

// Serve starts a benchmark's server in the child process from arg, the
// value the parent gave StartChild. It returns the one line the parent reads
// back (an address, a URL) and how to stop the server.
type Serve func(arg string) (line string, stop func(), err error)

// Main is the TestMain of a test binary whose benchmarks run their server in
// a child process. When the environment variable env is not empty the
// binary is that child: it starts the server with serve, prints its line,
// serves until its stdin closes (the parent's benchmark ended or the parent
// died), stops the server and exits. Otherwise Main runs the tests and
// benchmarks.
func Main(m *testing.M, env string, serve Serve) {
	arg := os.Getenv(env)
	if arg == "" {
		os.Exit(leaktest.Check(m.Run()))
	}
	line, stop, err := serve(arg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchmark server:", err)
		os.Exit(1)
	}
	fmt.Println(line)
	io.Copy(io.Discard, os.Stdin)
	stop()
	os.Exit(0)
}

// StartChild runs this test binary again as the benchmark server's child
// (see Main), with env set to arg (not empty), and returns the line the
// child printed once its server is up. The child is stopped and waited for
// when b ends.
func StartChild(b testing.TB, env, arg string) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+arg)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { stdin.Close(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		b.Fatalf("benchmark server (child process): %q: %v", line, err)
	}
	return strings.TrimSpace(line)
}
