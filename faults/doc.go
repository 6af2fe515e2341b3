// Package faults holds the fault suite: worker processes, the real broker
// and the Bigtable emulator under SIGKILL, rebalances, a broker crash,
// Bigtable stalls and poison input, each run checked by an oracle. It has
// only tests; see RELIABILITY.md. TESTENV_FAULTS=full runs the long form
// (make faults); the short form runs in make test.
package faults
