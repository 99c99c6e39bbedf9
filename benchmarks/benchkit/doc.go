// Package benchkit is what every benchmark under benchmarks/ shares: a
// database of its own on the shared server (Database), child processes of
// the notify binary (Proc, WaitFor), the mock push service as such a
// process with its /stats (Mock), random name suffixes (Suffix), free
// ports and machine CPU (FreePort, MachineCPU) and the --json result file
// (WriteJSON). Progress lines are services/progress, which `notify seed`
// shares with the benchmarks.
//
// The benchmarks themselves are one package per stage, each with a Config,
// a Result whose JSON names are the benchmark's contract, Run and Print:
// benchmarks/publishbench (the publish API), benchmarks/cdcbench (the
// connector), benchmarks/fanoutbench (the fan-out against raw SQL),
// benchmarks/pushbench (the Web Push sender) and benchmarks/pipeline (end
// to end, also behind `notify demo`). services/notify only parses flags
// into a Config and prints. One package per stage keeps each stage's
// dependencies (the API, the connector, the sender) out of the others and
// lets each have tests beside it.
package benchkit
