package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"
)

func init() {
	register(command{name: "probe", summary: "GET a URL; exit 0 on a 2xx answer (container healthchecks)", run: runProbe})
}

// runProbe is `notify probe [--timeout D] URL`: one GET, exit 0 on 2xx and 1 on
// anything else, naming the status or the error. It exists for container healthchecks
// (infra/compose.yaml): the image is distroless, without a shell, curl or wget, so
// the binary itself asks a service's /healthz, /readyz or /metrics.
func runProbe(ctx context.Context, args []string) error {
	fs := newFlagSet("probe", "[--timeout 3s] URL")
	timeout := fs.Duration("timeout", 3*time.Second, "bound on the whole request")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError{msg: "want exactly one URL, e.g. http://127.0.0.1:8080/readyz"}
	}
	if *timeout <= 0 {
		return usageError{msg: fmt.Sprintf("--timeout %s must be positive", *timeout)}
	}
	u, err := url.Parse(fs.Arg(0))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageError{msg: fmt.Sprintf("%q is not an http(s) URL", fs.Arg(0))}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return usageError{msg: err.Error()}
	}
	// No proxy from the environment: a healthcheck asks the container itself.
	client := &http.Client{Transport: &http.Transport{}}
	res, err := client.Do(req)
	if err != nil {
		return exitError{code: 1, msg: err.Error()}
	}
	defer res.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(res.Body, 1<<20))
	if res.StatusCode < 200 || res.StatusCode > 299 {
		return exitError{code: 1, msg: fmt.Sprintf("%s: %s", u.Redacted(), res.Status)}
	}
	return nil
}
