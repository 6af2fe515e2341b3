// Package report writes a load test's Markdown report, its figures and
// verification, and a chart of the produced and written rates and the
// consumer lag over the run.
package report

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cellttl/cellttl/loadtest/drive"
	"github.com/cellttl/cellttl/loadtest/verify"
)

// Run is what the report tells of a run.
type Run struct {
	Dir      string // where report.md and chart.svg go
	Embedded bool   // in-process Kafka and emulator, a worker process
	Load     *drive.Options
	Result   *drive.Result
	Check    *verify.Result // nil when not verified
}

// Write writes report.md and chart.svg and returns the report's path.
func Write(r Run) (string, error) {
	if err := os.MkdirAll(r.Dir, 0o755); err != nil {
		return "", fmt.Errorf("report dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(r.Dir, "chart.svg"), []byte(chart(r.Result.Samples)), 0o644); err != nil {
		return "", err
	}
	path := filepath.Join(r.Dir, "report.md")
	return path, os.WriteFile(path, []byte(markdown(r)), 0o644)
}

func markdown(r Run) string {
	var b strings.Builder
	o, res := r.Load, r.Result
	fmt.Fprintf(&b, "# Load test %s\n\n", res.RunID)
	fmt.Fprintf(&b, "Command: `go run ./loadtest %s`\n\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "Date: %s. Mode: %s. Tenants: %s. Users: %d (Zipf %.2f). Payload: %d bytes. Malformed: %.1f%%. Target rate: %s.\n\n",
		time.Now().UTC().Format(time.RFC3339), map[bool]string{true: "embedded (kfake, bttest, worker process)", false: "external worker"}[r.Embedded],
		strings.Join(o.Mix.Tenants(), ", "), o.Users, o.ZipfS, o.PayloadBytes, o.Malformed*100, drive.RateText(o.Rate))
	var peakP, peakW float64
	var maxLag int64
	firstWrite, lastWrite := time.Duration(-1), time.Duration(0)
	var lastSample drive.Sample
	for _, s := range res.Samples {
		peakP, peakW = math.Max(peakP, s.ProducedRate), math.Max(peakW, s.WrittenRate)
		maxLag = max(maxLag, s.Lag)
		if s.Written > 0 && firstWrite < 0 {
			firstWrite = s.At - time.Second
		}
		if s.Written > lastSample.Written {
			lastWrite = s.At
		}
		lastSample = s
	}
	prodSecs := 0.0
	for _, s := range res.Samples {
		if s.Produced < res.Produced {
			prodSecs = s.At.Seconds() + 1
		}
	}
	b.WriteString("| figure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| events produced | %d (%d malformed) |\n", res.Produced, res.Invalid)
	fmt.Fprintf(&b, "| written / dead-lettered (worker counters) | %d / %d |\n", lastSample.Written, lastSample.Dead)
	if prodSecs > 0 {
		fmt.Fprintf(&b, "| mean produce rate | %.0f events/s |\n", float64(res.Produced)/prodSecs)
	}
	if firstWrite >= 0 && lastWrite > firstWrite {
		fmt.Fprintf(&b, "| mean write rate (first to last write) | %.0f events/s |\n", float64(lastSample.Written)/(lastWrite-firstWrite).Seconds())
	}
	fmt.Fprintf(&b, "| peak produce / write rate (1s) | %.0f / %.0f events/s |\n", peakP, peakW)
	fmt.Fprintf(&b, "| max consumer lag | %d |\n", maxLag)
	fmt.Fprintf(&b, "| wall time | %s |\n", res.Elapsed.Round(time.Second))
	if c := r.Check; c != nil && len(c.Latencies) > 0 {
		fmt.Fprintf(&b, "| produce → Bigtable ack (from written_at) p50 / p99 / max | %s / %s / %s |\n",
			percentile(c.Latencies, 0.50).Round(time.Millisecond), percentile(c.Latencies, 0.99).Round(time.Millisecond), c.Latencies[len(c.Latencies)-1].Round(time.Millisecond))
	}
	b.WriteString("\n![produced rate, written rate and lag](chart.svg)\n\n")
	if r.Check != nil {
		b.WriteString("## Verification\n\n```\n" + r.Check.Summary() + "```\n")
	}
	return b.String()
}

// chart draws produced and written rates (left axis) and consumer lag
// (right axis) over time.
func chart(samples []drive.Sample) string {
	const w, h, ml, mr, mt, mb = 900.0, 360.0, 70.0, 70.0, 30.0, 40.0
	pw, ph := w-ml-mr, h-mt-mb
	var maxT, maxR float64
	var maxL int64
	for _, s := range samples {
		maxT = math.Max(maxT, s.At.Seconds())
		maxR = math.Max(maxR, math.Max(s.ProducedRate, s.WrittenRate))
		maxL = max(maxL, s.Lag)
	}
	maxT, maxR = math.Max(maxT, 1), niceCeil(math.Max(maxR, 1))
	lagTop := niceCeil(math.Max(float64(maxL), 1))
	x := func(t float64) float64 { return ml + t/maxT*pw }
	yR := func(v float64) float64 { return mt + ph - v/maxR*ph }
	yL := func(v float64) float64 { return mt + ph - v/lagTop*ph }
	line := func(color string, f func(s drive.Sample) float64, y func(float64) float64, dash string) string {
		var pts []string
		for _, s := range samples {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.At.Seconds()), y(f(s))))
		}
		return fmt.Sprintf(`<polyline fill="none" stroke="%s" stroke-width="2" %s points="%s"/>`, color, dash, strings.Join(pts, " "))
	}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" font-family="sans-serif" font-size="12">`, w, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`)
	for i := 0; i <= 4; i++ {
		v := maxR * float64(i) / 4
		y := yR(v)
		fmt.Fprintf(&b, `<line x1="%.0f" x2="%.0f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`, ml, ml+pw, y, y)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" text-anchor="end">%s</text>`, ml-6, y+4, human(v))
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f">%s</text>`, ml+pw+6, y+4, human(lagTop*float64(i)/4))
	}
	for i := 0; i <= 5; i++ {
		t := maxT * float64(i) / 5
		fmt.Fprintf(&b, `<text x="%.1f" y="%.0f" text-anchor="middle">%ds</text>`, x(t), mt+ph+18, int(t))
	}
	fmt.Fprintf(&b, `<text x="14" y="%.0f" transform="rotate(-90 14 %.0f)" text-anchor="middle">events/s</text>`, mt+ph/2, mt+ph/2)
	fmt.Fprintf(&b, `<text x="%.0f" y="%.0f" transform="rotate(90 %.0f %.0f)" text-anchor="middle">consumer lag</text>`, w-12, mt+ph/2, w-12, mt+ph/2)
	b.WriteString(line("#1f77b4", func(s drive.Sample) float64 { return s.ProducedRate }, yR, ""))
	b.WriteString(line("#2ca02c", func(s drive.Sample) float64 { return s.WrittenRate }, yR, ""))
	b.WriteString(line("#d62728", func(s drive.Sample) float64 { return float64(s.Lag) }, yL, `stroke-dasharray="6 3"`))
	for i, l := range []struct{ name, color string }{{"produced/s", "#1f77b4"}, {"written/s", "#2ca02c"}, {"lag (right axis)", "#d62728"}} {
		fmt.Fprintf(&b, `<rect x="%.0f" y="8" width="14" height="4" fill="%s"/><text x="%.0f" y="14">%s</text>`, ml+float64(i)*150, l.color, ml+float64(i)*150+18, l.name)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func niceCeil(v float64) float64 {
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func human(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.1fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.0fk", v/1e3)
	case v >= 10 || v == math.Trunc(v):
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.2g", v)
}

// percentile is the p-quantile of sorted.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p * float64(len(sorted)-1))
	return sorted[i]
}
