// Package pipeline runs the whole notify pipeline on one machine — every
// service as its own process of the notify binary — publishes one material
// and measures each stage until the last push outcome is recorded. It backs
// `notify demo` (live progress) and `notify bench e2e` (the measured run).
//
// A run owns its database (seeded once per size and reused; run tables are
// truncated), a fresh topic prefix and replication slot, and its child
// processes (benchkit); it cleans up all three when it ends.
package pipeline
