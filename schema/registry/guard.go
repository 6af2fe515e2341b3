package registry

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/cellttl/cellttl/internal/bounded"
)

// The registry's answers are input too: a registry (or whatever answers
// at its URL) chooses their size, where they send the worker, and what
// they say back. The client's transport holds them to these bounds.
const (
	// maxAnswer bounds a successful answer (a schema and its envelope):
	// past it, the schema is invalid_schema, never an allocation of what
	// the answer claims.
	maxAnswer = 4 << 20
	// maxSchemas bounds a schema and all its references together.
	maxSchemas = 8 << 20
	// maxErrorAnswer bounds what is read of an error answer: its status
	// and code decide; the rest is dropped.
	maxErrorAnswer = 16 << 10
	// maxNesting bounds how deep a schema's text nests ({, [ and <,
	// outside strings and comments) before any compiler reads it: a
	// compiler's recursion grows with it.
	maxNesting = 64
)

// errAnswerTooLarge is a successful answer past maxAnswer.
var errAnswerTooLarge = fmt.Errorf("the registry's answer is larger than %d bytes", maxAnswer)

// guard is the registry client's transport (its http.Client follows no
// redirect: see noRedirect). It reads a successful answer up to maxAnswer,
// an error answer up to maxErrorAnswer; it replaces a redirect's body with
// where it pointed; and it strikes from an error answer the credentials
// the request carried, should the registry echo them.
type guard struct{ next http.RoundTripper }

func (g guard) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := g.next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		resp.Body = &capped{r: resp.Body, left: maxAnswer}
		return resp, nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorAnswer))
	resp.Body.Close()
	if resp.StatusCode >= 300 && resp.StatusCode < 400 {
		body = []byte(fmt.Sprintf("a redirect to %s, not followed: --schema-registry-url must answer itself", bounded.Text(redact(resp.Header.Get("Location")), 256)))
	}
	resp.Body = io.NopCloser(bytes.NewReader(strike(body, req)))
	return resp, nil
}

// noRedirect is the client's CheckRedirect: a redirect is the registry's
// answer, and no credential leaves for another place.
func noRedirect(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// strike replaces in body what req sent as credentials: its Authorization
// header, the token in it, and a basic password.
func strike(body []byte, req *http.Request) []byte {
	auth := req.Header.Get("Authorization")
	if auth == "" {
		return body
	}
	secrets := [][]byte{[]byte(auth)}
	if _, token, ok := bytes.Cut([]byte(auth), []byte(" ")); ok {
		secrets = append(secrets, token)
		if raw, err := base64.StdEncoding.DecodeString(string(token)); err == nil {
			if _, pw, ok := bytes.Cut(raw, []byte(":")); ok && len(pw) > 0 {
				secrets = append(secrets, raw, pw)
			}
		}
	}
	for _, s := range secrets {
		body = bytes.ReplaceAll(body, s, []byte("[redacted]"))
	}
	return body
}

// capped reads at most left bytes of r, and fails past them.
type capped struct {
	r    io.ReadCloser
	left int64
}

func (c *capped) Read(p []byte) (int, error) {
	if c.left <= 0 {
		var one [1]byte
		if n, _ := c.r.Read(one[:]); n > 0 {
			return 0, errAnswerTooLarge
		}
		return 0, io.EOF
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	return n, err
}

func (c *capped) Close() error { return c.r.Close() }

// nesting is how deep text nests {, [ and <, outside "strings" and //
// or /* comments: what a compiler recurses on.
func nesting(text string) int {
	depth, most := 0, 0
	inString, escaped := false, false
	for i := 0; i < len(text); i++ {
		c := text[i]
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '/' && i+1 < len(text) && text[i+1] == '/':
			for i < len(text) && text[i] != '\n' {
				i++
			}
		case c == '/' && i+1 < len(text) && text[i+1] == '*':
			end := strings.Index(text[i+2:], "*/")
			if end < 0 {
				return most
			}
			i += end + 3
		case c == '{' || c == '[' || c == '<':
			depth++
			most = max(most, depth)
		case c == '}' || c == ']' || c == '>':
			depth = max(depth-1, 0)
		}
	}
	return most
}

// errTooDeep is a schema that nests past maxNesting.
var errTooDeep = errors.New("nests deeper than the worker reads")
