package benchkit

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// userHZ is the clock tick of /proc's CPU fields: 100 on every Linux this
// runs on (sysconf(_SC_CLK_TCK)).
const userHZ = 100

// ProcStat is what /proc/<pid>/stat says about one process's CPU time.
type ProcStat struct {
	PID, PPID int
	// Self is its own user + system CPU seconds (every thread).
	Self float64
	// Children is the user + system CPU seconds of its children that
	// ended and that it waited for (cutime + cstime): a server that forks
	// a process per connection, as Postgres does, keeps the CPU of its
	// ended backends here.
	Children float64
}

// Total is Self + Children.
func (s ProcStat) Total() float64 { return s.Self + s.Children }

// ReadProcStat reads /proc/<pid>/stat.
func ReadProcStat(pid int) (ProcStat, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return ProcStat{}, err
	}
	return ParseProcStat(string(b))
}

// ParseProcStat parses one /proc/<pid>/stat line. The command name is in
// parentheses and may itself hold spaces and parentheses, so the fields
// are counted from the last ')'.
func ParseProcStat(line string) (ProcStat, error) {
	open := strings.IndexByte(line, '(')
	i := strings.LastIndexByte(line, ')')
	if open < 1 || i < open {
		return ProcStat{}, fmt.Errorf("proc stat %q: no (command)", line)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(line[:open]))
	if err != nil {
		return ProcStat{}, fmt.Errorf("proc stat %q: pid: %w", line, err)
	}
	// Fields after the name, from field 3 (state): ppid is field 4,
	// utime, stime, cutime, cstime fields 14–17 (proc(5)).
	f := strings.Fields(line[i+1:])
	if len(f) < 15 {
		return ProcStat{}, fmt.Errorf("proc stat of %d: %d fields after the name, want ≥ 15", pid, len(f))
	}
	var n [5]float64
	for k, idx := range []int{1, 11, 12, 13, 14} {
		if n[k], err = strconv.ParseFloat(f[idx], 64); err != nil {
			return ProcStat{}, fmt.Errorf("proc stat of %d: field %d: %w", pid, idx+3, err)
		}
	}
	return ProcStat{PID: pid, PPID: int(n[0]), Self: (n[1] + n[2]) / userHZ, Children: (n[3] + n[4]) / userHZ}, nil
}

// allProcStats reads every process's stat; processes that end while it
// reads are skipped.
func allProcStats() ([]ProcStat, error) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []ProcStat
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		if s, err := ReadProcStat(pid); err == nil {
			out = append(out, s)
		}
	}
	return out, nil
}

// TreeCPU is the CPU seconds the process root and all its descendants
// have used: Self + Children of root and of every live descendant. A
// descendant that ended counts through its parent's Children once the
// parent has waited for it (Postgres' postmaster reaps its backends at
// once), so a per-connection server's CPU is complete, also for the
// connections that came and went between two readings.
func TreeCPU(root int) (float64, error) {
	all, err := allProcStats()
	if err != nil {
		return 0, err
	}
	return treeCPU(all, root)
}

func treeCPU(all []ProcStat, root int) (float64, error) {
	kids := map[int][]int{}
	byPID := map[int]ProcStat{}
	for _, s := range all {
		kids[s.PPID] = append(kids[s.PPID], s.PID)
		byPID[s.PID] = s
	}
	if _, ok := byPID[root]; !ok {
		return 0, fmt.Errorf("process %d not found", root)
	}
	var sum float64
	stack := []int{root}
	for len(stack) > 0 {
		p := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		sum += byPID[p].Total()
		stack = append(stack, kids[p]...)
	}
	return sum, nil
}

// ListenerPIDs returns the processes holding a listening TCP socket on
// port (IPv4 or IPv6, any address): the way to find a local server —
// Kafka, Postgres — among several of the same kind on one machine. It
// needs to read other processes' /proc/<pid>/fd (same user, or root);
// none found is an error.
func ListenerPIDs(port int) ([]int, error) {
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, ino := range listenInodes(string(b), port) {
			inodes[ino] = true
		}
	}
	if len(inodes) == 0 {
		return nil, fmt.Errorf("nothing listens on TCP port %d here", port)
	}
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		fds, err := os.ReadDir(filepath.Join("/proc", d.Name(), "fd"))
		if err != nil {
			continue
		}
		for _, fd := range fds {
			l, err := os.Readlink(filepath.Join("/proc", d.Name(), "fd", fd.Name()))
			if err == nil && strings.HasPrefix(l, "socket:[") && inodes[strings.TrimSuffix(l[len("socket:["):], "]")] {
				pids = append(pids, pid)
				break
			}
		}
	}
	if len(pids) == 0 {
		return nil, errors.New("port " + strconv.Itoa(port) + " is listened on, but by no process this one may inspect")
	}
	return pids, nil
}

// listenInodes returns the socket inodes of the LISTEN sockets on port in
// a /proc/net/tcp{,6} table.
func listenInodes(table string, port int) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(table))
	sc.Scan() // header
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode
		if len(f) < 10 || f[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
			out = append(out, f[9])
		}
	}
	return out
}
