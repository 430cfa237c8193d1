// Command local runs a Bulkhead cluster of real processes on loopback: three
// `bulkhead nats` servers in one JetStream cluster (every stream and bucket
// with three replicas), a redis-server, two edges, one prefill and two
// decode workers (disaggregated serving) and billing, all serving the
// built-in model unless --model says otherwise.
//
//	go run ./deploy/local up      # build, start, wait until both edges serve, print the endpoints
//	go run ./deploy/local status  # each process: role, address, pid, alive
//	go run ./deploy/local down    # SIGTERM everything (each drains), SIGKILL what outlives the grace
//
// up writes the state file (state.json in --dir: each process's name, role,
// address, pid, log file and command line) so that tests and people can
// stop or restart one process; logs go to one file per process under
// --dir/logs. The fault tests (fault_test.go, build tag cluster, `make
// test-cluster`) drive the same code in-process.
//
// It only starts and stops processes; it never reaches into one (every
// check goes through an HTTP endpoint, a log line the process prints, or
// Redis's own protocol), and it signals only pids its state file names
// whose command line is the binary it started.
package main
