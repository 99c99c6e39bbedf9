package main

import (
	"fmt"
	"sort"
	"strings"
)

// registry holds the named entries of one kind — `notify <command>`,
// `notify run <service>`, `notify bench <stage>` — each added from its own
// file's init, so adding one never edits another file.
type registry[T any] struct {
	kind    string // "command", "service", "benchmark": for messages
	entries map[string]T
	summary map[string]string
}

func newRegistry[T any](kind string) *registry[T] {
	return &registry[T]{kind: kind, entries: map[string]T{}, summary: map[string]string{}}
}

// add registers v under name; a second entry of the same name is a
// programming error caught at start.
func (r *registry[T]) add(name, summary string, v T) {
	if _, dup := r.entries[name]; dup {
		panic("duplicate " + r.kind + " " + name)
	}
	r.entries[name], r.summary[name] = v, summary
}

// names returns the entries' names, sorted.
func (r *registry[T]) names() []string {
	names := make([]string, 0, len(r.entries))
	for n := range r.entries {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// pick resolves args[0] to an entry, or explains what the valid names are.
func (r *registry[T]) pick(args []string) (string, T, error) {
	var zero T
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		var b strings.Builder
		for _, n := range r.names() {
			fmt.Fprintf(&b, "\n  %-8s %s", n, r.summary[n])
		}
		return "", zero, usageError{msg: "which " + r.kind + "?" + b.String()}
	}
	v, ok := r.entries[args[0]]
	if !ok {
		return "", zero, usageError{msg: fmt.Sprintf("unknown %s %q; one of: %s", r.kind, args[0], strings.Join(r.names(), ", "))}
	}
	return args[0], v, nil
}
