// Package eventstatus is the one report of what happened to an event: the
// fan-out's progress (LoadFanout: state, notified students, slices, rate,
// ETA), the push accounting (LoadPush: target = delivered + gone + failed +
// cancelled + expired + pending, in total and per platform), both side by side (Load, Report) and the accounting recomputed
// term by term from the tables (Verify). `notify status`, GET
// /v1/events/{id} and the benchmarks read events here; the stages that
// write the rows (fanout, push) do not assemble reports.
//
// The name says whose status it is. Plain "status" already means a push
// outcome (push_deliveries.status, provider.StatusDelivered) and an HTTP
// status throughout this code, and a package of that name is shadowed by
// the first local variable called status.
//
// # Cost, and authorizing first
//
// Every report reads counters, never the audience: LoadFanout the run and
// its ranges, LoadPush at most 48 event_counters rows and 48 per platform
// of event_platform_counters (schema migrations 0006, 0010), which the
// slice worker, the push worker and the subscription triggers keep exact
// in the transactions that write the rows they count. The target is
// counted by each push command when it loads its devices, so while a
// fan-out runs it grows with the push stage, and the report says how many
// notified students still await their push (PushDetail.AwaitingPush).
// So Load costs the same at 10 students and 10 million, and pollers need no
// shared cache. Verify is the one costly call: it recomputes every term from
// the rows (about 2 s of Postgres CPU at a million students) and names each
// counter that differs. LoadOwner is one indexed row (event → course →
// instructor), so a server checks who is asking before it builds a report
// for them.
//
// All SQL is in sql.go.
package eventstatus
