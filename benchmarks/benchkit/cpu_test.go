package benchkit

import (
	"net"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"

	"github.com/notify-dev/notify/infra/local/localtest"
)

func TestParseProcStat(t *testing.T) {
	// A command name with spaces and parentheses, as a process may set it.
	line := "4242 (a (b) c) S 7 4242 4242 0 -1 4194560 100 0 0 0 250 50 30 20 20 0 1 0 100 1000 10 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n"
	s, err := ParseProcStat(line)
	if err != nil {
		t.Fatal(err)
	}
	want := ProcStat{PID: 4242, PPID: 7, Self: 3.0, Children: 0.5}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	if s.Total() != 3.5 {
		t.Fatalf("Total %v, want 3.5", s.Total())
	}
	for _, bad := range []string{"", "4242 (x) S 1", "x (y) S 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15", "1 (y) S 1 2 3 4 5 6 7 8 9 10 x 12 13 14 15"} {
		if _, err := ParseProcStat(bad); err == nil {
			t.Errorf("ParseProcStat(%q): no error", bad)
		}
	}
}

func TestListenInodes(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:4A84 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 111 1 0000000000000000 100 0 0 10 0
   1: 0100007F:4A84 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 222 1 0000000000000000 20 4 30 10 -1
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 333 1 0000000000000000 100 0 0 10 0
`
	// 0x4A84 = 19076: the LISTEN socket only, not the connection.
	if got := listenInodes(table, 19076); !slices.Equal(got, []string{"111"}) {
		t.Fatalf("port 19076: %v, want [111]", got)
	}
	if got := listenInodes(table, 8080); !slices.Equal(got, []string{"333"}) {
		t.Fatalf("port 8080: %v, want [333]", got)
	}
	if got := listenInodes(table, 1); len(got) != 0 {
		t.Fatalf("port 1: %v, want none", got)
	}
}

func TestListenerPIDsFindsThisProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		localtest.Missing(t, "reads /proc (Linux only)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	pids, err := ListenerPIDs(l.Addr().(*net.TCPAddr).Port)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(pids, os.Getpid()) {
		t.Fatalf("ListenerPIDs = %v, want it to hold this process %d", pids, os.Getpid())
	}
	// A port nobody listens on any more.
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	if pids, err := ListenerPIDs(port); err == nil {
		t.Fatalf("closed port %d: %v, want an error", port, pids)
	}
}

// A child that burnt CPU and was waited for stays in its parent's tree.
func TestTreeCPUKeepsEndedChildren(t *testing.T) {
	if runtime.GOOS != "linux" {
		localtest.Missing(t, "reads /proc (Linux only)")
	}
	before, err := TreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	child := (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
	// This process keeps running: its own reading first, the tree's after.
	self, err := ReadProcStat(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	after, err := TreeCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	// /proc counts in 10 ms ticks (user and system each rounded down);
	// the child's own time is in µs.
	if after-before < child-0.03 {
		t.Fatalf("tree CPU grew %.2f s across a child that used %.2f s", after-before, child)
	}
	if after < self.Total() {
		t.Fatalf("tree %.2f s < the root's own %.2f s", after, self.Total())
	}
	if _, err := TreeCPU(1 << 30); err == nil {
		t.Fatal("TreeCPU of a pid that does not exist: no error")
	}
}

func TestTreeCPUSumsDescendants(t *testing.T) {
	all := []ProcStat{
		{PID: 1, PPID: 0, Self: 1},
		{PID: 10, PPID: 1, Self: 2, Children: 5}, // the root
		{PID: 11, PPID: 10, Self: 3},
		{PID: 12, PPID: 11, Self: 4, Children: 1},
		{PID: 20, PPID: 1, Self: 100}, // not in the tree
	}
	got, err := treeCPU(all, 10)
	if err != nil || got != 15 {
		t.Fatalf("treeCPU = %v, %v; want 15", got, err)
	}
}
