package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestReadmeListsEveryPackage: README's layout table ("Design and layout")
// names every Go package of the module exactly once, in its first column,
// and names no package that does not exist — so a newcomer finds the room
// for a change from the table, and the table cannot silently fall behind.
func TestReadmeListsEveryPackage(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "list", "-f", "{{.Dir}}", "./...")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	want := map[string]bool{}
	for _, dir := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, dir)
		if err != nil {
			t.Fatal(err)
		}
		want[filepath.ToSlash(rel)] = true
	}
	f, err := os.Open(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	named := map[string]int{}
	in := false
	cell := regexp.MustCompile("`([^`]+)`")
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "## ") {
			in = line == "## Design and layout"
			continue
		}
		if !in || !strings.HasPrefix(line, "| `") {
			continue
		}
		first := strings.SplitN(line, "|", 3)[1]
		for _, m := range cell.FindAllStringSubmatch(first, -1) {
			name := m[1]
			if _, err := os.Stat(filepath.Join(root, name)); err != nil {
				t.Errorf("README's layout table names %s, which does not exist", name)
				continue
			}
			// Other rows name folders and files that are not packages
			// (infra/grafana, benchmarks/RESULTS.md): they need only exist.
			if want[name] {
				named[name]++
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for pkg := range want {
		switch n := named[pkg]; {
		case n == 0:
			t.Errorf("README's layout table does not list package %s: add a row under \"Design and layout\"", pkg)
		case n > 1:
			t.Errorf("README's layout table lists package %s %d times", pkg, n)
		}
	}
}
