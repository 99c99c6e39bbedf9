// Package benchtest is what the push clients' benchmarks (h2, fcm, apns,
// webpush) share: the server they send to running in a child process, so
// the benchmark process's CPU is the client's alone, and that CPU time
// reported per operation.
//
// It imports nothing of notify, so the clients' in-package tests can use it
// without an import cycle.
package benchtest
