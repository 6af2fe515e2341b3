// Package docscheck keeps the Markdown docs true and readable. It holds
// no code: its test reads README.md, docs/**/*.md, every DESIGN.md,
// BENCHMARKS.md, RELIABILITY.md and CHANGELOG.md, and fails when
//
//   - a relative link names a file that does not exist, or an #anchor that
//     is no heading of its target (GitHub's anchor rules);
//   - a `worker <command> --flag` names a command or a flag that
//     docs/reference/flags.md does not list (that file is generated from
//     the code, and cmd/worker's TestReference keeps it so); a `make
//     <target>` names no Makefile target; a scripts/ path does not exist;
//     a `go run ./loadtest <sub> --flag` names a flag loadtest/ does not
//     declare;
//   - the median sentence of a docs/ page, README.md or a DESIGN.md is
//     longer than 22 words, or one of its sentences longer than 50 (the
//     measure is defined in sentences_test.go);
//   - a Markdown file, or a Go comment outside the directories listed in
//     pendingIssueNumbers, cites an issue by its number: a reader cannot
//     look it up, so name what was built instead.
//
// It needs no services and runs in well under a second:
//
//	go test ./testkit/docscheck/
//	go test -v -run TestSentenceLength ./testkit/docscheck/   # each page's median
package docscheck
