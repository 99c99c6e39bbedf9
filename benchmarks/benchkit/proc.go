package benchkit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Proc is one child process of a benchmark — a notify service started
// from the benchmark's own binary — logging to a file of its own.
type Proc struct {
	// Name is the service's name in messages and its log file's.
	Name string
	// LogPath is the file its stdout and stderr go to.
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	cpu     float64 // CPU seconds, read just before it was stopped
}

// StartProc starts `bin args…` with env added to ours, logging to
// dir/name.log.
func StartProc(bin, dir, name string, env []string, args ...string) (*Proc, error) {
	logPath := filepath.Join(dir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("log file for %s: %w", name, err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own session (so its own process group): a Ctrl-C in the terminal
		// reaches only us, and we stop the children in order instead of all
		// at once. A session is also what the scheduler groups CPU time by
		// when sched_autogroup is on (the default of many kernels, this
		// machine's too): every service gets its own share, as systemd or
		// Kubernetes give each service its own cgroup, instead of all of
		// them and the benchmark's own pollers competing inside one group.
		// In one group a status poll waited behind the push worker's
		// threads: SELECT 1 p99 28-41 ms while the fan-out ran, against
		// 3-14 ms from a session of its own (benchmarks/RESULTS.md).
		Setsid: true,
		// Never outlive the benchmark, also when it is killed.
		Pdeathsig: syscall.SIGKILL,
	}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Proc{Name: name, cmd: cmd, LogPath: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		f.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Exited reports whether the process has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// CPUSeconds is the process's user + system CPU time: so far while it
// runs (from /proc), over its whole life once it has ended.
func (p *Proc) CPUSeconds() float64 {
	if p.Exited() {
		if ps := p.cmd.ProcessState; ps != nil {
			return (ps.UserTime() + ps.SystemTime()).Seconds()
		}
		return p.cpu
	}
	s, err := ReadProcStat(p.cmd.Process.Pid)
	if err != nil {
		return p.cpu
	}
	return s.Self
}

// Stop sends SIGTERM, waits up to grace, then kills. Stopping an ended
// process returns how it ended.
func (p *Proc) Stop(grace time.Duration) error {
	if p.Exited() {
		return p.err
	}
	p.cpu = p.CPUSeconds()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("%s did not stop within %s; killed", p.Name, grace)
	}
	var ee *exec.ExitError
	if errors.As(p.err, &ee) && ee.ExitCode() == -1 {
		return nil // ended by our signal
	}
	return p.err
}

// LogTail returns the last n lines of the process's log, for error
// messages.
func (p *Proc) LogTail(n int) string {
	b, _ := os.ReadFile(p.LogPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// ExitedError is the error for a process that ended while it was needed,
// with its log's last lines; nil while every one of procs runs.
func ExitedError(procs []*Proc, while string) error {
	for _, p := range procs {
		if p.Exited() {
			return fmt.Errorf("%s exited %s (log %s):\n%s", p.Name, while, p.LogPath, p.LogTail(15))
		}
	}
	return nil
}

// WaitFor polls cond every 100 ms until it is true, timeout passes, ctx
// ends, or one of procs exits (which is always a failure while starting).
func WaitFor(ctx context.Context, what string, timeout time.Duration, procs []*Proc, cond func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if err := ExitedError(procs, "while waiting for "+what); err != nil {
			return err
		}
		ok, err := cond(ctx)
		if ok {
			return nil
		}
		if err != nil {
			last = err
		}
		select {
		case <-ctx.Done():
			if last != nil {
				return fmt.Errorf("timed out waiting for %s: %w", what, last)
			}
			return fmt.Errorf("timed out waiting for %s", what)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
