package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

type result struct {
	runID    string
	opts     *options
	mix      mix
	samples  []sample
	produced int64
	invalid  int
	elapsed  time.Duration
	check    *check
	// what a caller needs to verify later
	gen  *generator
	recs []record
}

// writeReport writes report.md and chart.svg and returns the report's path.
func writeReport(r *result) (string, error) {
	if err := os.MkdirAll(r.opts.reportDir, 0o755); err != nil {
		return "", fmt.Errorf("report dir: %w", err)
	}
	if err := os.WriteFile(filepath.Join(r.opts.reportDir, "chart.svg"), []byte(chart(r.samples)), 0o644); err != nil {
		return "", err
	}
	path := filepath.Join(r.opts.reportDir, "report.md")
	return path, os.WriteFile(path, []byte(markdown(r)), 0o644)
}

func markdown(r *result) string {
	var b strings.Builder
	o := r.opts
	fmt.Fprintf(&b, "# Load test %s\n\n", r.runID)
	fmt.Fprintf(&b, "Command: `go run ./loadtest %s`\n\n", strings.Join(os.Args[1:], " "))
	fmt.Fprintf(&b, "Date: %s. Mode: %s. Tenants: %s. Users: %d (Zipf %.2f). Payload: %d bytes. Malformed: %.1f%%. Target rate: %s.\n\n",
		time.Now().UTC().Format(time.RFC3339), map[bool]string{true: "embedded (kfake, bttest, worker process)", false: "external worker"}[o.embedded],
		strings.Join(r.mix.tenants, ", "), o.users, o.zipfS, o.payloadBytes, o.malformed*100, rateText(o.rate))
	var peakP, peakW float64
	var maxLag int64
	firstWrite, lastWrite := time.Duration(-1), time.Duration(0)
	var lastSample sample
	for _, s := range r.samples {
		peakP, peakW = math.Max(peakP, s.producedRate), math.Max(peakW, s.writtenRate)
		maxLag = max(maxLag, s.lag)
		if s.written > 0 && firstWrite < 0 {
			firstWrite = s.at - time.Second
		}
		if s.written > lastSample.written {
			lastWrite = s.at
		}
		lastSample = s
	}
	prodSecs := 0.0
	for _, s := range r.samples {
		if s.produced < r.produced {
			prodSecs = s.at.Seconds() + 1
		}
	}
	b.WriteString("| figure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| events produced | %d (%d malformed) |\n", r.produced, r.invalid)
	fmt.Fprintf(&b, "| written / dead-lettered (worker counters) | %d / %d |\n", lastSample.written, lastSample.dead)
	if prodSecs > 0 {
		fmt.Fprintf(&b, "| mean produce rate | %.0f events/s |\n", float64(r.produced)/prodSecs)
	}
	if firstWrite >= 0 && lastWrite > firstWrite {
		fmt.Fprintf(&b, "| mean write rate (first to last write) | %.0f events/s |\n", float64(lastSample.written)/(lastWrite-firstWrite).Seconds())
	}
	fmt.Fprintf(&b, "| peak produce / write rate (1s) | %.0f / %.0f events/s |\n", peakP, peakW)
	fmt.Fprintf(&b, "| max consumer lag | %d |\n", maxLag)
	fmt.Fprintf(&b, "| wall time | %s |\n", r.elapsed.Round(time.Second))
	if c := r.check; c != nil && len(c.latencies) > 0 {
		fmt.Fprintf(&b, "| produce → Bigtable ack (from written_at) p50 / p99 / max | %s / %s / %s |\n",
			percentile(c.latencies, 0.50).Round(time.Millisecond), percentile(c.latencies, 0.99).Round(time.Millisecond), c.latencies[len(c.latencies)-1].Round(time.Millisecond))
	}
	b.WriteString("\n![produced rate, written rate and lag](chart.svg)\n\n")
	if r.check != nil {
		b.WriteString("## Verification\n\n```\n" + r.check.summary() + "```\n")
	}
	return b.String()
}

// chart draws produced and written rates (left axis) and consumer lag
// (right axis) over time.
func chart(samples []sample) string {
	const w, h, ml, mr, mt, mb = 900.0, 360.0, 70.0, 70.0, 30.0, 40.0
	pw, ph := w-ml-mr, h-mt-mb
	var maxT, maxR float64
	var maxL int64
	for _, s := range samples {
		maxT = math.Max(maxT, s.at.Seconds())
		maxR = math.Max(maxR, math.Max(s.producedRate, s.writtenRate))
		maxL = max(maxL, s.lag)
	}
	maxT, maxR = math.Max(maxT, 1), niceCeil(math.Max(maxR, 1))
	lagTop := niceCeil(math.Max(float64(maxL), 1))
	x := func(t float64) float64 { return ml + t/maxT*pw }
	yR := func(v float64) float64 { return mt + ph - v/maxR*ph }
	yL := func(v float64) float64 { return mt + ph - v/lagTop*ph }
	line := func(color string, f func(s sample) float64, y func(float64) float64, dash string) string {
		var pts []string
		for _, s := range samples {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(s.at.Seconds()), y(f(s))))
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
	b.WriteString(line("#1f77b4", func(s sample) float64 { return s.producedRate }, yR, ""))
	b.WriteString(line("#2ca02c", func(s sample) float64 { return s.writtenRate }, yR, ""))
	b.WriteString(line("#d62728", func(s sample) float64 { return float64(s.lag) }, yL, `stroke-dasharray="6 3"`))
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
