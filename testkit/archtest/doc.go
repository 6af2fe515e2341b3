// Package archtest holds the module's architecture rules as tests: the
// folders agree with the imports, retention sits above the hot path, the
// commands and the lab kit stay at the edges, and the ratchets on size
// that keep the code readable hold. It has no code of its own.
package archtest
