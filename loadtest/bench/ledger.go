package bench

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"

	"cloud.google.com/go/bigtable"

	"github.com/cellttl/cellttl/erasure"
	"github.com/cellttl/cellttl/testkit/lab"
)

// LedgerOptions are the options of the ledger bench (loadtest ledger).
type LedgerOptions struct {
	Brokers     []string
	TenantsFile string
	// Erasures is how many users the ledger holds; InForce of them expire
	// after now (recorded within the last RecordLife), Forever never do;
	// the rest expired, recorded over the three years before.
	Erasures, InForce, Forever int
	// Tenants is how many tenants the users belong to.
	Tenants int
	// RecordLife is how long a record lives (the input topic's keep and
	// the tenants' TTLs: days).
	RecordLife time.Duration
	// Baseline is a build of the worker from before the expiry index,
	// measured on the same ledger.
	Baseline string
	// Idle is how long each worker is watched once ready, with no event.
	Idle time.Duration
	// ReadyTimeout is how long a worker may take to be ready: one that is
	// not is reported so, and watched as long anyway.
	ReadyTimeout time.Duration
}

// ledgerRun is one worker measured on a ledger.
type ledgerRun struct {
	build, ledger string
	ready         time.Duration // from the process's start to /readyz answering 200; 0: not ready
	startCPU      time.Duration // its CPU until then
	idleCPU       time.Duration // its CPU over the idle window
	rss, peak     int64         // resident set at the end of the window, and its peak
	users         int           // erased users in force, as /status says
	exited        string        // how it exited before the end, if it did
	exitedAfter   time.Duration
	load          string // the machine's load average when it started (others' work slows the emulator)
}

// RunLedger fills a ledger table with o.Erasures erased users, as three
// years of erasures leave it (the expired ones still there: Bigtable's GC
// is lazy, and the emulator's runs on no rule), then starts each build of
// the worker on it and on an empty ledger, and measures its time to ready,
// resident set and CPU while idle: the cost of the ledger, as the
// difference with the empty one.
func RunLedger(ctx context.Context, o LedgerOptions, stdout io.Writer) error {
	if o.InForce+o.Forever > o.Erasures {
		return fmt.Errorf("--in-force %d + --forever %d: more than --erasures %d", o.InForce, o.Forever, o.Erasures)
	}
	bin, remove, err := buildWorker(ctx)
	if err != nil {
		return err
	}
	defer remove()
	ac, err := bigtable.NewAdminClient(ctx, "local", "local")
	if err != nil {
		return err
	}
	defer ac.Close()
	dc, err := bigtable.NewClient(ctx, "local", "local")
	if err != nil {
		return err
	}
	defer dc.Close()
	run := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	ledger := "ledger-bench-" + run
	// The family without a GC rule: the emulator's GC would delete the
	// expired records (Bigtable's takes up to a week), and take the
	// table's lock each second to look at every row.
	if err := ac.CreateTableFromConf(ctx, &bigtable.TableConf{TableID: ledger, ColumnFamilies: map[string]bigtable.Family{erasure.Family: {}}}); err != nil {
		return fmt.Errorf("create %s: %w", ledger, err)
	}
	defer func() { _ = ac.DeleteTable(context.WithoutCancel(ctx), ledger) }()
	now := time.Now().UTC().Truncate(time.Millisecond)
	start := time.Now()
	if err := fillLedger(ctx, dc.Open(ledger), o, now); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "ledger %s: %d erased users of %d tenants (%d expired, %d in force, %d never expiring), written in %s\n",
		ledger, o.Erasures, o.Tenants, o.Erasures-o.InForce-o.Forever, o.InForce, o.Forever, time.Since(start).Round(time.Second))
	// What worker setup does once on a ledger of the release before.
	start, cpu0 := time.Now(), lab.SelfCPU()
	n, _, err := erasure.NewStore(dc, ledger).Index(ctx, time.Now())
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "worker setup's index of it: %d records in force indexed in %s (%s of its CPU)\n\n", n, time.Since(start).Round(100*time.Millisecond),
		(lab.SelfCPU() - cpu0).Round(10*time.Millisecond))

	builds := []struct{ name, bin string }{{"this build", bin}}
	if o.Baseline != "" {
		builds = append(builds, struct{ name, bin string }{"baseline", o.Baseline})
	}
	var runs []ledgerRun
	ledgerHeader(stdout, o)
	for _, b := range builds {
		for _, l := range []string{"", ledger} {
			r, err := measureLedgerWorker(ctx, b.bin, o, l, run)
			if err != nil {
				return fmt.Errorf("%s on %s: %w", b.name, map[bool]string{true: "an empty ledger", false: ledger}[l == ""], err)
			}
			r.build = b.name
			ledgerRow(stdout, r, o)
			runs = append(runs, r)
		}
	}
	fmt.Fprintln(stdout)
	for i := 0; i+1 < len(runs); i += 2 {
		ledgerCost(stdout, runs[i], runs[i+1], o)
	}
	return nil
}

// fillLedger writes the records of o, as forget writes them (record and
// journal rows; index rows are worker setup's, as for a ledger of the
// release before).
func fillLedger(ctx context.Context, tbl *bigtable.Table, o LedgerOptions, now time.Time) error {
	const years = 3 * 365 * 24 * time.Hour
	expired := o.Erasures - o.InForce - o.Forever
	// Ten users per forget: they share its mark, as the ledger holds it.
	var mark *erasure.Mark
	var keys []string
	var muts []*bigtable.Mutation
	for i := range o.Erasures {
		var recorded, expires time.Time
		// share is how far along its group a record is, from 0 to 1.
		at := func(from time.Time, span time.Duration, share float64) time.Time {
			return from.Add(time.Duration(float64(span) * share))
		}
		switch {
		case i < expired: // over three years, gone a record's life later
			recorded = at(now.Add(-years), years-2*o.RecordLife, float64(i)/float64(expired))
			expires = recorded.Add(o.RecordLife)
		case i < expired+o.InForce: // over the last record's life
			recorded = at(now.Add(-o.RecordLife), o.RecordLife, float64(i-expired+1)/float64(o.InForce+1))
			expires = recorded.Add(o.RecordLife)
		default: // over three years, never expiring
			recorded = at(now.Add(-years), years, float64(i-expired-o.InForce)/float64(o.Forever))
		}
		if i%10 == 0 {
			ends := make([]int64, 12)
			for p := range ends {
				ends[p] = int64(i) * 100
			}
			mark = &erasure.Mark{Topic: "clicks", Ends: ends}
		}
		r := erasure.Erasure{Tenant: fmt.Sprintf("tenant-%04d", i%o.Tenants), User: fmt.Sprintf("user-%09d", i), UpTo: recorded.Add(5 * time.Minute),
			Below: mark, RecordedAt: recorded, Expires: expires, RequestedBy: "DPO-" + strconv.Itoa(i/10)}
		k, m, err := erasure.Rows(r, recorded)
		if err != nil {
			return err
		}
		keys, muts = append(keys, k[:2]...), append(muts, m[:2]...)
		if len(keys) >= 2000 || i == o.Erasures-1 {
			errs, err := tbl.ApplyBulk(ctx, keys, muts)
			if err == nil && errs != nil {
				err = errs[0]
			}
			if err != nil {
				return fmt.Errorf("fill the ledger: %w", err)
			}
			keys, muts = keys[:0], muts[:0]
		}
	}
	return nil
}

// measureLedgerWorker starts a worker on ledger ("": an empty one, made by
// worker setup), waits until it is ready, watches it idle for o.Idle, and
// stops it. CPU to ready is counted when it is ready, or once it has not
// been for o.ReadyTimeout; a worker that exits meanwhile (its
// --startup-timeout) is reported with its CPU until then.
func measureLedgerWorker(ctx context.Context, bin string, o LedgerOptions, ledger, run string) (ledgerRun, error) {
	topic := fmt.Sprintf("ledger-bench-%s-%d", run, time.Now().UnixNano()%1e6)
	if err := lab.CreateTopic(ctx, o.Brokers, topic, 1, nil); err != nil {
		return ledgerRun{}, err
	}
	flags := ""
	if ledger != "" {
		flags = "--erasure-table " + ledger
	}
	w, err := startWorker(ctx, bin, o.Brokers, o.TenantsFile, topic, flags)
	if err != nil {
		return ledgerRun{}, err
	}
	defer w.stop(ctx)
	pid := w.Pid()
	r := ledgerRun{ledger: ledger, load: loadAverage()}
	if r.ledger == "" {
		r.ledger = "empty"
	}
	// gone reports whether the worker has exited, with its CPU until then.
	gone := func() bool {
		st := w.State()
		if st == nil {
			return false
		}
		r.exited, r.startCPU = st.String(), st.UserTime()+st.SystemTime()
		r.exitedAfter = time.Since(w.Started)
		return true
	}
	for time.Since(w.Started) < o.ReadyTimeout && r.ready == 0 {
		if gone() {
			return r, nil
		}
		if w.Ready(ctx) {
			r.ready = time.Since(w.Started)
		}
		if err := sleep(ctx, 20*time.Millisecond); err != nil {
			return r, err
		}
	}
	if r.startCPU, err = lab.CPU(pid); err != nil {
		if gone() {
			return r, nil
		}
		return r, err
	}
	if err := sleep(ctx, o.Idle); err != nil {
		return r, err
	}
	if gone() {
		return r, nil
	}
	cpu, err := lab.CPU(pid)
	if err != nil {
		return r, err
	}
	r.idleCPU = cpu - r.startCPU
	r.rss, r.peak, _, _ = lab.Memory(pid)
	if st, err := w.Status(ctx); err == nil {
		r.users = st.ErasedUsers
	}
	return r, nil
}

// loadAverage is the machine's load average over the last minute, as
// /proc/loadavg writes it.
func loadAverage() string {
	l, err := lab.LoadAverage()
	if err != nil {
		return "?"
	}
	return fmt.Sprintf("%.2f", l)
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ledgerHeader is the head of the table of runs.
func ledgerHeader(w io.Writer, o LedgerOptions) {
	fmt.Fprintf(w, "| build | ledger | erased users in force | ready | CPU to ready | RSS after %s idle (peak) | idle CPU | load average at start |\n|---|---|---|---|---|---|---|---|\n", o.Idle)
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

// ledgerRow prints one run.
func ledgerRow(w io.Writer, r ledgerRun, o LedgerOptions) {
	switch {
	case r.exited != "":
		fmt.Fprintf(w, "| %s | %s | - | exited after %s (%s), never ready | %s | - | - | %s |\n", r.build, r.ledger, r.exitedAfter.Round(time.Second), r.exited,
			r.startCPU.Round(10*time.Millisecond), r.load)
		return
	}
	ready := r.ready.Round(10 * time.Millisecond).String()
	if r.ready == 0 {
		ready = "not ready after " + o.ReadyTimeout.String()
	}
	fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s (%s) | %.2f%% of a core | %s |\n", r.build, r.ledger, r.users, ready,
		r.startCPU.Round(10*time.Millisecond), mib(r.rss), mib(r.peak), 100*r.idleCPU.Seconds()/o.Idle.Seconds(), r.load)
}

// ledgerCost prints what the ledger costs a build: the difference of its
// run on the ledger with its run on the empty one.
func ledgerCost(w io.Writer, empty, full ledgerRun, o LedgerOptions) {
	if full.exited != "" || full.ready == 0 {
		fmt.Fprintf(w, "%s: never ready on the ledger\n", full.build)
		return
	}
	// This build reads the records in force again every RereadEvery: as
	// its start-up read, which the idle window does not hold.
	reread := ""
	if full.build == "this build" {
		extra := max(0, full.startCPU-empty.startCPU)
		reread = fmt.Sprintf(", + %.3f%% for the read of the records in force every %s (%s of CPU, as at start)", 100*extra.Seconds()/erasure.RereadEvery.Seconds(),
			erasure.RereadEvery, extra.Round(10*time.Millisecond))
	}
	fmt.Fprintf(w, "%s: the ledger costs %s of RSS (%s at the peak), %s to ready, %.2f%% of a core idle%s\n", full.build,
		mib(full.rss-empty.rss), mib(full.peak-empty.peak), (full.ready - empty.ready).Round(10*time.Millisecond),
		100*(full.idleCPU-empty.idleCPU).Seconds()/o.Idle.Seconds(), reread)
}
