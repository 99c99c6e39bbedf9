package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"
)

// deployedCommand is one notify command line of infra/compose.yaml or infra/k8s.
type deployedCommand struct {
	where string
	args  []string
}

// deployedCommands collects the notify containers' command lines: compose services built
// from infra/Dockerfile (command) and Kubernetes containers of image notify (args).
func deployedCommands(t *testing.T) []deployedCommand {
	t.Helper()
	var out []deployedCommand
	b, err := os.ReadFile("../../infra/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Build   any      `json:"build"`
			Command []string `json:"command"`
		} `json:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for name, s := range compose.Services {
		if s.Build != nil {
			out = append(out, deployedCommand{"compose.yaml " + name, s.Command})
		}
	}
	files, _ := filepath.Glob("../../infra/k8s/*.yaml")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, doc := range regexp.MustCompile(`(?m)^---[ \t]*$`).Split(string(b), -1) {
			var v any
			if err := yaml.Unmarshal([]byte(doc), &v); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			walkContainers(v, func(c map[string]any) {
				if c["image"] != "notify" {
					return
				}
				var args []string
				for _, a := range c["args"].([]any) {
					args = append(args, a.(string))
				}
				out = append(out, deployedCommand{filepath.Base(f) + " " + c["name"].(string), args})
			})
		}
	}
	if len(out) < 10 {
		t.Fatalf("found %d notify command lines in compose.yaml and k8s/, want every service of both", len(out))
	}
	return out
}

func walkContainers(v any, f func(map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if cs, ok := e.([]any); ok && k == "containers" {
				for _, c := range cs {
					f(c.(map[string]any))
				}
				continue
			}
			walkContainers(e, f)
		}
	case []any:
		for _, e := range x {
			walkContainers(e, f)
		}
	}
}

// TestDeployedCommandsParse: every command line the deployment files run is one this
// binary accepts — the command and service exist, every flag is defined and its value
// parses — so a renamed flag or a typo fails here, not at `up` / `apply`. Each is run
// with -h appended: flags are parsed, then help stops before anything starts.
func TestDeployedCommandsParse(t *testing.T) {
	// Should a command run after all, it finds no server to touch.
	t.Setenv(envDatabaseURL, "postgres://nobody@127.0.0.1:1/none?sslmode=disable&connect_timeout=1")
	t.Setenv(envKafkaBrokers, "127.0.0.1:1")
	t.Setenv(envDev, "")
	for _, c := range deployedCommands(t) {
		t.Run(strings.ReplaceAll(c.where, " ", "_"), func(t *testing.T) {
			// After the command (and service) name, only flags and their values.
			rest := c.args
			if len(rest) > 0 && rest[0] == "run" {
				rest = rest[1:]
			}
			for i, a := range rest {
				if i > 0 && !strings.HasPrefix(a, "-") && (!strings.HasPrefix(rest[i-1], "-") || strings.Contains(rest[i-1], "=")) {
					t.Fatalf("notify %s: %q is not a flag or a flag's value", strings.Join(c.args, " "), a)
				}
			}
			done := make(chan int, 1)
			var stdout, stderr bytes.Buffer
			args := append(append([]string{}, c.args...), "-h")
			go func() { done <- mainErr(args, &stdout, &stderr) }()
			select {
			case code := <-done:
				if code != 0 {
					t.Errorf("notify %s: exit %d: %s", strings.Join(c.args, " "), code, stderr.String())
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("notify %s -h did not return: an argument is not a flag, so the command ran", strings.Join(c.args, " "))
			}
		})
	}
}
