// Package local runs a Bulkhead cluster of real processes on loopback, and
// is the one harness every multi-process test starts its processes with.
//
// Up starts the standard cluster: three `bulkhead nats` servers in one
// JetStream cluster (every stream and bucket with three replicas), a
// redis-server, two edges, one prefill and two decode workers
// (disaggregated serving) and billing, all serving the built-in model
// unless Config.Model says otherwise. Config.Bare starts one NATS server,
// Redis and the workers only, for tests that add their own edges (Edge)
// and nodes (Start); New starts nothing, for a test's own processes.
//
// The command (cmd/local) drives it:
//
//	go run ./deploy/local/cmd/local up      # build, start, wait until both edges serve, print the endpoints
//	go run ./deploy/local/cmd/local status  # each process: role, address, pid, alive
//	go run ./deploy/local/cmd/local down    # SIGTERM everything (each drains), SIGKILL what outlives the grace
//
// Every start writes the state file (state.json in Config.Dir: each
// process's name, role, address, pid, log file and command line) so that
// tests and people can stop or restart one process; each process's output
// goes to its own file under Dir/logs. The fault tests (fault_test.go,
// build tag cluster, `make test-cluster`) and cmd/bulkhead's cluster tests
// drive it in-process.
//
// It only starts and stops processes; it never reaches into one (every
// check goes through an HTTP endpoint, a log line the process prints, or
// Redis's own protocol), and it signals only pids its state file names
// whose command line is the binary it started.
package local
